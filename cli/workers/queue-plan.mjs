// The queues and consumers a set of Workers' `[[queues.*]]` tables ask for, in the shape of
// shardq.config.json (what cli/workers/apply-config.mjs applies): every queue a producer sends
// to, a consumer reads or a consumer dead-letters into, and one Worker consumer per
// consumed queue, with wrangler's settings translated to shardq's consumer API.
import { ConfigError, QUEUE_NAME } from "./worker-configs.mjs";

/** @typedef {import("./worker-configs.mjs").WorkerConfig} WorkerConfig */
/** @typedef {import("./worker-configs.mjs").ConsumerEntry} ConsumerEntry */
/** @typedef {import("./apply-config.mjs").QueuesConfig} QueuesConfig */

/**
 * wrangler's `[[queues.consumers]]` fields: what each becomes in shardq's consumer settings,
 * the range Cloudflare allows, and Cloudflare's default (used when the field is absent, so
 * that removing a line from wrangler.toml resets the setting on the next start).
 */
const CONSUMER_FIELDS = /** @type {const} */ ([
  { field: "max_batch_size", setting: "batch_size", min: 1, max: 100, whole: true, scale: 1, fallback: 10 },
  { field: "max_batch_timeout", setting: "max_wait_time_ms", min: 0, max: 60, whole: false, scale: 1000, fallback: 5 },
  { field: "max_retries", setting: "max_retries", min: 0, max: 100, whole: true, scale: 1, fallback: 3 },
  { field: "retry_delay", setting: "retry_delay", min: 0, max: 86_400, whole: true, scale: 1, fallback: 0 },
]);

/**
 * @param {WorkerConfig[]} workers
 * @param {string} account
 * @returns {{ config: QueuesConfig, warnings: string[] }}
 */
export function queuePlan(workers, account) {
  /** @type {string[]} */
  const warnings = [];
  /** @type {string[]} */
  const names = [];
  const add = (/** @type {string} */ q) => {
    if (!names.includes(q)) names.push(q);
  };
  /** @type {Map<string, { worker: WorkerConfig, entry: ConsumerEntry }>} */
  const consumerOf = new Map();
  for (const w of workers) {
    // A producer's delivery_delay belongs to its binding (worker-configs.mjs rewriteForShardq), not to the queue.
    for (const p of w.producers) add(p.queue);
    for (const c of w.consumers) {
      const other = consumerOf.get(c.queue);
      if (other)
        throw new ConfigError(
          `queue "${c.queue}" has a consumer in ${other.worker.shown} and in ${w.shown}; a queue has one consumer`,
        );
      if (
        c.dead_letter_queue !== undefined &&
        (typeof c.dead_letter_queue !== "string" || !QUEUE_NAME.test(c.dead_letter_queue))
      ) {
        throw new ConfigError(
          `${w.shown}: [[queues.consumers]] for "${c.queue}": dead_letter_queue ${JSON.stringify(c.dead_letter_queue)} is not a queue name`,
        );
      }
      consumerOf.set(c.queue, { worker: w, entry: c });
      add(c.queue);
      if (c.dead_letter_queue !== undefined) add(c.dead_letter_queue);
    }
  }
  for (const q of names) {
    if (!consumerOf.has(q) && !workers.some((w) => w.consumers.some((c) => c.dead_letter_queue === q))) {
      warnings.push(`queue "${q}" has no consumer in these configs: its messages wait there until one is added`);
    }
  }
  return {
    config: {
      account,
      queues: names.map((queue_name) => {
        const c = consumerOf.get(queue_name);
        return c ? { queue_name, consumer: workerConsumer(c.worker, c.entry, warnings) } : { queue_name };
      }),
    },
    warnings,
  };
}

/**
 * @param {WorkerConfig} worker
 * @param {ConsumerEntry} entry
 * @param {string[]} warnings
 */
function workerConsumer(worker, entry, warnings) {
  const where = `${worker.shown}: [[queues.consumers]] for "${entry.queue}"`;
  if (entry.type !== undefined && entry.type !== "worker")
    throw new ConfigError(
      `${where}: type "${entry.type}" is not supported; wrangler configs declare Worker consumers only`,
    );
  if (entry.visibility_timeout_ms !== undefined)
    warnings.push(
      `${where}: visibility_timeout_ms applies to HTTP pull consumers and is ignored for a Worker consumer`,
    );
  /** @type {Record<string, unknown>} */
  const settings = {};
  for (const f of CONSUMER_FIELDS) {
    const raw = /** @type {Record<string, unknown>} */ (entry)[f.field];
    const value = raw === undefined ? f.fallback : raw;
    if (
      typeof value !== "number" ||
      !Number.isFinite(value) ||
      value < f.min ||
      value > f.max ||
      (f.whole && !Number.isInteger(value))
    ) {
      throw new ConfigError(
        `${where}: ${f.field} must be ${f.whole ? "a whole number" : "a number"} from ${f.min} to ${f.max}, not ${JSON.stringify(raw)}`,
      );
    }
    settings[f.setting] = Math.round(value * f.scale);
  }
  const concurrency = entry.max_concurrency ?? null;
  if (
    concurrency !== null &&
    (typeof concurrency !== "number" || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > 250)
  ) {
    throw new ConfigError(
      `${where}: max_concurrency must be a whole number from 1 to 250 (or absent, to autoscale), not ${JSON.stringify(concurrency)}`,
    );
  }
  settings.max_concurrency = concurrency;
  // The transport that reaches the generated ShardqConsumer entrypoint, locally and deployed alike.
  settings.transport = "rpc";
  if (entry.dead_letter_queue === entry.queue)
    throw new ConfigError(`${where}: dead_letter_queue must be another queue, not the consumer's own`);
  return { type: "worker", script_name: worker.name, settings, dead_letter_queue: entry.dead_letter_queue ?? null };
}
