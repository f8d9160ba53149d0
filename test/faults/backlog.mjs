// The large-backlog run (`npm run test:faults -- --backlog`): start shardq
// under `wrangler dev` with fresh state, pause delivery of a queue with an HTTP pull
// consumer and a dead-letter queue, fill it with a large backlog of large bodies (300,000
// messages, about 2.6 GB, by default) while sampling workerd's resident memory, ask every
// read answer at 10 %, 50 % and 100 % of the backlog (size and latency), SIGKILL and
// restart the service over the full backlog, ask them again, then resume delivery and
// drain it with pull consumers, timing resume to empty. The history goes
// through the fault checker (checker.mjs) like any fault run; the run passes when it is
// valid, memory stayed bounded and every answer stayed paged (backlog-report.mjs).
// Used by run.mjs and by test/e2e/faults.test.ts (the short run in `npm test`).
import { mkdirSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { freePort, ROOT } from "../../cli/wrangler/dev-server.mjs";
import { isolateHeapUsed } from "../../scripts/v8-inspector.mjs";
import { FillProducer, measuredPulls, probeReads, RssSampler } from "./backlog-load.mjs";
import { DLQ, drainQueues, QUEUE, restartOverBacklog, setUp } from "./backlog-phases.mjs";
import { backlogFigures, formatBacklogTable, writeBacklogReport } from "./backlog-report.mjs";
import { check } from "./checker.mjs";
import { apiClient } from "./client.mjs";
import { runDirs, Service } from "./faults.mjs";
import { History, readHistory } from "./history.mjs";
import { randomSeed } from "./prng.mjs";
import { runConsumer } from "./pull-consumer.mjs";
import { Budget } from "./workload.mjs";

const TOKEN = "shardq-local-dev-token";
/** The fill levels at which memory is compared and every read answer is asked. */
export const LEVELS = [0.1, 0.5, 1];

/**
 * @typedef {object} BacklogOptions
 * @property {"short" | "full"} mode
 * @property {number} seed
 * @property {number} messages      the backlog to build (sends certainly refused are sent again as new messages)
 * @property {number} producers
 * @property {number} consumers     pull consumers of the queue while it drains (the dead-letter queue has one more)
 * @property {number} poisonRate    share of messages every consumer retries until they move to the dead-letter queue
 * @property {number} drainTimeoutMs
 * @property {string} out
 * @property {boolean} keepState
 * @property {(line: string) => void} log
 */

/** @param {"short" | "full"} mode @returns {Omit<BacklogOptions, "out" | "log">} */
export function backlogDefaults(mode) {
  return {
    mode,
    seed: randomSeed(),
    messages: mode === "short" ? 10_000 : 300_000,
    producers: 4,
    consumers: 4,
    poisonRate: 0.002,
    drainTimeoutMs: mode === "short" ? 120_000 : 1_800_000,
    keepState: false,
  };
}

/** @param {Pick<BacklogOptions, "mode" | "seed" | "messages" | "producers" | "consumers">} o */
export function backlogReplay(o) {
  return `npm run test:faults -- --backlog ${o.mode === "short" ? "--short " : ""}--seed ${o.seed} --messages ${o.messages} --producers ${o.producers} --consumers ${o.consumers}`;
}

/** @param {"short" | "full"} mode @param {number} seed */
export function backlogOut(mode, seed) {
  const stamp = new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
  return join(ROOT, "test-artifacts", "faults", `${stamp}-backlog-${mode}-seed${seed}`);
}

/**
 * The options of `--backlog` from run.mjs's parsed arguments; a fault option with it is a usage error.
 * @param {Record<string, string | boolean | undefined>} v @param {(message: string) => Error} usage
 * @returns {BacklogOptions}
 */
export function backlogOptions(v, usage) {
  const mode = v.short ? "short" : "full";
  const d = backlogDefaults(mode);
  for (const k of ["faults", "kills", "aborts", "corruptions", "controls", "rate", "check"])
    if (v[k] !== undefined) throw usage(`--${k} is not an option of --backlog`);
  const int = (
    /** @type {string} */ name,
    /** @type {number} */ min,
    /** @type {number} */ max,
    /** @type {number} */ fallback,
  ) => {
    const s = v[name];
    if (s === undefined) return fallback;
    const x = Number(s);
    if (!Number.isInteger(x) || x < min || x > max) throw usage(`--${name} must be an integer from ${min} to ${max}`);
    return x;
  };
  const seed = int("seed", 1, 2 ** 31 - 1, d.seed);
  return {
    ...d,
    seed,
    messages: int("messages", 100, 2_000_000, d.messages),
    producers: int("producers", 1, 64, d.producers),
    consumers: int("consumers", 1, 64, d.consumers),
    keepState: v["keep-state"] === true,
    out: typeof v.out === "string" ? resolve(v.out) : backlogOut(mode, seed),
    log: (line) => console.log(line),
  };
}

/** @param {BacklogOptions} o */
export async function runBacklog(o) {
  const started = Date.now();
  const startedAt = new Date().toISOString();
  mkdirSync(o.out, { recursive: true });
  const dirs = runDirs("backlog");
  const { stateDir, registry, sourceDir } = dirs;
  const port = await freePort();
  const inspectorPort = await freePort();
  const service = new Service({
    port,
    sourceDir,
    stateDir,
    registry,
    logFile: join(o.out, "service.log"),
    inspectorPort,
  });
  // The JS heap of the isolate every storage shard runs in, so a bound on it bounds each shard's.
  const heap = () => isolateHeapUsed(inspectorPort, service.base);
  const historyFile = join(o.out, "history.jsonl");
  const history = new History(historyFile);
  const api = apiClient({ base: service.base, token: TOKEN, timeoutMs: 60_000 });
  const now = () => history.now();
  o.log(`backlog run: ${o.mode}, seed ${o.seed}, ${o.messages} messages; replay: ${backlogReplay(o)}`);
  o.log(`output: ${o.out}`);

  /** @type {import("./backlog-load.mjs").FillTally} */
  const tally = { okMessages: 0, okBytes: 0, unknownMessages: 0, failedMessages: 0, firstId: null, lastId: null };
  // What the sampler records RSS against: acknowledged sends while filling, the queue's metrics once draining.
  const gauge = { phase: "start", backlog: 0, bytes: 0 };
  const sampler = new RssSampler(
    () => service.server?.pid,
    () => (gauge.phase === "fill" ? { phase: "fill", backlog: tally.okMessages, bytes: tally.okBytes } : { ...gauge }),
    now,
  );
  const control = { stop: false };
  /** @type {Array<Promise<void>>} */
  let consumers = [];
  const late = /** @type {Set<Promise<void>>} */ (new Set());
  const measured = measuredPulls(api, now, () => gauge.backlog);
  /** @type {import("./backlog-report.mjs").Level[]} */
  const levels = [];
  let fillMs = 0;
  /** @type {number | null} */
  let resumedAt = null;
  /** @type {{ drained: boolean, backlog: Record<string, number | null>, emptyAt: number | null }} */
  let drain = { drained: false, backlog: {}, emptyAt: null };
  let drainMs = 0;
  const consumed = { delivered: 0 };
  /** @type {Awaited<ReturnType<typeof restartOverBacklog>> | null} */
  let restart = null;
  try {
    const readyMs = await service.start();
    await setUp(api);
    history.note("harness", "phase", {
      phase: "load",
      backlog: true,
      seed: o.seed,
      messages: o.messages,
      kills: 1,
      aborts: 0,
      corruptions: 0,
      rate: 0,
    });
    o.log(`service ready in ${readyMs} ms; delivery paused; filling with ${o.producers} producers`);
    sampler.start();
    gauge.phase = "fill";
    const producers = Array.from(
      { length: o.producers },
      (_, index) =>
        new FillProducer({ index, seed: o.seed, history, api, queue: QUEUE, poisonRate: o.poisonRate, tally }),
    );
    const fillStart = Date.now();
    const progress = setInterval(() => {
      const s = sampler.samples[sampler.samples.length - 1];
      o.log(
        `  ${Math.round((Date.now() - fillStart) / 1000)} s: ${tally.okMessages} stored (${mb(tally.okBytes)}), workerd RSS ${mb(s?.workerd.rss ?? 0)}`,
      );
    }, 10_000);
    try {
      let planned = 0;
      for (const level of LEVELS) {
        const target = Math.round(o.messages * level);
        const budget = new Budget(target - planned);
        planned = target;
        const t = Date.now();
        await Promise.all(producers.map((p) => p.run(budget, control)));
        fillMs += Date.now() - t;
        // The gauges with the level's backlog in place, before anything else runs.
        const rss = /** @type {import("./backlog-load.mjs").RssSample} */ (sampler.sample());
        const metrics = await api.call("GET", `/${QUEUE}/metrics`);
        const stored =
          metrics.outcome === "ok"
            ? {
                count: metrics.result.backlog_count,
                bytes: metrics.result.backlog_bytes,
                shards: metrics.result.shards.length,
              }
            : null;
        const probes = await probeReads({
          base: service.base,
          token: TOKEN,
          queue: QUEUE,
          ids: {
            first: tally.firstId,
            last: tally.lastId,
            middle: tally.sampledIds?.[Math.floor(tally.sampledIds.length / 2)] ?? null,
          },
        });
        const heapUsed = await heap();
        levels.push({
          level,
          sentOk: tally.okMessages,
          sentBytes: tally.okBytes,
          stored,
          rss,
          heap: heapUsed,
          fillMs,
          probes,
        });
        o.log(
          `  ${level * 100} %: ${tally.okMessages} stored (${mb(tally.okBytes)}) in ${Math.round(fillMs / 1000)} s, workerd RSS ${mb(rss.workerd.rss)}, JS heap ${mb(heapUsed)}; slowest read ${slowest(probes)}`,
        );
      }
    } finally {
      clearInterval(progress);
    }

    gauge.phase = "restart";
    gauge.backlog = levels[levels.length - 1]?.stored?.count ?? tally.okMessages;
    gauge.bytes = levels[levels.length - 1]?.stored?.bytes ?? tally.okBytes;
    const probe = () =>
      probeReads({
        base: service.base,
        token: TOKEN,
        queue: QUEUE,
        ids: {
          first: tally.firstId,
          last: tally.lastId,
          middle: tally.sampledIds?.[Math.floor(tally.sampledIds.length / 2)] ?? null,
        },
      });
    restart = await restartOverBacklog({ service, history, api, sample: () => sampler.sample(), probe, heap });
    o.log(
      `  SIGKILL and restart over the full backlog: ready in ${restart.ready_ms} ms, every storage shard answered ${restart.first_metrics_ms} ms later with ${restart.backlog} messages; workerd RSS ${mb(restart.rss.before_kill ?? 0)} before, ${mb(restart.rss.after_probes ?? 0)} after the reads; slowest read ${slowest(restart.probes)}`,
    );

    gauge.phase = "drain";
    const resumed = await api.call("PATCH", `/${QUEUE}`, { settings: { delivery_paused: false } });
    if (resumed.outcome !== "ok") throw new Error(`resume delivery: ${resumed.error}`);
    resumedAt = now();
    history.note("harness", "phase", { phase: "drain", resumed: true });
    o.log(`delivery resumed; draining with ${o.consumers} pull consumers`);
    const deadline = Date.now() + o.drainTimeoutMs;
    const consumer = (/** @type {string} */ name, /** @type {string} */ queue, /** @type {boolean} */ main) =>
      runConsumer({
        name,
        seed: o.seed,
        history,
        api: measured.api,
        queue,
        control,
        deadline,
        late,
        tally: consumed,
        // Full batches: the drain rate is the point. Some retries, drops and late acks all the same.
        minBatch: 100,
        maxBatch: 100,
        visibilityMs: [5000, 10_000],
        retryPoison: main,
        retryRate: main ? 0.01 : 0,
        dropRate: main ? 0.001 : 0,
        lateRate: main ? 0.001 : 0,
      });
    consumers = [
      ...Array.from({ length: o.consumers }, (_, i) => consumer(`consumer-${i}`, QUEUE, true)),
      consumer("dlq-consumer-0", DLQ, false),
    ];
    const drainStart = Date.now();
    const progress2 = setInterval(
      () =>
        o.log(
          `  ${Math.round((Date.now() - drainStart) / 1000)} s: backlog ${gauge.backlog} (${mb(gauge.bytes)}), ${consumed.delivered} delivered`,
        ),
      10_000,
    );
    try {
      drain = await drainQueues(api, late, deadline, now, gauge);
    } finally {
      clearInterval(progress2);
    }
    drainMs = Date.now() - drainStart;
    history.note("harness", "phase", { phase: "drained", drained: drain.drained, backlog: drain.backlog });
    sampler.sample();
    o.log(`drain ${drain.drained ? "done" : "NOT done"} in ${Math.round(drainMs / 1000)} s`);
  } finally {
    control.stop = true;
    sampler.stop();
    await Promise.allSettled(consumers);
    await Promise.allSettled([...late]);
    await history.close();
    await service.stop();
    dirs.remove(o.keepState);
  }

  const result = check(await readHistory(historyFile));
  const backlog = backlogFigures({
    levels,
    restart,
    samples: sampler.samples,
    pulls: measured.pulls,
    resumedAt,
    emptyAt: drain.emptyAt,
    tally,
  });
  const meta = {
    seed: o.seed,
    mode: `backlog-${o.mode}`,
    replay: backlogReplay(o),
    messages: o.messages,
    kills: 1,
    producers: o.producers,
    consumers: o.consumers,
    rate: 0,
    started_at: startedAt,
    load_s: Math.round(fillMs / 100) / 10,
    drain_s: Math.round(drainMs / 100) / 10,
    total_s: Math.round((Date.now() - started) / 100) / 10,
    history: relative(ROOT, resolve(historyFile)),
    out: o.out,
  };
  const ok = result.valid && backlog.memory.ok && backlog.paging.ok;
  const files = writeBacklogReport(result, backlog, meta, ok);
  o.log(formatBacklogTable(result, backlog, meta, ok));
  o.log(`report: ${files.md}`);
  return { ok, result, backlog, meta, files };
}

const mb = (/** @type {number} */ b) => `${(b / 1e6).toFixed(1)} MB`;

/** @param {import("./backlog-load.mjs").Probe[]} probes */
function slowest(probes) {
  const p = probes.reduce((a, b) => (Math.max(...b.ms) > Math.max(...a.ms) ? b : a));
  return `${p.name} ${Math.max(...p.ms)} ms`;
}
