// `shardq dev`: shardq and a user's own Workers on this machine, the Workers' configs read
// as they are. Each runs in its own `wrangler dev` (the Workers on the ports `wrangler dev`
// would give them), all sharing one dev registry, which carries service bindings and RPC
// between the processes: the producers' bindings into shardq's QueueProducer, and shardq's
// consumer shards' deliver() calls into each consumer's ShardqConsumer entrypoint.
// Everything generated (configs, the consumer wrappers, persisted state, the registry,
// wrangler's own .wrangler directories) goes under one state directory outside the user's
// project; wrangler runs with that as its cwd so that it writes nothing next to their files.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { parse as parseToml } from "smol-toml";
import { applyConfig } from "./apply-config.mjs";
import {
  CONSUMER_ENTRYPOINT_MODULE,
  WRAPPER_ERROR_PREFIX,
  WRAPPER_FILE,
  consumerWrapperSource,
} from "./consumer-wrapper.mjs";
import { writeDevConfig } from "../wrangler/dev-config.mjs";
import { portIsFree, ROOT, startWrangler, wranglerBin } from "../wrangler/dev-server.mjs";
import { queuePlan } from "./queue-plan.mjs";
import {
  ConfigError,
  checkWorkerSet,
  consumerEntry,
  configText,
  consumerBindingName,
  namedEnvironmentsWithQueues,
  readWorkerConfig,
  rewriteForShardq,
} from "./worker-configs.mjs";

export const DEFAULT_SHARDQ_PORT = 8799;
/** `wrangler dev`'s first port, and the one after which it tries the next. */
const FIRST_WORKER_PORT = 8787;
const FIRST_INSPECTOR_PORT = 9229;
/** .dev.vars gives local development this one account and token. */
export const LOCAL_ACCOUNT = "local";
export const LOCAL_TOKEN = "shardq-local-dev-token";

/** shardq's Worker name, from its wrangler.toml: the service producers bind to. */
export function shardqName() {
  return /** @type {string} */ (parseToml(readFileSync(join(ROOT, "wrangler.toml"), "utf8")).name);
}

/**
 * The default state directory: one per set of configs, so that two projects never share
 * queues, and the same command finds its state again.
 * @param {string[]} files  absolute config paths
 */
export function defaultStateDir(files) {
  const hash = createHash("sha256")
    .update([...files].sort().join("\n"))
    .digest("hex")
    .slice(0, 12);
  return join(homedir(), ".shardq", "dev", hash);
}

/** A process the session runs. */
/** @typedef {{ name: string, url: string, pid: number | undefined, config: string }} Running */
/**
 * @typedef {Running & { shown: string, sends: Array<{ binding: string, queue: string }>, consumes: import("./worker-configs.mjs").ConsumerEntry[] }} RunningWorker
 */
/**
 * @typedef {object} DevSession
 * @property {string} stateDir
 * @property {Running} shardq
 * @property {RunningWorker[]} workers
 * @property {import("./apply-config.mjs").QueuesConfig} plan   the queues and consumers it applied
 * @property {Promise<{ name: string, code: number | null, signal: string | null }>} exited  the first process that exits
 * @property {(signal?: NodeJS.Signals) => Promise<void>} stop   stops every process (SIGKILL: at once)
 */

/**
 * @param {object} opts
 * @param {string[]} opts.configs   Worker config paths, in the order their default ports go
 * @param {number} [opts.port]      shardq's port
 * @param {string} [opts.stateDir]
 * @param {string} [opts.cwd]       what relative paths are relative to
 * @param {(source: string, line: string) => void} opts.log    wrangler's output, by process
 * @param {(text: string) => void} opts.warn
 * @param {AbortSignal} [opts.signal]  stops a start half way (Ctrl-C)
 * @returns {Promise<DevSession>}
 */
