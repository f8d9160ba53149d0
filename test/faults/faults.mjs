// The fault side of a run: the shardq service under `wrangler dev` on its own port,
// state and dev registry, and the nemesis that, on a seeded schedule, hard-kills it
// (SIGKILL to wrangler's whole process group, workerd included) and restarts it on the
// same --persist-to state, or resets one storage shard at an exact point through the
// test hooks (storage-shard/test-hooks.ts): once an append is durable and before its
// reply ("abort-append"), or at the next ack or retry it is asked to apply ("abort-ack");
// or corrupts a few stored bodies of one shard ("corrupt"), both shard-faults.mjs's.
import { cpSync, createWriteStream, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeDevConfig } from "../../cli/wrangler/dev-config.mjs";
import { ROOT, startWrangler } from "../../cli/wrangler/dev-server.mjs";
import { CONTROL_KINDS, runControlFault } from "./control-faults.mjs";
import { prng } from "./prng.mjs";
import { abortConsumerShard } from "./push-faults.mjs";
import { abortShard, corruptBodies } from "./shard-faults.mjs";
import { sleep } from "./workload.mjs";

/** The fault kinds a run can inject (`--faults`). */
export const FAULT_KINDS = ["kill", "abort-append", "abort-ack", "corrupt", "abort-consumer", ...CONTROL_KINDS];
/** The storage shard resets (`--aborts`), in turn. */
export const SHARD_ABORT_KINDS = ["abort-append", "abort-ack"];

/**
 * @typedef {{ kind: string, upMs: number, downMs: number, pick: number }} FaultStep
 *   kind: "kill" or an abort kind; upMs: how long the service runs before it; downMs: how
 *   long a killed service stays dead; pick: which shard an abort aims at (index = pick * shards)
 */

/**
 * The fault schedule a seed fixes: `kills` kills, `aborts` aborts (the abort kinds in
 * turn) and `corruptions` corruptions, in a seeded order; times are relative to the
 * previous fault's end.
 * @param {number} seed
 * @param {{ kills: number, aborts: number, corruptions: number, controls: number, faults: string[], upMs: [number, number], downMs: [number, number], abortUpMs: [number, number] }} o
 * @returns {FaultStep[]}
 */
export function faultSchedule(seed, o) {
  const rng = prng(seed, "nemesis");
  const abortKinds = o.faults.filter((k) => SHARD_ABORT_KINDS.includes(k));
  const controlKinds = o.faults.filter((k) => CONTROL_KINDS.includes(k));
  const kinds = [
    ...Array.from({ length: o.faults.includes("kill") ? o.kills : 0 }, () => "kill"),
    ...Array.from(
      { length: abortKinds.length ? o.aborts : 0 },
      (_, i) => /** @type {string} */ (abortKinds[i % abortKinds.length]),
    ),
    ...Array.from({ length: o.faults.includes("corrupt") ? o.corruptions : 0 }, () => "corrupt"),
    ...Array.from(
      { length: controlKinds.length ? o.controls : 0 },
      (_, i) => /** @type {string} */ (controlKinds[i % controlKinds.length]),
    ),
  ];
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = rng.int(0, i);
    [kinds[i], kinds[j]] = [/** @type {string} */ (kinds[j]), /** @type {string} */ (kinds[i])];
  }
  return kinds.map((kind) => ({
    kind,
    upMs: Math.round(rng.between(...(kind === "kill" ? o.upMs : o.abortUpMs))),
    downMs: kind === "kill" ? Math.round(rng.between(...o.downMs)) : 0,
    pick: rng.next(),
  }));
}

/** What `wrangler dev` needs to run the service: its config, local secrets, sources and dashboard files. */
const SERVICE_FILES = [
  "wrangler.toml",
  ".dev.vars",
  "package.json",
  "src",
  "broker",
  "coordinator",
  "storage-shard",
  "consumer-shard",
  "dashboard",
];

/**
 * A copy of the service's files as they are now, with node_modules linked. `wrangler
 * dev` reloads the Worker whenever a file it watches changes, and a reload restarts
 * every Durable Object: a run on the working tree would get restarts nobody scheduled
 * (and a half-saved file) whenever someone edits the code during the run.
 * @returns {string} the directory; remove it when done
 */
function snapshotService() {
  const dir = mkdtempSync(join(tmpdir(), "shardq-faults-src-"));
  for (const f of SERVICE_FILES) cpSync(join(ROOT, f), join(dir, f), { recursive: true });
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"), "dir");
  return dir;
}

/**
 * The directories a run's service needs: a snapshot of the service's files, a fresh
 * --persist-to state and a dev registry of its own; `remove` deletes them (the state
 * kept on request).
 * @param {string} kind "faults", "backlog": part of the temporary directories' names
 */
