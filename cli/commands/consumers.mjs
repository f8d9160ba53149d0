// Commands on a queue's consumers: list, add, update and remove a Worker consumer, add and
// remove an HTTP pull consumer.
import { CliError, UsageError, oneOf, secondsAsMs, text, wholeNumber } from "../args.mjs";
import { duration, keyValues, seconds } from "../format.mjs";
import { consumerName, number, q } from "./shared.mjs";

/** @typedef {import("../args.mjs").OptionSpec} OptionSpec */
/** @typedef {import("../args.mjs").Values} Values */
/** @typedef {import("./shared.mjs").Command} Command */
/** @typedef {import("./shared.mjs").Context} Context */
/** @typedef {import("./shared.mjs").ConsumerRecord} ConsumerRecord */

const BATCH_SIZE = number("messages per batch (1 to 100, default 10)");
const MESSAGE_RETRIES = number("deliveries retried before a message is dead-lettered or dropped (0 to 100, default 3)");
const RETRY_DELAY = number("seconds before a retried message is delivered again (default 0)");
const DEAD_LETTER_QUEUE = /** @type {OptionSpec} */ ({
  type: "string",
  value: "queue",
  help: "queue that receives messages out of retries",
});
const VISIBILITY_TIMEOUT = /** @type {OptionSpec} */ ({
  type: "string",
  value: "secs",
  help: "seconds a pulled message stays leased before it returns (1 to 43200, default 30)",
});

/** `wrangler queues consumer add`'s flags, and --transport. */
const WORKER_CONSUMER = /** @type {Record<string, OptionSpec>} */ ({
  "batch-size": BATCH_SIZE,
  "batch-timeout": { type: "string", value: "secs", help: "seconds to wait to fill a batch (0 to 60, default 5)" },
  "max-batch-timeout": { type: "string", value: "secs", help: "the same as --batch-timeout", hidden: true },
  "message-retries": MESSAGE_RETRIES,
  "dead-letter-queue": DEAD_LETTER_QUEUE,
  "max-concurrency": {
    type: "string",
    value: "n",
    help: "most batches delivered at once (1 to 250; default: autoscale)",
  },
  "retry-delay-secs": RETRY_DELAY,
  transport: {
    type: "string",
    value: "queue|rpc",
    help: "how shardq reaches the Worker: its queue() handler, or its ShardqConsumer entrypoint",
  },
});

/** `wrangler queues consumer http add`'s flags. */
const HTTP_CONSUMER = /** @type {Record<string, OptionSpec>} */ ({
  "batch-size": BATCH_SIZE,
  "message-retries": MESSAGE_RETRIES,
  "dead-letter-queue": DEAD_LETTER_QUEUE,
  "visibility-timeout-secs": VISIBILITY_TIMEOUT,
  "retry-delay-secs": RETRY_DELAY,
});

/**
 * Consumer settings from the flags given; absent flags are left out so the API keeps
 * (or defaults) their values.
 * @param {Values} o
 */
function consumerBody(o) {
  /** @type {Record<string, unknown>} */
  const settings = {};
  /** @param {string} key @param {unknown} value */
  const set = (key, value) => {
    if (value !== undefined) settings[key] = value;
  };
  set("batch_size", wholeNumber(o, "batch-size"));
  set("max_wait_time_ms", secondsAsMs(o, "batch-timeout") ?? secondsAsMs(o, "max-batch-timeout"));
  set("max_retries", wholeNumber(o, "message-retries"));
  set("retry_delay", wholeNumber(o, "retry-delay-secs"));
  set("visibility_timeout_ms", secondsAsMs(o, "visibility-timeout-secs"));
  set("transport", oneOf(o, "transport", ["queue", "rpc"]));
  const concurrency = text(o, "max-concurrency");
  if (concurrency !== undefined)
    settings.max_concurrency = concurrency === "auto" ? null : wholeNumber(o, "max-concurrency");
  /** @type {{ settings?: Record<string, unknown>, dead_letter_queue?: string | null }} */
  const body = {};
  if (Object.keys(settings).length > 0) body.settings = settings;
  const dlq = text(o, "dead-letter-queue");
  if (dlq !== undefined) body.dead_letter_queue = dlq;
  if (o["no-dead-letter-queue"]) {
    if (dlq !== undefined) throw new UsageError("--dead-letter-queue and --no-dead-letter-queue contradict each other");
    body.dead_letter_queue = null;
  }
  return body;
}

/**
 * @param {ConsumerRecord} c
 * @returns {Array<[string, string | undefined]>}
 */
function consumerPairs(c) {
  const s = c.settings;
  const worker = c.type === "worker";
  return [
    ["consumer id", c.consumer_id],
    ["queue", c.queue_name],
    ["type", consumerName(c)],
    ["batch size", String(s.batch_size)],
    ["batch timeout", worker ? duration(s.max_wait_time_ms) : undefined],
    ["max concurrency", worker ? String(s.max_concurrency ?? "auto (up to 250)") : undefined],
    ["transport", worker ? s.transport : undefined],
    ["visibility timeout", worker ? undefined : duration(s.visibility_timeout_ms)],
    ["message retries", String(s.max_retries)],
    ["retry delay", seconds(s.retry_delay)],
    ["dead-letter queue", c.dead_letter_queue ?? "none"],
  ];
}

