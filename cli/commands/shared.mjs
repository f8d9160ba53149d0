// What the command modules share: the shapes of a command and of what it runs with, the
// API's records as the commands read them, and the helpers more than one group uses.
import { UsageError } from "../args.mjs";

/** @typedef {import("../args.mjs").OptionSpec} OptionSpec */
/** @typedef {import("../args.mjs").Values} Values */
/** @typedef {import("../../src/client/index.ts").ApiError} ApiError */

/**
 * @typedef {object} Context
 * @property {string[]} args             positional arguments, checked against the command's list
 * @property {Values} opts
 * @property {import("../client.mjs").Client} api  the client library's (src/client), with the CLI's retry policy
 * @property {boolean} json
 * @property {(value: unknown, human: () => string) => void} show  prints `value` as JSON with --json, else `human()`
 * @property {boolean} interactive       stdin and stderr are terminals
 * @property {(question: string) => Promise<string>} ask
 * @property {() => Promise<string>} readStdin
 */

/**
 * @typedef {object} Command
 * @property {string} name               as typed, e.g. "consumer http add"
 * @property {string} group              heading in `shardq --help`
 * @property {string[]} args             "<queue>" required, "[<script>]" optional, "<body>..." one or more
 * @property {string} summary
 * @property {string} [details]          more lines for `shardq <command> --help`
 * @property {Record<string, OptionSpec>} [options]
 * @property {(err: ApiError, ctx: Context) => string | undefined} [hint]  a next step to print under an API error
 * @property {false} [callsApi]          false: the command has no `api` and does not load the client library
 * @property {(ctx: Context) => Promise<void>} run
 */

/** @typedef {{ queue_id: string, queue_name: string, created_on: string, modified_on: string, producers_total_count: number, producers: Array<{ type: string, script?: string }>, consumers_total_count: number, consumers: Array<{ type: string, script?: string, consumer_id: string }>, settings: { delivery_delay: number, delivery_paused: boolean, message_retention_period: number }, jurisdiction?: string }} QueueInfo */
/** @typedef {{ consumer_id: string, type: "worker" | "http_pull", script_name: string | null, queue_name: string, dead_letter_queue: string | null, created_on: string, modified_on: string, settings: { batch_size: number, max_wait_time_ms: number, max_retries: number, retry_delay: number, max_concurrency: number | null, visibility_timeout_ms: number, transport: string } }} ConsumerRecord */
/** @typedef {{ backlog_count: number, backlog_bytes: number, oldest_message_timestamp_ms: number | null, consumer_concurrency: number | null, shards: Array<{ name: string, state: string, backlog_count: number }> }} QueueMetrics */
/** @typedef {{ id: string, body: string, timestamp_ms: number, attempts: number, lease_id: string, metadata: Record<string, string> }} PulledMessage */

/** API request fields and the flag or argument that sets them, for error messages. */
export const FIELD_FLAGS = /** @type {Record<string, string>} */ ({
  queue: "<queue>",
  queue_name: "<name>",
  script_name: "<script>",
  message_id: "<id>",
  authorization: "--token or SHARDQ_TOKEN",
  account_id: "--account or SHARDQ_ACCOUNT",
  "settings.delivery_delay": "--delivery-delay-secs",
  "settings.message_retention_period": "--message-retention-period-secs",
  "settings.batch_size": "--batch-size",
  "settings.max_wait_time_ms": "--batch-timeout",
  "settings.max_retries": "--message-retries",
  "settings.retry_delay": "--retry-delay-secs",
  "settings.max_concurrency": "--max-concurrency",
  "settings.visibility_timeout_ms": "--visibility-timeout-secs",
  "settings.transport": "--transport",
  dead_letter_queue: "--dead-letter-queue",
  jurisdiction: "--jurisdiction",
  batch_size: "--batch-size",
  visibility_timeout_ms: "--visibility-timeout-ms",
  delay_seconds: "--delay-secs",
  body: "<body>",
  content_type: "--content-type",
  target_queue: "--target-queue",
  limit: "--limit",
  messages_per_second: "--messages-per-second",
  "filter.min_age_seconds": "--min-age-secs",
  "filter.max_age_seconds": "--max-age-secs",
  "filter.min_attempts": "--min-attempts",
  "filter.max_attempts": "--max-attempts",
  "query.page": "--page",
  "query.per_page": "--per-page",
  "query.name_prefix": "--prefix",
});

/** The API path of a queue. @param {string} name */
export const q = (name) => `/queues/${encodeURIComponent(name)}`;

/**
 * The client of a queue, for sending, pulling and acking. @param {Context} ctx @param {string} name
 * @returns {import("../../src/client/index.ts").QueueClient}
 */
export function queueClient(ctx, name) {
  // The library refuses an empty name with a TypeError; on the command line it is a usage error.
  if (name === "") throw new UsageError("<queue> must not be empty");
  return ctx.api.queue(name);
}

/** An option that takes a number; `v` is its help. @param {unknown} v */
export const number = (v) => /** @type {OptionSpec} */ ({ type: "string", value: "n", help: String(v) });

/** How a consumer is named to people: "worker <script>" or "http_pull". @param {ConsumerRecord} c */
export function consumerName(c) {
  return c.type === "worker" ? `worker ${c.script_name}` : "http_pull";
}