export function runDirs(kind) {
  const stateDir = mkdtempSync(join(tmpdir(), `shardq-${kind}-state-`));
  const registry = mkdtempSync(join(tmpdir(), `shardq-${kind}-registry-`));
  const sourceDir = snapshotService();
  return {
    stateDir,
    registry,
    sourceDir,
    /** @param {boolean} keepState */
    remove(keepState) {
      if (!keepState) rmSync(stateDir, { recursive: true, force: true });
      rmSync(registry, { recursive: true, force: true });
      rmSync(sourceDir, { recursive: true, force: true });
    },
  };
}

/**
 * shardq under `wrangler dev` (from a snapshot of its files) on a fixed port, state
 * directory and dev registry, from a config generated into the snapshot with the test
 * hooks on (SHARDQ_TEST_HOOKS: only ever set here, never in wrangler.toml).
 */
export class Service {
  /**
   * @param {{ port: number, sourceDir: string, stateDir: string, registry: string, logFile: string,
   *   workers?: Array<{ config: string, binding: string, service: string }>, vars?: Record<string, string>, inspectorPort?: number,
   *   remoteConsumers?: Array<{ binding: string, service: string, entrypoint: string }> }} o
   *   workers: consumer Workers run in the same wrangler dev (a service binding must stay in-process), bound
   *   to shardq, killed and restarted with it; vars: more vars for shardq; inspectorPort: where
   *   wrangler serves shardq's V8 inspector (default none); remoteConsumers: consumer Workers in a wrangler
   *   dev of their own, reached through the dev registry at an entrypoint
   */
  constructor(o) {
    this.o = o;
    this.base = `http://127.0.0.1:${o.port}`;
    this.log = createWriteStream(o.logFile, { flags: "a" });
    /** @type {Awaited<ReturnType<typeof startWrangler>> | null} */
    this.server = null;
    /** @type {string | undefined} */
    this.configFile = undefined;
    this.starts = 0;
  }

  /** Starts it (a few tries: wrangler can fail to bind right after a kill); returns the ms it took to be ready. */
  async start() {
    const t0 = performance.now();
    for (let attempt = 1; ; attempt++) {
      this.log.write(`--- start ${++this.starts} (attempt ${attempt}) at ${new Date().toISOString()}\n`);
      try {
        this.server = await startWrangler({
          args: [
            "-c",
            this.config(),
            ...(this.o.workers ?? []).flatMap((w) => ["-c", w.config]),
            "--port",
            String(this.o.port),
            "--ip",
            "127.0.0.1",
            "--persist-to",
            this.o.stateDir,
            "--inspector-port",
            String(this.o.inspectorPort ?? 0),
          ],
          readyUrl: `${this.base}/`,
          env: { WRANGLER_REGISTRY_PATH: this.o.registry },
          log: (line) => this.log.write(`${line}\n`),
          timeoutMs: 60_000,
        });
        return Math.round(performance.now() - t0);
      } catch (err) {
        this.log.write(`start failed: ${String(err).slice(0, 2000)}\n`);
        if (attempt >= 3) throw err;
        await sleep(1000);
      }
    }
  }

  /** The generated config: wrangler.toml plus the local-dev flag, bindings to the consumer Workers, the hooks on. */
  config() {
    const consumers = [
      ...(this.o.workers ?? []).map((w) => ({ binding: w.binding, service: w.service })),
      ...(this.o.remoteConsumers ?? []),
    ];
    this.configFile ??= writeDevConfig({
      file: join(this.o.sourceDir, "wrangler.faults.toml"),
      consumers,
      vars: { SHARDQ_TEST_HOOKS: "on", ...this.o.vars },
    });
    return this.configFile;
  }

  /** SIGKILL to the process group; a killed wrangler leaves its dev-registry entry behind, which is cleared (as scripts/start.mjs does). */
  async kill() {
    const server = this.server;
    this.server = null;
    this.log.write(`--- SIGKILL at ${new Date().toISOString()}\n`);
    await server?.stop("SIGKILL");
    for (const name of ["shardq", ...(this.o.workers ?? []).map((w) => w.service)])
      rmSync(join(this.o.registry, name), { force: true });
  }

  async stop() {
    const server = this.server;
    this.server = null;
    await server?.stop();
    await new Promise((r) => this.log.end(r));
  }
}

