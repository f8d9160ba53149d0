// Users' own Worker configs (wrangler.toml, wrangler.json, wrangler.jsonc), read as they
// are and rewritten to run against shardq instead of Cloudflare Queues: each
// `[[queues.producers]]` becomes a service binding of the same name to shardq's
// QueueProducer entrypoint (its delivery_delay in the binding's props), `[[queues.consumers]]`
// becomes a shardq consumer (queue-plan.mjs) and the `queues` table goes, so that wrangler neither simulates nor deploys Cloudflare
// Queues. The rewritten config lives somewhere else than the user's (shardq's state
// directory, or a --out directory), so every path in it that wrangler reads from the
// config's own directory is rewritten to point back at the user's files: relative to the
// new config rather than absolute, because wrangler joins some of them (the [site] bucket,
// tsconfig, build.watch_dir, module paths) onto that directory.
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { parse as parseJsonc, printParseErrorCode } from "jsonc-parser";
import { parse as parseToml, stringify as stringifyToml } from "smol-toml";

/** A config that cannot be used as it is: the CLI prints the message and exits with 2. */
export class ConfigError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "ConfigError";
  }
}

/** The file names `wrangler` looks for in a directory, in its order. */
const CONFIG_NAMES = ["wrangler.json", "wrangler.jsonc", "wrangler.toml"];

/** Cloudflare's Worker name rule, which shardq's consumer API enforces on script_name. */
const WORKER_NAME = /^[a-z0-9_][a-z0-9_-]{0,62}$/;

/** src/kernel/settings.ts QUEUE_NAME_PATTERN. */
export const QUEUE_NAME = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** src/kernel/limits.ts maxDelaySeconds: the longest delay a message, a binding or a queue may give. */
export const MAX_DELAY_SECONDS = 86_400;

/**
 * @typedef {object} ProducerEntry  a `[[queues.producers]]` table
 * @property {string} binding
 * @property {string} queue
 * @property {number} [delivery_delay]  seconds: the binding's delay for every message sent through it without one of its own
 */
/**
 * @typedef {object} ConsumerEntry  a `[[queues.consumers]]` table, as wrangler documents it
 * @property {string} queue
 * @property {number} [max_batch_size]
 * @property {number} [max_batch_timeout]   seconds
 * @property {number} [max_retries]
 * @property {string} [dead_letter_queue]
 * @property {number} [retry_delay]         seconds
 * @property {number | null} [max_concurrency]
 * @property {number} [visibility_timeout_ms]
 * @property {string} [type]
 */
/**
 * @typedef {object} WorkerConfig
 * @property {string} file       absolute path of the user's config
 * @property {string} shown      the path as the user gave it, for messages
 * @property {string} dir        its directory: what relative paths in it are relative to
 * @property {"toml" | "json"} format
 * @property {string} name
 * @property {Record<string, any>} raw  the whole config, as parsed
 * @property {ProducerEntry[]} producers
 * @property {ConsumerEntry[]} consumers
 */

/**
 * Reads one Worker's config. `path` may name a directory holding one, as `wrangler -c` cannot
 * but `wrangler` run in that directory would find.
 * @param {string} path
 * @param {string} [cwd]  what a relative `path` is relative to
 * @returns {WorkerConfig}
 */
export function readWorkerConfig(path, cwd = process.cwd()) {
  let file = resolve(cwd, path);
  if (existsSync(file) && statSync(file).isDirectory()) {
    const found = CONFIG_NAMES.map((n) => join(file, n)).find((f) => existsSync(f));
    if (!found) throw new ConfigError(`${path} is a directory with no ${CONFIG_NAMES.join(", ")} in it`);
    file = found;
  }
  /** @type {string} */
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    const code = /** @type {NodeJS.ErrnoException} */ (err).code;
    throw new ConfigError(
      `cannot read ${path}: ${code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : /** @type {Error} */ (err).message}`,
    );
  }
  const format = file.endsWith(".toml")
    ? "toml"
    : file.endsWith(".json") || file.endsWith(".jsonc")
      ? "json"
      : undefined;
  if (!format) throw new ConfigError(`${path}: a Worker config is a .toml, .json or .jsonc file`);
  const raw = format === "toml" ? parseTomlConfig(text, path) : parseJsonConfig(text, path);
  const name = raw.name;
  if (typeof name !== "string" || name === "")
    throw new ConfigError(`${path} has no name: shardq binds and addresses a Worker by its name (name = "my-worker")`);
  if (!WORKER_NAME.test(name))
    throw new ConfigError(
      `${path}: name "${name}" is not a Worker name (lowercase letters, digits, dashes and underscores, at most 63)`,
    );
  return { file, shown: path, dir: dirname(file), format, name, raw, ...queueEntries(raw, path) };
}