export async function startDevSession(opts) {
  const cwd = opts.cwd ?? process.cwd();
  const service = shardqName();
  const workers = opts.configs.map((c) => readWorkerConfig(c, cwd));
  checkWorkerSet(workers, service);
  const { config: plan, warnings } = queuePlan(workers, LOCAL_ACCOUNT);
  for (const w of workers) {
    const envs = namedEnvironmentsWithQueues(w);
    if (envs.length)
      warnings.push(
        `${w.shown}: the queues of [env.${envs.join("], [env.")}] are left as they are; shardq dev runs the top-level config`,
      );
  }
  for (const w of warnings) opts.warn(w);
  checkWrangler();

  const stateDir = opts.stateDir ?? defaultStateDir(workers.map((w) => w.file));
  mkdirSync(stateDir, { recursive: true });
  const releaseLock = lockStateDir(stateDir);
  writeFileSync(
    join(stateDir, "configs.json"),
    `${JSON.stringify({ configs: workers.map((w) => w.file) }, null, 2)}\n`,
  );

  /** @type {Array<Awaited<ReturnType<typeof startWrangler>> & { name: string }>} */
  const started = [];
  const stopAll = async (/** @type {NodeJS.Signals} */ signal = "SIGTERM") => {
    await Promise.all(started.map((s) => s.stop(signal)));
    releaseLock();
  };
  try {
    const ports = await choosePorts(workers, opts.port ?? DEFAULT_SHARDQ_PORT);

    // The dev registry is where each wrangler dev finds the others. A private one keeps
    // other wrangler sessions on this machine out; an entry left by a wrangler that was
    // killed (not stopped) would shadow the new one, so ours are cleared first.
    const registry = process.env.WRANGLER_REGISTRY_PATH || join(stateDir, "registry");
    mkdirSync(registry, { recursive: true });
    for (const name of [service, ...workers.map((w) => w.name)])
      rmSync(join(registry, name), { recursive: true, force: true });
    const env = { WRANGLER_REGISTRY_PATH: registry, WRANGLER_CACHE_DIR: join(stateDir, "cache") };

    const consumers = workers.filter((w) => w.consumers.length > 0);
    const shardqDir = join(stateDir, service);
    mkdirSync(shardqDir, { recursive: true });
    const shardqConfig = writeDevConfig({
      file: join(shardqDir, "wrangler.toml"),
      outsideRoot: true,
      consumers: consumers.map((w) => ({
        binding: consumerBindingName(w.name),
        service: w.name,
        entrypoint: "ShardqConsumer",
      })),
    });
    const workerConfigs = workers.map((w) => writeWorkerConfig(w, join(stateDir, "workers", w.name), service));

    const shardqUrl = `http://127.0.0.1:${ports.shardq}`;
    const devVars = join(ROOT, ".dev.vars");
    if (!existsSync(devVars)) throw new Error(`${devVars} is missing: shardq's local account and token come from it`);
    started.push({
      name: service,
      ...(await startWrangler({
        args: [
          "-c",
          shardqConfig,
          "--port",
          String(ports.shardq),
          "--ip",
          "127.0.0.1",
          "--persist-to",
          join(stateDir, "persist", service),
          "--inspector-port",
          "0",
          "--env-file",
          devVars,
        ],
        readyUrl: `${shardqUrl}/`,
        log: (line) => opts.log(service, line),
        env,
        cwd: shardqDir,
        signal: opts.signal,
      })),
    });

    // The Workers start together; shardq runs already, so the producers' bindings find it.
    const results = await Promise.allSettled(
      workers.map(async (w, i) => {
        const port = /** @type {{ ip: string, port: number, inspector: number }} */ (ports.workers[i]);
        const server = await startWrangler({
          args: [
            "-c",
            /** @type {string} */ (workerConfigs[i]),
            "--port",
            String(port.port),
            "--ip",
            port.ip,
            "--inspector-port",
            String(port.inspector),
            "--persist-to",
            join(stateDir, "persist", w.name),
            ...envFileArgs(w.dir),
          ],
          readyUrl: `http://${port.ip}:${port.port}/`,
          // Not readyUrl: a probe would call the user's fetch handler.
          readyLine: /Ready on http/,
          log: (line) => opts.log(w.name, line),
          env,
          cwd: join(stateDir, "workers", w.name),
          signal: opts.signal,
        });
        started.push({ name: w.name, ...server });
        return server;
      }),
    );
    const failed = results.findIndex((r) => r.status === "rejected");
    if (failed >= 0)
      throw startFailure(
        /** @type {PromiseRejectedResult} */ (results[failed]).reason,
        /** @type {import("./worker-configs.mjs").WorkerConfig} */ (workers[failed]),
      );

    await applyConfig(shardqUrl, LOCAL_TOKEN, plan);

    const byName = new Map(started.map((s) => [s.name, s]));
    return {
      stateDir,
      plan,
      shardq: { name: service, url: shardqUrl, pid: byName.get(service)?.pid, config: shardqConfig },
      workers: workers.map((w, i) => {
        const port = /** @type {{ ip: string, port: number }} */ (ports.workers[i]);
        return {
          name: w.name,
          shown: w.shown,
          url: `http://${port.ip.includes(":") ? `[${port.ip}]` : port.ip}:${port.port}`,
          pid: byName.get(w.name)?.pid,
          config: /** @type {string} */ (workerConfigs[i]),
          sends: w.producers.map((p) => ({ binding: p.binding, queue: p.queue })),
          consumes: w.consumers,
        };
      }),
      exited: Promise.race(started.map(async (s) => ({ name: s.name, ...(await s.exited) }))),
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/**
 * Writes the Worker's rewritten config (and, for a consumer, its wrapper entry, which
 * imports the user's entry and shardq's by absolute path) into `dir`. Returns the config's path.
 * @param {import("./worker-configs.mjs").WorkerConfig} worker
 * @param {string} dir
 * @param {string} service
 */
function writeWorkerConfig(worker, dir, service) {
  mkdirSync(dir, { recursive: true });
  /** @type {string | undefined} */
  let main;
  if (worker.consumers.length) {
    const userMain = consumerEntry(worker);
    main = join(dir, WRAPPER_FILE);
    writeFileSync(
      main,
      consumerWrapperSource({
        userMain,
        entrypointModule: CONSUMER_ENTRYPOINT_MODULE,
        workerName: worker.name,
        shownMain: userMain,
        header: `GENERATED by shardq dev from ${worker.file}. Do not edit: it is written again on every run.`,
      }),
    );
  }
  const config = rewriteForShardq(worker, {
    account: LOCAL_ACCOUNT,
    shardqName: service,
    dir,
    main: main && `./${WRAPPER_FILE}`,
  });
  const { text, fileName } = configText(
    config,
    worker.format,
    `GENERATED by \`shardq dev\` from ${worker.file}. Do not edit: it is written again on every run.`,
  );
  const file = join(dir, fileName);
  writeFileSync(file, text);
  return file;
}

/**
 * The env files `wrangler dev` would load for a config in `dir`: its .dev.vars, or else its
 * .env files. They are passed by path since the generated config lives elsewhere.
 * @param {string} dir
 */
function envFileArgs(dir) {
  const devVars = join(dir, ".dev.vars");
  if (existsSync(devVars)) return ["--env-file", devVars];
  return [".env", ".env.local"]
    .map((f) => join(dir, f))
    .filter((f) => existsSync(f))
    .flatMap((f) => ["--env-file", f]);
}

/**
 * shardq's port, and each Worker's: its [dev] port (which must be free) or else the first
 * free one from 8787 up, as `wrangler dev` picks, in the order of the configs.
 * @param {import("./worker-configs.mjs").WorkerConfig[]} workers
 * @param {number} shardqPort
 */
async function choosePorts(workers, shardqPort) {
  if (!(await portIsFree(shardqPort, "127.0.0.1")))
    throw new ConfigError(`port ${shardqPort} (shardq's; --port) is in use`);
  const taken = new Set([shardqPort]);
  const pick = async (/** @type {number} */ from, /** @type {string} */ ip) => {
    for (let p = from; p < from + 100; p++) if (!taken.has(p) && (await portIsFree(p, ip))) return p;
    throw new Error(`no free port from ${from} to ${from + 99}`);
  };
  const out = [];
  for (const w of workers) {
    const dev = w.raw.dev ?? {};
    const ip = typeof dev.ip === "string" && dev.ip !== "localhost" ? dev.ip : "127.0.0.1";
    let port;
    if (typeof dev.port === "number") {
      if (taken.has(dev.port) || !(await portIsFree(dev.port, ip)))
        throw new ConfigError(
          `${w.shown}: its [dev] port ${dev.port} is in use${taken.has(dev.port) ? " (by another Worker of this command, or shardq's --port)" : ""}`,
        );
      port = dev.port;
    } else {
      port = await pick(FIRST_WORKER_PORT, ip);
    }
    taken.add(port);
    const inspector =
      typeof dev.inspector_port === "number" ? dev.inspector_port : await pick(FIRST_INSPECTOR_PORT, "127.0.0.1");
    taken.add(inspector);
    out.push({ ip, port, inspector });
  }
  return { shardq: shardqPort, workers: out };
}

/**
 * One `shardq dev` per state directory: two would run two workerd processes on the same
 * SQLite files. Returns the release.
 * @param {string} stateDir
 */
function lockStateDir(stateDir) {
  const file = join(stateDir, "dev.pid");
  if (existsSync(file)) {
    const pid = Number(readFileSync(file, "utf8").trim());
    if (pid && pid !== process.pid && isAlive(pid))
      throw new ConfigError(
        `another shardq dev (pid ${pid}) runs on ${stateDir}; stop it, or give this one another --state`,
      );
  }
  writeFileSync(file, `${process.pid}\n`);
  return () => rmSync(file, { force: true });
}

/** @param {number} pid */
function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return /** @type {NodeJS.ErrnoException} */ (err).code === "EPERM";
  }
}

/** wrangler must be there, and it refuses older Node.js versions: say so before starting several. */
function checkWrangler() {
  /** @type {string} */
  let bin;
  try {
    bin = wranglerBin();
  } catch {
    throw new Error("wrangler is not installed where shardq can find it: npm install --save-dev wrangler");
  }
  const wanted = /** @type {{ engines?: { node?: string } }} */ (
    JSON.parse(readFileSync(join(bin, "..", "..", "package.json"), "utf8"))
  ).engines?.node;
  const min = /(\d+)\.(\d+)\.(\d+)/
    .exec(wanted ?? "")
    ?.slice(1)
    .map(Number);
  const have = process.versions.node.split(".").map(Number);
  if (!min) return;
  for (let i = 0; i < 3; i++) {
    if ((have[i] ?? 0) > (min[i] ?? 0)) return;
    if ((have[i] ?? 0) < (min[i] ?? 0))
      throw new Error(`wrangler needs Node.js ${wanted}; this is ${process.versions.node}`);
  }
}

/**
 * A Worker that did not start: the wrapper's own error (no queue() handler) is a config
 * error; anything else comes with the end of wrangler's output.
 * @param {unknown} err
 * @param {import("./worker-configs.mjs").WorkerConfig} worker
 */
function startFailure(err, worker) {
  const text = String(/** @type {Error} */ (err)?.message ?? err);
  const ours = new RegExp(`Uncaught Error: (${WRAPPER_ERROR_PREFIX}[^\\n]*)`).exec(text.replace(/\x1b\[[0-9;]*m/g, ""));
  if (ours?.[1]) return new ConfigError(ours[1].slice(WRAPPER_ERROR_PREFIX.length).trim());
  return new Error(`${worker.name} (${worker.shown}) did not start: ${text.split("\n").slice(-30).join("\n")}`);
}