/**
 * Runs the schedule, logging each fault as an operation of the process "nemesis". A
 * kill: wait, kill (with a send in flight), wait, restart ("kill" and "start"). An
 * abort ("abort"): wait, arm the hook of one storage shard (seeded pick among the
 * queue's shards), and poll until that shard's instance id changes: the abort happened
 * between the invoke and the completion logged. Stops early (without faults) at the deadline.
 * A corruption ("corrupt"): flip a byte of `corruptEach` stored bodies of one shard,
 * logging the message ids it corrupted. A control fault (control-faults.mjs) runs, and
 * the nemesis goes on while it plays out; it returns once every one has.
 * @param {{ history: import("./history.mjs").History, service: Service, schedule: FaultStep[], deadline: number,
 *   api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string, outboxQueue?: string, corruptEach: number, corrupted: string[], loadDone: () => boolean,
 *   controlFaults: import("./control-faults.mjs").ControlContext, onEvent?: (line: string) => void, quiet?: (step: FaultStep, n: number) => Promise<string> }} o
 *   quiet: runs a quiet phase, a step of kind "quiet" (quiet-phases.mjs)
 * @returns {Promise<number>} the faults done
 */
export async function runNemesis(o) {
  let done = 0;
  let kills = 0;
  let aborts = 0;
  let quiets = 0;
  /** @type {Record<string, number>} */
  const controls = {};
  /** Control faults still playing out (an alarm's retries take minutes): awaited at the end. */
  /** @type {Array<Promise<void>>} */
  const recoveries = [];
  for (const [i, step] of o.schedule.entries()) {
    if (Date.now() + step.upMs > o.deadline) break;
    await sleep(step.upMs);
    // Once the producers are done no append comes to fire an abort-append, and the acks
    // that could fire an abort-ack soon run out: logged as skipped.
    if ((step.kind === "abort-append" || step.kind === "abort-ack") && o.loadDone()) {
      o.history.note("nemesis", "skipped", { kind: step.kind, why: "the load was over" });
      o.onEvent?.(`fault ${i + 1}/${o.schedule.length}: ${step.kind} skipped: the load was over`);
      continue;
    }
    if (CONTROL_KINDS.includes(step.kind)) {
      const r = await runControlFault(o.controlFaults, step, (controls[step.kind] = (controls[step.kind] ?? 0) + 1));
      o.onEvent?.(`fault ${i + 1}/${o.schedule.length}: ${r.line}`);
      recoveries.push(
        r.recovered.then(() => o.onEvent?.(`fault ${i + 1}/${o.schedule.length}: ${step.kind} played out`)),
      );
      done++;
      continue;
    }
    if (step.kind === "quiet" && o.quiet) {
      o.onEvent?.(`fault ${i + 1}/${o.schedule.length}: ${await o.quiet(step, ++quiets)}`);
      done++;
      continue;
    }
    if (step.kind === "abort-consumer") {
      o.onEvent?.(`fault ${i + 1}/${o.schedule.length}: ${await abortConsumerShard(o, i)}`);
      done++;
      continue;
    }
    if (step.kind === "corrupt") {
      const r = await corruptBodies(o, step);
      o.onEvent?.(
        `fault ${i + 1}/${o.schedule.length}: corrupted ${r.ids.length} stored bodies on ${r.shards.join(", ")}`,
      );
      done++;
      continue;
    }
    if (step.kind !== "kill") {
      // Every third storage shard reset hits the outbox workload's queue, when the run has one.
      const n = ++aborts;
      const r = await abortShard(n % 3 === 0 && o.outboxQueue ? { ...o, queue: o.outboxQueue } : o, step, n);
      o.onEvent?.(
        `fault ${i + 1}/${o.schedule.length}: ${step.kind} of ${r.shard}: ${r.fired ? `reset ${r.ms} ms after arming` : `NOT fired (${r.error})`}`,
      );
      done++;
      continue;
    }
    const n = ++kills;
    // Kill while a send is in flight (waiting at most 2 s for one), so each kill leaves
    // sends whose outcome is unknown: the case at-least-once has to get right.
    const aim = Date.now() + 2000;
    while (o.history.inFlight("send") === 0 && Date.now() < aim) await new Promise((r) => setImmediate(r));
    const inFlight = {
      send: o.history.inFlight("send"),
      pull: o.history.inFlight("pull"),
      ack: o.history.inFlight("ack"),
    };
    const kill = o.history.invoke("nemesis", "kill", {
      n,
      signal: "SIGKILL",
      pid: o.service.server?.pid ?? null,
      in_flight: inFlight,
    });
    await o.service.kill();
    o.history.complete(kill, "ok");
    done++;
    await sleep(step.downMs);
    const start = o.history.invoke("nemesis", "start", { n });
    try {
      const ms = await o.service.start();
      o.history.complete(start, "ok", { ready_ms: ms });
      o.onEvent?.(
        `fault ${i + 1}/${o.schedule.length}: kill ${n}: dead for ${step.downMs} ms, ready ${ms} ms after the restart`,
      );
    } catch (err) {
      o.history.complete(start, "fail", { error: String(err).slice(0, 500) });
      throw err;
    }
  }
  await Promise.all(recoveries);
  return done;
}
