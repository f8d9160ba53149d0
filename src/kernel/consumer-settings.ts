import { z } from "zod";
import { LIMITS } from "./limits";
import { CONSUMER_BINDING_PREFIX, consumerBindingName } from "./binding-names.mjs";

/**
 * A queue's consumer, as Cloudflare's REST API describes it, plus `transport`: how
 * the consumer shard reaches a Worker consumer ("queue": its queue() handler through
 * a service binding, which needs the experimental service_binding_extra_handlers
 * flag; "rpc": the ShardqConsumer entrypoint from src/consumer/entrypoint.ts, which
 * deploys).
 */
export type ConsumerType = "worker" | "http_pull";
export type ConsumerTransport = "queue" | "rpc";

export interface ConsumerSettings {
  batch_size: number;
  max_wait_time_ms: number;
  max_retries: number;
  /** Seconds before a retried message is visible again, unless the retry names its own delay. */
  retry_delay: number;
  /** null: autoscale (up to 250 consumer shards). */
  max_concurrency: number | null;
  /** How long a pulled message stays leased (pull consumers). */
  visibility_timeout_ms: number;
  transport: ConsumerTransport;
}

export interface ConsumerRecord {
  consumer_id: string;
  type: ConsumerType;
  script_name: string | null;
  queue_name: string;
  settings: ConsumerSettings;
  dead_letter_queue: string | null;
  created_on: string;
  modified_on: string;
}

export const MAX_CONCURRENCY = 250;
export const MAX_VISIBILITY_TIMEOUT_MS = 43_200_000;

export function defaultConsumerSettings(transport: ConsumerTransport): ConsumerSettings {
  return {
    batch_size: 10,
    max_wait_time_ms: 5000,
    max_retries: 3,
    retry_delay: 0,
    max_concurrency: null,
    visibility_timeout_ms: 30_000,
    transport,
  };
}

const int = (min: number, max: number, unit = "") =>
  z
    .number({ error: "must be a number" })
    .int("must be a whole number")
    .min(min, `must be at least ${min}${unit}`)
    .max(max, `must be at most ${max}${unit}`);

export const consumerSettingsPatchSchema = z
  .object({
    batch_size: int(1, LIMITS.maxBatchMessages).optional(),
    max_wait_time_ms: int(0, 60_000, " ms").optional(),
    max_retries: int(0, 100).optional(),
    retry_delay: int(0, LIMITS.maxDelaySeconds, " s").optional(),
    max_concurrency: int(1, MAX_CONCURRENCY).nullable().optional(),
    visibility_timeout_ms: int(1000, MAX_VISIBILITY_TIMEOUT_MS, " ms").optional(),
    transport: z.enum(["queue", "rpc"], { error: 'must be "queue" or "rpc"' }).optional(),
  })
  .strict();

export type ConsumerSettingsPatch = z.infer<typeof consumerSettingsPatchSchema>;

export function applyConsumerPatch(current: ConsumerSettings, patch: ConsumerSettingsPatch): ConsumerSettings {
  const next = { ...current };
  for (const [k, v] of Object.entries(patch)) if (v !== undefined) (next as Record<string, unknown>)[k] = v;
  return next;
}

// The naming rule is shared with the Node scripts that write configs (binding-names.mjs).
export { CONSUMER_BINDING_PREFIX, consumerBindingName };

/**
 * A service binding (Fetcher) has fetch(); a Durable Object namespace, KV namespace, rate
 * limiter or var has not. (Testing for idFromName would not do: a Fetcher answers every
 * property name with an RPC method, idFromName included.)
 */
export function isServiceBinding(value: unknown): value is Fetcher {
  return typeof value === "object" && value !== null && typeof (value as { fetch?: unknown }).fetch === "function";
}

/**
 * The account a consumer binding serves when WORKER_CONSUMER_ACCOUNTS is unset: `npm start`,
 * `shardq dev` and the tests run every queue under it (.dev.vars), so their configs need no change.
 */
export const DEFAULT_CONSUMER_ACCOUNT = "local";

const parsedAccounts = new Map<string, Record<string, readonly string[]> | null>();

/**
 * WORKER_CONSUMER_ACCOUNTS: `{ "<script name>": ["<account id>", ...] }`. A binding name folds
 * `-` and `_` together (consumerBindingName), so a Worker is named here exactly, and a name not
 * listed is bound for nobody. A value that is not such an object binds nothing (fail closed),
 * and says so once per isolate.
 */
function accountsByWorker(raw: string): Record<string, readonly string[]> | null {
  if (parsedAccounts.has(raw)) return parsedAccounts.get(raw)!;
  let parsed: Record<string, readonly string[]> | null = null;
  try {
    const value: unknown = JSON.parse(raw);
    if (
      typeof value === "object" &&
      value !== null &&
      !Array.isArray(value) &&
      Object.values(value).every((v) => Array.isArray(v) && v.every((a) => typeof a === "string"))
    ) {
      parsed = value as Record<string, readonly string[]>;
    }
  } catch {
    // reported below
  }
  if (!parsed)
    console.error(
      'WORKER_CONSUMER_ACCOUNTS is not a JSON object of { "<script name>": ["<account id>", ...] }; no consumer Worker is bound until it is',
    );
  parsedAccounts.set(raw, parsed);
  return parsed;
}

/** Whether `accountId`'s queues may use the Worker `scriptName` as a consumer. */
export function workerServesAccount(env: object, scriptName: string, accountId: string): boolean {
  const raw = (env as { WORKER_CONSUMER_ACCOUNTS?: unknown }).WORKER_CONSUMER_ACCOUNTS;
  if (typeof raw !== "string" || raw.trim() === "") return accountId === DEFAULT_CONSUMER_ACCOUNT;
  const table = accountsByWorker(raw);
  return table !== null && Object.hasOwn(table, scriptName) && table[scriptName]!.includes(accountId);
}

/**
 * The service binding to the Worker consumer `scriptName` for a queue of `accountId`, or null
 * when env has none (or what it has by that name is not one), or the binding is not the
 * account's. Callers answer null alike whichever it was, so nobody learns which Workers are bound.
 */
export function consumerBinding(env: object, scriptName: string, accountId: string): Fetcher | null {
  if (!workerServesAccount(env, scriptName, accountId)) return null;
  const value = (env as Record<string, unknown>)[consumerBindingName(scriptName)];
  return isServiceBinding(value) ? value : null;
}
