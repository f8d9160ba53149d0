import type { Env } from "./env";

/** Where each part lives: one Coordinator per queue, one catalog per account, shards by name. */
export function coordinatorFor(env: Env, queueId: string) {
  return env.COORDINATOR.get(env.COORDINATOR.idFromName(queueId));
}

export function catalogFor(env: Env, accountId: string) {
  return env.ACCOUNT_CATALOG.get(env.ACCOUNT_CATALOG.idFromName(accountId));
}

/** Regions Durable Objects accept as location hints; others (like "local") get no hint. */
const LOCATION_HINTS = new Set(["wnam", "enam", "sam", "weur", "eeur", "apac", "oc", "afr", "me"]);

export function storageShardFor(env: Env, shardName: string, region?: string) {
  const id = env.STORAGE_SHARD.idFromName(shardName);
  if (region && LOCATION_HINTS.has(region)) {
    return env.STORAGE_SHARD.get(id, { locationHint: region as DurableObjectLocationHint });
  }
  return env.STORAGE_SHARD.get(id);
}

/** Consumer shard i of a queue. */
export function consumerShardFor(env: Env, queueId: string, index: number) {
  return env.SHARD_CONSUMERS.get(env.SHARD_CONSUMERS.idFromName(`${queueId}:consumer:${index}`));
}

/** KV keys a queue's shard map is published under: by id and by name, both scoped to the account. */
export function shardMapKeys(accountId: string, queueId: string, queueName: string): [string, string] {
  return [shardMapKeyById(accountId, queueId), shardMapKeyByName(accountId, queueName)];
}
export const shardMapKeyById = (accountId: string, queueId: string) => `map/${accountId}/id/${queueId}`;
export const shardMapKeyByName = (accountId: string, queueName: string) => `map/${accountId}/name/${queueName}`;

/** One of a queue's Idempotency-Key tables (coordinator/idempotency-keys.ts): keys are spread over several by hash. */
export function idempotencyKeysFor(env: Env, queueId: string, bucket: number) {
  return env.IDEMPOTENCY_KEYS.get(env.IDEMPOTENCY_KEYS.idFromName(`${queueId}:idempotency:${bucket}`));
}
