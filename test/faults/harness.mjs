// A fault run: start shardq under `wrangler dev` with fresh state, create a queue with
// an HTTP pull consumer, a queue with a Worker consumer (push-faults.mjs) and a
// dead-letter queue, run producers and consumers while the nemesis hard-kills and
// restarts the service and resets single storage shards and consumer shards at the
// points the test hooks aim at (faults.mjs), with quiet phases in between where the
// producers stop and faults go on (quiet-phases.mjs), stop the faults, drain the queues
// (queues.mjs), then check the history and report. Used by run.mjs (`npm run test:faults`)
// and by test/e2e/faults.test.ts (the short run in `npm test`).
import { mkdirSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { freePort, ROOT } from "../../cli/wrangler/dev-server.mjs";
import { check } from "./checker.mjs";
import { apiClient } from "./client.mjs";
import { CONTROL_KINDS, MAX_PLAY_OUT_MS } from "./control-faults.mjs";
import { faultSchedule, runDirs, runNemesis, SHARD_ABORT_KINDS, Service } from "./faults.mjs";
import { History, readHistory } from "./history.mjs";
import { preparePushConsumer, PUSH_QUEUE, setUpPush, withConsumerAborts } from "./push-faults.mjs";
import { startPushSink } from "./push-sink.mjs";
import { DLQ, drain, MAX_RETRIES, quarantined, QUEUE, setUp, TOKEN } from "./queues.mjs";
import { formatTable, writeReport } from "./report.mjs";
import { replayCommand } from "./run-options.mjs";
import { END_STEP_MS, Watchdog } from "./watchdog.mjs";
import { runConsumer } from "./pull-consumer.mjs";
import { Budget, rateLimiter, runProducer, runRedriver } from "./workload.mjs";
import { dlqPurger } from "./dlq-purger.mjs";
import { keyedPoison } from "./keyed-poison.mjs";
import { RETRY_DELAYS_S, runPauser } from "./pause-delay.mjs";
import { quietGate, runQuietPhase, withQuietPhases } from "./quiet-phases.mjs";
import { outboxInRun } from "./outbox-workload.mjs";
import { shardqName } from "../../cli/workers/dev-session.mjs";

/** @typedef {import("./run-options.mjs").FaultOptions} FaultOptions */

/** The waits pull consumers draw for each pull (long polling): at once half the time. */
const LONG_POLLS_MS = [0, 0, 250, 1000, 3000];
/** Long polls of a second or more abandoned part way and cancelled, as a consumer that stops does. */
const ABANDON_RATE = 0.1;

/** Time for the check and the report after the run's last step (a full run's history holds about a million lines). */
const CHECK_MS = 10 * 60_000;
/** Time to the first message sent: starting wrangler (3 tries of 60 s) and the set-up calls. */
const START_MS = 5 * 60_000;

/**
 * A fault run that always ends, with a verdict or with what it was still waiting for at
 * its deadline (watchdog.mjs).
 * @param {FaultOptions} o
 */
export async function runFaults(o) {
  mkdirSync(o.out, { recursive: true });
  const history = new History(join(o.out, "history.jsonl"));
  const dog = new Watchdog({ history, log: o.log });
  dog.deadline(Date.now() + START_MS);
  try {
    return await Promise.race([run(o, history, dog), dog.expired]);
  } finally {
    dog.disarm();
  }
}

/** @param {FaultOptions} o @param {History} history @param {Watchdog} dog */
async function run(o, history, dog) {
  const started = Date.now();
  const startedAt = new Date().toISOString();
  const dirs = runDirs("faults");
  const { stateDir, registry, sourceDir } = dirs;
  const port = await freePort();
  const historyFile = history.file;
  const pushTally = { delivered: 0 };
  const sink = await startPushSink({ history, tally: pushTally });
  // The outbox and inbox workload's Worker runs in a wrangler dev of its own (outbox-workload.mjs).
  const outbox = outboxInRun({
    o,
    history,
    sourceDir,
    registry,
    logFile: join(o.out, "outbox.log"),
    shardq: shardqName(),
  });
  const service = new Service({
    port,
    sourceDir,
    stateDir,
    registry,
    logFile: join(o.out, "service.log"),
    workers: [preparePushConsumer(sourceDir, { seed: o.seed, sinkUrl: sink.url, leaseMs: o.pushLeaseMs })],
    remoteConsumers: outbox.remoteConsumers,
    vars: { PUSH_LEASE_MS: String(o.pushLeaseMs) },
  });
  const api = apiClient({ base: service.base, token: TOKEN });
  // At the deadline nothing more is waited for: the service goes (and with it any call to it).
  dog.onExpire.push(() => service.kill());
  const schedule = withQuietPhases(withConsumerAborts(faultSchedule(o.seed, o), o.seed, o), o.seed, o);
  const count = (/** @type {(kind: string) => boolean} */ f) => schedule.filter((s) => f(s.kind)).length;
  // Each quiet phase kills the service and resets a storage shard, when the run has those kinds.
  const quiet = {
    phases: count((k) => k === "quiet"),
    ms: o.quietMs,
    kill: o.faults.includes("kill"),
    abort: o.faults.includes("abort-ack"),
  };
  const planned = {
    kills: count((k) => k === "kill") + (quiet.kill ? quiet.phases : 0),
    aborts: count((k) => SHARD_ABORT_KINDS.includes(k)) + (quiet.abort ? quiet.phases : 0),
    corruptions: count((k) => k === "corrupt"),
    controls: count((k) => CONTROL_KINDS.includes(k)),
    consumerAborts: count((k) => k === "abort-consumer"),
  };
  o.log(
    `fault run: ${o.mode}, seed ${o.seed}, ${o.messages} messages, faults ${o.faults.join(",")}: ${quiet.phases} quiet phases of ${o.quietMs / 1000} s, ${planned.kills} kills, ${planned.aborts} aborts, ${planned.corruptions} corruptions of ${o.corruptEach}; replay: ${replayCommand(o)}`,
  );
  o.log(`output: ${o.out}`);

  /** @type {Array<Promise<void>>} */
  let consumers = [];
  /** @type {Array<Promise<void>>} */
  let producers = [];
  /** @type {Promise<void>} */
  let outboxLoad = Promise.resolve();
  const late = /** @type {Set<Promise<void>>} */ (new Set());
  const control = { stop: false };
  /** @type {string[]} the message ids the nemesis corrupted */
  const corrupted = [];
  let loadMs = 0;
  let drainMs = 0;
  try {
    dog.step("the service to start");
    const firstStartMs = await service.start();
    await setUp(api);
    await setUpPush(api, DLQ);
    await outbox.start(api);
    // Spread the sends over the planned fault time, so every kill lands under load.
    // A restart takes longer than the first start, and an abort waits for the call it aims at
    // (a storage shard's: 2.5 s at the median; a consumer shard's, for the batch in its
    // consumer's hands: 5 s). Underestimated, the load ends before the last faults, and an
    // abort armed then may find no call to fire it.
    const fault = (/** @type {string} */ kind) =>
      kind === "kill"
        ? 1.3 * firstStartMs
        : kind === "quiet"
          ? o.quietMs
          : kind === "abort-consumer"
            ? 5000
            : SHARD_ABORT_KINDS.includes(kind)
              ? 2500
              : 1000;
    const plannedMs = schedule.reduce((t, s) => t + s.upMs + s.downMs + fault(s.kind), 0);
    // The producers stand still through the quiet phases: the messages go in the rest of the time.
    const sendingMs = plannedMs - quiet.phases * o.quietMs;
    const rate = o.rate || (schedule.length > 0 ? Math.ceil((o.messages * 1000) / Math.max(sendingMs, 10_000)) : 0);
    const loadDeadline = Date.now() + Math.max(120_000, 3 * plannedMs + (o.messages / 500) * 1000);
    history.note("harness", "phase", {
      phase: "load",
      seed: o.seed,
      messages: o.messages,
      faults: o.faults,
      ...planned,
      rate,
      schedule,
      pushQueue: PUSH_QUEUE,
      pushLeaseMs: o.pushLeaseMs,
      redrive: true,
      quiet,
      ordered: o.orderedRate ? { rate: o.orderedRate, keys_per_producer: o.orderingKeys } : null,
    });
    o.log(
      `service ready in ${firstStartMs} ms; sending at ${rate || "full speed"} msg/s; faults planned over ${Math.round(plannedMs / 1000)} s`,
    );

    const tally = { okMessages: 0, delivered: 0, abandoned: 0, cancelled: 0 };
    const moves = { redrives: 0, moved: 0 };
    const purges = { purges: 0, purged: 0 };
    const pauses = { pauses: 0 };
    // Control faults may still be playing out when the load deadline passes (control-faults.mjs).
    const consumerDeadline = loadDeadline + (planned.controls ? MAX_PLAY_OUT_MS : 0) + o.drainTimeoutMs;
    // The run's own time bound: every loop ends by consumerDeadline, then each end step and the check have theirs.
    dog.deadline(consumerDeadline + Object.values(END_STEP_MS).reduce((a, b) => a + b, 0) + CHECK_MS);
    // The dead-letter queue's consumer pauses while the redriver lets messages gather there.
    const held = { paused: false };
    const gate = quietGate();
    const consumer = (/** @type {string} */ name, /** @type {string} */ queue, /** @type {boolean} */ main) =>
      runConsumer({
        name,
        seed: o.seed,
        history,
        api,
        queue,
        control,
        deadline: consumerDeadline,
        late,
        tally,
        ...(main ? {} : { held }),
        minBatch: 10,
        maxBatch: 100,
        visibilityMs: o.visibilityMs,
        retryPoison: main,
        waitMs: LONG_POLLS_MS,
        abandonRate: ABANDON_RATE,
        ...(main ? { retryDelays: RETRY_DELAYS_S } : {}),
        // The dead-letter queue's consumer acks everything.
        retryRate: main ? 0.01 : 0,
        dropRate: main ? 0.002 : 0,
        lateRate: main ? 0.002 : 0,
      });
    consumers = [
      ...Array.from({ length: o.consumers }, (_, i) => consumer(`consumer-${i}`, QUEUE, true)),
      consumer("dlq-consumer-0", DLQ, false),
    ];

    const loadStart = Date.now();
    const budget = new Budget(o.messages);
    const limiter = rateLimiter(rate);
    const progress = setInterval(
      () =>
        o.log(
          `  ${Math.round((Date.now() - loadStart) / 1000)} s: ${tally.okMessages} sent ok, ${tally.delivered} pulled, ${pushTally.delivered} pushed`,
        ),
      10_000,
    );
    try {
      let producing = o.producers;
      producers = Array.from({ length: o.producers }, (_, index) =>
        gate
          .track(
            `producer-${index}`,
            runProducer({
              gate,
              index,
              seed: o.seed,
              history,
              api,
              queue: QUEUE,
              pushQueue: PUSH_QUEUE,
              pushRate: o.pushRate,
              control,
              budget,
              limiter,
              deadline: loadDeadline,
              maxBatch: 100,
              burstRate: 0.25,
              poisonRate: 0.005,
              padMax: 200,
              keyRate: o.keyRate,
              delayRate: o.faults.includes("corrupt") ? 0.2 : 0.05,
              orderedRate: o.orderedRate,
              orderingKeys: o.orderingKeys,
              idRate: 0.25,
              keyedPoison: keyedPoison({ seed: o.seed, index, rate: 0.02 }),
              tally,
            }),
          )
          .finally(() => producing--),
      );
      const controlFaults = {
        history,
        api,
        queue: QUEUE,
        holdMapMs: o.holdMapMs,
        alarmThrows: o.alarmThrows,
        consumerQueue: PUSH_QUEUE,
      };
      const redriver = gate.track(
        "redriver",
        runRedriver({
          gate,
          seed: o.seed,
          history,
          api,
          dlq: DLQ,
          targets: [QUEUE, PUSH_QUEUE],
          control,
          deadline: loadDeadline,
          loadDone: () => producing === 0,
          held,
          tally: moves,
          purger: dlqPurger({ seed: o.seed, history, api, dlq: DLQ, deadLetterAfter: MAX_RETRIES + 1, tally: purges }),
        }),
      );
      const nemesis = runNemesis({
        history,
        service,
        schedule,
        deadline: loadDeadline,
        api,
        queue: QUEUE,
        outboxQueue: outbox.queue,
        corruptEach: o.corruptEach,
        corrupted,
        loadDone: () => producing === 0,
        controlFaults,
        onEvent: (line) => o.log(`  ${line}`),
        quiet: (step, n) =>
          runQuietPhase(
            {
              history,
              api,
              service,
              queue: QUEUE,
              pushQueue: PUSH_QUEUE,
              gate,
              quietMs: o.quietMs,
              kill: quiet.kill,
              abort: quiet.abort,
            },
            step,
            n,
          ),
      });
      // An operator pauses and resumes the pull queue's delivery while pulls wait (pause-delay.mjs).
      const pauser = gate.track(
        "pauser",
        runPauser({
          gate,
          seed: o.seed,
          history,
          api,
          queue: QUEUE,
          control,
          deadline: loadDeadline,
          loadDone: () => producing === 0,
          tally: pauses,
        }),
      );
      outboxLoad = outbox.load({
        gate,
        until: () => control.stop || producing === 0 || Date.now() > loadDeadline,
        spanMs: plannedMs,
        onEvent: (line) => o.log(`  ${line}`),
      });
      dog.step("the producers, the nemesis, the redriver, the pauser and the outbox workload");
      await Promise.all([...producers, nemesis, redriver, pauser, outboxLoad]);
    } finally {
      clearInterval(progress);
    }
    loadMs = Date.now() - loadStart;
    o.log(
      `load and faults done in ${Math.round(loadMs / 1000)} s: ${tally.okMessages} sent ok, ${tally.delivered} pulled, ${pushTally.delivered} pushed, ${moves.moved} redriven in ${moves.redrives} redrives, ${purges.purged} purged from the dead-letter queue in ${purges.purges} purges during them, ${tally.abandoned} long polls abandoned (${tally.cancelled} cancelled while waiting), ${pauses.pauses} pauses of delivery; draining`,
    );

    const drainStart = Date.now();
    history.note("harness", "phase", { phase: "drain" });
    dog.step("the drain");
    const drained = await drain(api, late, Math.min(drainStart + o.drainTimeoutMs, consumerDeadline));
    drainMs = Date.now() - drainStart;
    if (planned.corruptions > 0) Object.assign(drained, await quarantined(api, new Set(corrupted).size));
    history.note("harness", "phase", { phase: "drained", ...drained });
    dog.step("the outbox workload to settle");
    const settled = await outbox.settle();
    if (settled)
      o.log(
        `outbox workload ${settled.settled ? "settled" : "NOT settled"}: ${outbox.tally.increments} increments acknowledged (${outbox.tally.messages} messages), ${outbox.tally.unknown} unknown`,
      );
    o.log(
      `drain ${drained.drained ? "done" : "NOT done"} in ${Math.round(drainMs / 1000)} s (backlog ${JSON.stringify(drained.backlog)})`,
    );
  } finally {
    // Nothing may write to the history once it is closed: every client ends first
    // (each loop and each late ack is bounded in time).
    // Each step is bounded (watchdog.mjs): one that hangs is named, and the run goes on to its verdict.
    control.stop = true;
    await dog.bounded(
      "the producers and consumers to stop",
      Promise.allSettled([...producers, ...consumers]),
      END_STEP_MS.clients,
    );
    await dog.bounded("the outbox workload's producers to stop", outboxLoad, END_STEP_MS.clients);
    await dog.bounded(`the late acks (${late.size})`, Promise.allSettled([...late]), END_STEP_MS.late);
    // Push handlers still running (a hang) report into nothing from here on.
    await dog.bounded("the push sink to close", sink.close(), END_STEP_MS.sink);
    await dog.bounded("the history file to close", history.close(), END_STEP_MS.history);
    await dog.bounded("the outbox workload's Worker to stop", outbox.stop(), END_STEP_MS.service);
    await dog.bounded("the service to stop", service.stop(), END_STEP_MS.service);
    dirs.remove(o.keepState);
  }

  dog.step("the check of the history");
  const checkStart = Date.now();
  const result = check(await readHistory(historyFile));
  o.log(`history checked in ${Math.round((Date.now() - checkStart) / 1000)} s`);
  if (dog.stuck.length) {
    result.valid = false;
    result.failures.push(`the run's end did not finish: still waiting for ${dog.stuck.join(", ")} past its bound`);
  }
  /** @type {import("./report.mjs").RunMeta} */
  const meta = {
    seed: o.seed,
    mode: o.mode,
    replay: replayCommand(o),
    messages: o.messages,
    faults: o.faults,
    kills: planned.kills,
    aborts: planned.aborts,
    corruptions: planned.corruptions,
    producers: o.producers,
    consumers: o.consumers,
    rate: result.figures.plan?.rate ?? o.rate,
    started_at: startedAt,
    load_s: Math.round(loadMs / 100) / 10,
    drain_s: Math.round(drainMs / 100) / 10,
    total_s: Math.round((Date.now() - started) / 100) / 10,
    history: relative(ROOT, resolve(historyFile)),
    out: o.out,
  };
  const files = writeReport(result, meta);
  o.log(formatTable(result, meta));
  o.log(`report: ${files.md}`);
  return { result, meta, files };
}