/**
 * The queue's consumer that `script` names (a worker's script), or its only one.
 * @param {Context} ctx
 * @param {string} queue
 * @param {(c: ConsumerRecord) => boolean} match
 * @param {string} what  described in the error when none matches
 * @returns {Promise<ConsumerRecord>}
 */
async function findConsumer(ctx, queue, match, what) {
  const consumers = /** @type {ConsumerRecord[]} */ (await ctx.api.request("GET", `${q(queue)}/consumers`));
  const found = consumers.find(match);
  if (!found) {
    const has = consumers.length ? `its consumer is ${consumers.map(consumerName).join(", ")}` : "it has no consumer";
    throw new CliError(`queue ${queue} has no ${what} (${has})`);
  }
  return found;
}

/** @type {Command[]} */
export const CONSUMER_COMMANDS = [
  {
    name: "consumer list",
    group: "Consumers",
    args: ["<queue>"],
    summary: "Show a queue's consumer and its settings",
    async run(ctx) {
      const [queue] = /** @type {[string]} */ (ctx.args);
      const consumers = /** @type {ConsumerRecord[]} */ (await ctx.api.request("GET", `${q(queue)}/consumers`));
      ctx.show(consumers, () =>
        consumers.length
          ? consumers.map((c) => keyValues(consumerPairs(c))).join("\n\n")
          : `Queue ${queue} has no consumer.`,
      );
    },
  },
  {
    name: "consumer add",
    group: "Consumers",
    args: ["<queue>", "<script>"],
    summary: "Add a Worker consumer (its queue() handler gets the messages)",
    details:
      "shardq reaches the Worker through a service binding CONSUMER_<SCRIPT_NAME> in its wrangler.toml.\nA queue has at most one consumer.",
    options: WORKER_CONSUMER,
    async run(ctx) {
      const [queue, script] = /** @type {[string, string]} */ (ctx.args);
      const c = /** @type {ConsumerRecord} */ (
        await ctx.api.request("POST", `${q(queue)}/consumers`, {
          body: { type: "worker", script_name: script, ...consumerBody(ctx.opts) },
        })
      );
      ctx.show(c, () => `Added consumer ${script} to queue ${c.queue_name}.\n${keyValues(consumerPairs(c))}`);
    },
  },
  {
    name: "consumer http add",
    group: "Consumers",
    args: ["<queue>"],
    summary: "Add an HTTP pull consumer (messages are pulled: shardq pull)",
    options: HTTP_CONSUMER,
    async run(ctx) {
      const [queue] = /** @type {[string]} */ (ctx.args);
      const c = /** @type {ConsumerRecord} */ (
        await ctx.api.request("POST", `${q(queue)}/consumers`, {
          body: { type: "http_pull", ...consumerBody(ctx.opts) },
        })
      );
      ctx.show(c, () => `Added an HTTP pull consumer to queue ${c.queue_name}.\n${keyValues(consumerPairs(c))}`);
    },
  },
  {
    name: "consumer update",
    group: "Consumers",
    args: ["<queue>", "[<script>]"],
    summary: "Change the settings of a queue's consumer",
    details:
      "Names the consumer by its script, or takes the queue's only consumer. --max-concurrency auto\nreturns to autoscaling; --no-dead-letter-queue removes the dead-letter queue.",
    options: {
      ...WORKER_CONSUMER,
      "visibility-timeout-secs": VISIBILITY_TIMEOUT,
      "no-dead-letter-queue": { type: "boolean", help: "drop messages out of retries instead of dead-lettering them" },
    },
    async run(ctx) {
      const [queue, script] = /** @type {[string, string | undefined]} */ (ctx.args);
      const body = consumerBody(ctx.opts);
      if (Object.keys(body).length === 0)
        throw new UsageError("nothing to update: give at least one setting (see --help)");
      const current = await findConsumer(
        ctx,
        queue,
        (c) => script === undefined || c.script_name === script,
        script === undefined ? "consumer" : `consumer ${script}`,
      );
      const c = /** @type {ConsumerRecord} */ (
        await ctx.api.request("PATCH", `${q(queue)}/consumers/${encodeURIComponent(current.consumer_id)}`, { body })
      );
      ctx.show(c, () => `Updated the consumer of queue ${c.queue_name}.\n${keyValues(consumerPairs(c))}`);
    },
  },
  {
    name: "consumer remove",
    group: "Consumers",
    args: ["<queue>", "<script>"],
    summary: "Remove a Worker consumer",
    async run(ctx) {
      const [queue, script] = /** @type {[string, string]} */ (ctx.args);
      const c = await findConsumer(
        ctx,
        queue,
        (x) => x.type === "worker" && x.script_name === script,
        `consumer ${script}`,
      );
      await ctx.api.request("DELETE", `${q(queue)}/consumers/${encodeURIComponent(c.consumer_id)}`);
      ctx.show(c, () => `Removed consumer ${script} from queue ${queue}.`);
    },
  },
  {
    name: "consumer http remove",
    group: "Consumers",
    args: ["<queue>"],
    summary: "Remove an HTTP pull consumer",
    async run(ctx) {
      const [queue] = /** @type {[string]} */ (ctx.args);
      const c = await findConsumer(ctx, queue, (x) => x.type === "http_pull", "HTTP pull consumer");
      await ctx.api.request("DELETE", `${q(queue)}/consumers/${encodeURIComponent(c.consumer_id)}`);
      ctx.show(c, () => `Removed the HTTP pull consumer from queue ${queue}.`);
    },
  },
];