/** @param {string} text @param {string} path */
function parseTomlConfig(text, path) {
  try {
    return /** @type {Record<string, any>} */ (parseToml(text));
  } catch (err) {
    throw new ConfigError(`${path} is not valid TOML: ${/** @type {Error} */ (err).message.split("\n")[0]}`);
  }
}

/** @param {string} text @param {string} path */
function parseJsonConfig(text, path) {
  /** @type {import("jsonc-parser").ParseError[]} */
  const errors = [];
  const value = parseJsonc(text, errors, { allowTrailingComma: true });
  const first = errors[0];
  if (first) {
    const before = text.slice(0, first.offset).split("\n");
    throw new ConfigError(
      `${path} is not valid JSON: ${printParseErrorCode(first.error)} at line ${before.length}, column ${(before.at(-1)?.length ?? 0) + 1}`,
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new ConfigError(`${path} is not a JSON object`);
  return /** @type {Record<string, any>} */ (value);
}

/**
 * The top-level `queues` tables, checked for what shardq needs from them. Named
 * environments ([env.<name>]) are left as they are (see namedEnvironmentsWithQueues).
 * @param {Record<string, any>} raw
 * @param {string} path
 */
function queueEntries(raw, path) {
  const queues = raw.queues;
  if (queues === undefined) return { producers: [], consumers: [] };
  if (typeof queues !== "object" || queues === null || Array.isArray(queues))
    throw new ConfigError(`${path}: queues must be a table ([[queues.producers]], [[queues.consumers]])`);
  /** @param {"producers" | "consumers"} kind */
  const list = (kind) => {
    const value = queues[kind] ?? [];
    if (!Array.isArray(value))
      throw new ConfigError(`${path}: queues.${kind} must be a list of tables ([[queues.${kind}]])`);
    return value.map((entry, i) => {
      const where = `${path}: [[queues.${kind}]] #${i + 1}`;
      if (typeof entry !== "object" || entry === null) throw new ConfigError(`${where} must be a table`);
      if (typeof entry.queue !== "string" || entry.queue === "")
        throw new ConfigError(`${where} names no queue (queue = "my-queue")`);
      if (!QUEUE_NAME.test(entry.queue))
        throw new ConfigError(
          `${where}: queue "${entry.queue}" is not a queue name (lowercase letters, digits and dashes, at most 63)`,
        );
      return entry;
    });
  };
  const producers = /** @type {ProducerEntry[]} */ (list("producers"));
  for (const [i, p] of producers.entries()) {
    if (typeof p.binding !== "string" || !/^[A-Za-z_$][\w$]*$/.test(p.binding))
      throw new ConfigError(
        `${path}: [[queues.producers]] #${i + 1} (queue "${p.queue}") needs a binding name (binding = "MY_QUEUE")`,
      );
    const delay = p.delivery_delay;
    if (
      delay !== undefined &&
      (typeof delay !== "number" || !Number.isInteger(delay) || delay < 0 || delay > MAX_DELAY_SECONDS)
    ) {
      throw new ConfigError(
        `${path}: [[queues.producers]] #${i + 1} (binding ${p.binding}): delivery_delay must be a whole number of seconds from 0 to ${MAX_DELAY_SECONDS}, not ${JSON.stringify(delay)}`,
      );
    }
  }
  return { producers, consumers: /** @type {ConsumerEntry[]} */ (list("consumers")) };
}

/**
 * Checks a set of Workers run or deployed together: one name each, none taking shardq's.
 * @param {WorkerConfig[]} workers
 * @param {string} shardqName
 */
export function checkWorkerSet(workers, shardqName) {
  if (workers.length === 0)
    throw new ConfigError("give at least one Worker config with -c (e.g. -c ./my-worker/wrangler.toml)");
  /** @type {Map<string, WorkerConfig>} */
  const byName = new Map();
  for (const w of workers) {
    if (w.name === shardqName)
      throw new ConfigError(
        `${w.shown}: the Worker is named "${w.name}", which is shardq's own name; rename one (--shardq-name for shardq)`,
      );
    const other = byName.get(w.name);
    if (other)
      throw new ConfigError(
        other.file === w.file
          ? `${w.shown} is given twice`
          : `${other.shown} and ${w.shown} both name their Worker "${w.name}"`,
      );
    byName.set(w.name, w);
  }
}

/**
 * A consumer Worker's own entry, which the generated entry wraps to add ShardqConsumer.
 * @param {WorkerConfig} worker
 */
export function consumerEntry(worker) {
  if (typeof worker.raw.main !== "string")
    throw new ConfigError(
      `${worker.shown} consumes a queue but has no main: shardq needs the Worker's entry to add the ShardqConsumer entrypoint to it`,
    );
  return resolve(worker.dir, worker.raw.main);
}

/**
 * Named environments that have queues of their own, which are not rewritten: only the
 * top-level config (what `wrangler dev` and `wrangler deploy` use without --env) is.
 * @param {WorkerConfig} worker
 * @returns {string[]}
 */
export function namedEnvironmentsWithQueues(worker) {
  const envs = worker.raw.env;
  if (typeof envs !== "object" || envs === null) return [];
  return Object.entries(envs)
    .filter(([, block]) => typeof block === "object" && block !== null && "queues" in block)
    .map(([name]) => name);
}

// The service binding shardq reaches a consumer Worker by ("my-consumer" -> CONSUMER_MY_CONSUMER):
// the service's own rule, shared as plain JavaScript so these scripts name what shardq looks up.
export { consumerBindingName } from "../../src/kernel/binding-names.mjs";

/**
 * @typedef {object} RewriteOptions
 * @property {string} account        the producers' props.account
 * @property {string} shardqName     the service the producers bind to
 * @property {string} dir            where the new config is written
 * @property {string} [main]         a new entry (the consumer wrapper), relative to `dir`
 */

/**
 * The user's config as shardq runs it: queues gone, producers bound to QueueProducer,
 * paths rewritten for `dir`, and for a consumer the wrapper as its entry.
 * @param {WorkerConfig} worker
 * @param {RewriteOptions} opts
 * @returns {Record<string, any>}
 */
export function rewriteForShardq(worker, opts) {
  const place = relativeTo(opts.dir);
  const out = movePaths(worker.raw, worker.dir, place);
  if (out.env && typeof out.env === "object") {
    out.env = Object.fromEntries(
      Object.entries(out.env).map(([k, block]) => [
        k,
        typeof block === "object" && block !== null ? movePaths(block, worker.dir, place) : block,
      ]),
    );
  }
  delete out.queues;
  if (worker.producers.length) {
    const services = Array.isArray(out.services) ? [...out.services] : [];
    for (const p of worker.producers) {
      // The binding's delivery_delay goes with it, in its props (broker/producer/queue-producer.ts).
      const props = {
        account: opts.account,
        queue: p.queue,
        ...(p.delivery_delay !== undefined ? { delivery_delay: p.delivery_delay } : {}),
      };
      services.push({ binding: p.binding, service: opts.shardqName, entrypoint: "QueueProducer", props });
    }
    out.services = services;
  }
  if (opts.main) {
    if (worker.raw.no_bundle)
      throw new ConfigError(
        `${worker.shown}: no_bundle is set, but shardq bundles a small entry module around this consumer's own (it adds the ShardqConsumer entrypoint)`,
      );
    out.main = opts.main;
    // wrangler collects additional modules from the entry's directory unless told otherwise.
    if (worker.raw.find_additional_modules && worker.raw.base_dir === undefined)
      out.base_dir = place(dirname(resolve(worker.dir, worker.raw.main)));
  }
  return out;
}

/**
 * A copy of a config (or of one [env.<name>] block of it) with every path wrangler reads
 * from the config's directory re-placed. Sections that are not touched are shared, not
 * copied: smol-toml's dates would not survive a structured clone.
 * @param {Record<string, any>} block
 * @param {string} fromDir
 * @param {(absolute: string) => string} place
 */
function movePaths(block, fromDir, place) {
  const at = (/** @type {string} */ p) => place(resolve(fromDir, p));
  const out = { ...block };
  for (const key of ["main", "base_dir", "tsconfig"]) if (typeof out[key] === "string") out[key] = at(out[key]);
  if (isTable(out.site) && typeof out.site.bucket === "string") out.site = { ...out.site, bucket: at(out.site.bucket) };
  if (isTable(out.assets) && typeof out.assets.directory === "string")
    out.assets = { ...out.assets, directory: at(out.assets.directory) };
  if (isTable(out.build)) {
    // The build command's cwd is taken from where wrangler runs, not from the config: made
    // absolute. Without one wrangler runs the command where it was started, which is the
    // project's directory when its author runs `wrangler dev` there.
    /** @type {Record<string, any>} */
    const build = { ...out.build, cwd: resolve(fromDir, out.build.cwd ?? ".") };
    if (out.build.command) {
      const watch = out.build.watch_dir ?? "./src";
      build.watch_dir = Array.isArray(watch) ? watch.map(at) : at(watch);
    }
    out.build = build;
  }
  if (Array.isArray(out.d1_databases)) {
    out.d1_databases = out.d1_databases.map((/** @type {any} */ d) => {
      if (!isTable(d) || typeof d.migrations_dir !== "string") return d;
      /** @type {Record<string, any>} */
      const moved = { ...d, migrations_dir: at(d.migrations_dir) };
      // wrangler requires the pattern to start with the directory.
      if (typeof d.migrations_pattern === "string" && d.migrations_pattern.startsWith(`${d.migrations_dir}/`)) {
        moved.migrations_pattern = `${moved.migrations_dir}/${d.migrations_pattern.slice(d.migrations_dir.length + 1)}`;
      }
      return moved;
    });
  }
  if (isTable(out.alias)) {
    out.alias = Object.fromEntries(
      Object.entries(out.alias).map(([k, v]) => [k, typeof v === "string" && /^\.\.?\//.test(v) ? at(v) : v]),
    );
  }
  for (const key of ["wasm_modules", "text_blobs", "data_blobs"]) {
    if (isTable(out[key]))
      out[key] = Object.fromEntries(Object.entries(out[key]).map(([k, v]) => [k, typeof v === "string" ? at(v) : v]));
  }
  return out;
}

/** @param {unknown} v @returns {v is Record<string, any>} */
function isTable(v) {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * How a path appears in a file written to `configDir`: relative to it, "./" first so that
 * it also works as an import specifier.
 * @param {string} configDir
 * @returns {(absolute: string) => string}
 */
export function relativeTo(configDir) {
  return (absolute) => {
    const rel = relative(configDir, absolute).split(sep).join("/");
    return rel.startsWith(".") ? rel : `./${rel}`;
  };
}

/**
 * A config as text in the user's format: TOML stays TOML; JSON and JSONC become JSONC,
 * which is what lets the header be a comment.
 * @param {Record<string, any>} config
 * @param {"toml" | "json"} format
 * @param {string} header  a comment, one or more lines
 * @returns {{ text: string, fileName: string }}
 */
export function configText(config, format, header) {
  if (format === "toml") {
    return { text: `${header.replace(/^/gm, "# ")}\n${stringifyToml(config)}\n`, fileName: "wrangler.toml" };
  }
  return { text: `${header.replace(/^/gm, "// ")}\n${JSON.stringify(config, null, 2)}\n`, fileName: "wrangler.jsonc" };
}
