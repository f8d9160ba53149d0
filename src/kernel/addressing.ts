import type { Env } from "./env";
import { jurisdictionOfQueue, jurisdictionOfShard, namespaceIn } from "./jurisdiction";

/**
 * Where each part lives: one Coordinator per queue, one catalog per account, shards by name.
 * A queue's objects are in its jurisdiction's namespace (./jurisdiction.ts), read off its id;
 * the account's catalog holds names and settings only, no message, and stays global.
 */
export function coordinatorFor(env: Env, queueId: string) {
  const ns = namespaceIn(env.COORDINATOR, jurisdictionOfQueue(queueId));
  return ns.get(ns.idFromName(queueId));
}

export function catalogFor(env: Env, accountId: string) {
  return env.ACCOUNT_CATALOG.get(env.ACCOUNT_CATALOG.idFromName(accountId));
}

/** Regions Durable Objects accept as location hints; others (like "local") get no hint. */
const LOCATION_HINTS = new Set(["wnam", "enam", "sam", "weur", "eeur", "apac", "oc", "afr", "me"]);

export function storageShardFor(env: Env, shardName: string, region?: string) {
  const j = jurisdictionOfShard(shardName);
  const ns = namespaceIn(env.STORAGE_SHARD, j);
  const id = ns.idFromName(shardName);
  // Inside a jurisdiction the jurisdiction decides where the object lives: no hint, which could name a region outside it.
  if (region && !j && LOCATION_HINTS.has(region)) {
    return ns.get(id, { locationHint: region as DurableObjectLocationHint });
  }
  return ns.get(id);
}

/** Consumer shard i of a queue. */
export function consumerShardFor(env: Env, queueId: string, index: number) {
  const ns = namespaceIn(env.SHARD_CONSUMERS, jurisdictionOfQueue(queueId));
  return ns.get(ns.idFromName(`${queueId}:consumer:${index}`));
}

/** KV keys a queue's shard map is published under: by id and by name, both scoped to the account. */
export function shardMapKeys(accountId: string, queueId: string, queueName: string): [string, string] {
  return [shardMapKeyById(accountId, queueId), shardMapKeyByName(accountId, queueName)];
}
export const shardMapKeyById = (accountId: string, queueId: string) => `map/${accountId}/id/${queueId}`;
export const shardMapKeyByName = (accountId: string, queueName: string) => `map/${accountId}/name/${queueName}`;

/** One of a queue's Idempotency-Key tables (coordinator/idempotency-keys.ts): keys are spread over several by hash. */
export function idempotencyKeysFor(env: Env, queueId: string, bucket: number) {
  const ns = namespaceIn(env.IDEMPOTENCY_KEYS, jurisdictionOfQueue(queueId));
  return ns.get(ns.idFromName(`${queueId}:idempotency:${bucket}`));
}
