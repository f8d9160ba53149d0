// The fault side of a run: the shardq service under `wrangler dev` on its own port,
// state and dev registry, and the nemesis that hard-kills it (SIGKILL to wrangler's
// whole process group, workerd included) on a seeded schedule and restarts it on the
// same --persist-to state.
import { cpSync, createWriteStream, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, startWrangler } from "../../scripts/dev-server.mjs";
import { prng } from "./prng.mjs";
import { sleep } from "./workload.mjs";

/**
 * @typedef {{ upMs: number, downMs: number }} KillStep
 *   upMs: how long the service runs before the kill; downMs: how long it stays dead
 */

/**
 * The kill schedule a seed fixes: times are relative to the service being ready.
 * @param {number} seed
 * @param {{ kills: number, upMs: [number, number], downMs: [number, number] }} o
 * @returns {KillStep[]}
 */
export function killSchedule(seed, o) {
  const rng = prng(seed, "nemesis");
  return Array.from({ length: o.kills }, () => ({ upMs: Math.round(rng.between(...o.upMs)), downMs: Math.round(rng.between(...o.downMs)) }));
}

/** What `wrangler dev` needs to run the service: its config, local secrets, sources and dashboard files. */
const SERVICE_FILES = ["wrangler.toml", ".dev.vars", "package.json", "src", "broker", "coordinator", "storage-shard", "consumer-shard", "dashboard"];

/**
 * A copy of the service's files as they are now, with node_modules linked. `wrangler
 * dev` reloads the Worker whenever a file it watches changes, and a reload restarts
 * every Durable Object: a run on the working tree would get restarts nobody scheduled
 * (and a half-saved file) whenever someone edits the code during the run.
 * @returns {string} the directory; remove it when done
 */
export function snapshotService() {
  const dir = mkdtempSync(join(tmpdir(), "shardq-faults-src-"));
  for (const f of SERVICE_FILES) cpSync(join(ROOT, f), join(dir, f), { recursive: true });
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"), "dir");
  return dir;
}

/** shardq under `wrangler dev` (from a snapshot of its files) on a fixed port, state directory and dev registry. */
export class Service {
  /** @param {{ port: number, sourceDir: string, stateDir: string, registry: string, logFile: string }} o */
  constructor(o) {
    this.o = o;
    this.base = `http://127.0.0.1:${o.port}`;
    this.log = createWriteStream(o.logFile, { flags: "a" });
    /** @type {Awaited<ReturnType<typeof startWrangler>> | null} */
    this.server = null;
    this.starts = 0;
  }

  /** Starts it (a few tries: wrangler can fail to bind right after a kill); returns the ms it took to be ready. */
  async start() {
    const t0 = performance.now();
    for (let attempt = 1; ; attempt++) {
      this.log.write(`--- start ${++this.starts} (attempt ${attempt}) at ${new Date().toISOString()}\n`);
      try {
        this.server = await startWrangler({
          args: ["-c", join(this.o.sourceDir, "wrangler.toml"), "--port", String(this.o.port), "--ip", "127.0.0.1", "--persist-to", this.o.stateDir, "--inspector-port", "0"],
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

  /** SIGKILL to the process group; a killed wrangler leaves its dev-registry entry behind, which is cleared (as scripts/start.mjs does). */
  async kill() {
    const server = this.server;
    this.server = null;
    this.log.write(`--- SIGKILL at ${new Date().toISOString()}\n`);
    await server?.stop("SIGKILL");
    rmSync(join(this.o.registry, "shardq"), { force: true });
  }

  async stop() {
    const server = this.server;
    this.server = null;
    await server?.stop();
    await new Promise((r) => this.log.end(r));
  }
}

/**
 * Runs the schedule: wait, kill (with a send in flight), wait, restart, logging each kill and start as an
 * operation of the process "nemesis". Stops early (without killing) at the deadline.
 * @param {{ history: import("./history.mjs").History, service: Service, schedule: KillStep[], deadline: number,
 *   onEvent?: (line: string) => void }} o
 * @returns {Promise<number>} the kills done
 */
export async function runNemesis(o) {
  let done = 0;
  for (const [i, step] of o.schedule.entries()) {
    if (Date.now() + step.upMs > o.deadline) break;
    await sleep(step.upMs);
    // Kill while a send is in flight (waiting at most 2 s for one), so each kill leaves
    // sends whose outcome is unknown: the case at-least-once has to get right.
    const aim = Date.now() + 2000;
    while (o.history.inFlight("send") === 0 && Date.now() < aim) await new Promise((r) => setImmediate(r));
    const inFlight = { send: o.history.inFlight("send"), pull: o.history.inFlight("pull"), ack: o.history.inFlight("ack") };
    const kill = o.history.invoke("nemesis", "kill", { n: i + 1, signal: "SIGKILL", pid: o.service.server?.pid ?? null, in_flight: inFlight });
    await o.service.kill();
    o.history.complete(kill, "ok");
    done++;
    await sleep(step.downMs);
    const start = o.history.invoke("nemesis", "start", { n: i + 1 });
    try {
      const ms = await o.service.start();
      o.history.complete(start, "ok", { ready_ms: ms });
      o.onEvent?.(`kill ${i + 1}/${o.schedule.length}: dead for ${step.downMs} ms, ready ${ms} ms after the restart`);
    } catch (err) {
      o.history.complete(start, "fail", { error: String(err).slice(0, 500) });
      throw err;
    }
  }
  return done;
}
