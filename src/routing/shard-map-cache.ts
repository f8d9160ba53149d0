import { serviceConfig } from "../kernel/config";
import type { Env } from "../kernel/env";
import { QUEUE_ID_PATTERN } from "../kernel/ids";
import type { ShardMap, ShardState } from "../kernel/shard-map";
import { QUEUE_NAME_PATTERN } from "../kernel/settings";
import { catalogFor, coordinatorFor, shardMapKeyById, shardMapKeyByName } from "../kernel/addressing";

/** How long an isolate remembers that a queue does not exist. */
const NEGATIVE_TTL_MS = 1000;
const MAX_ENTRIES = 10_000;

interface Entry {
  map: ShardMap | null;
  expiresAt: number;
}

/**
 * Shard maps as the broker sees them: isolate memory (a few seconds), then KV
 * (eventually consistent, up to 60 s behind), then the queue's Coordinator when KV
 * has nothing yet. A stale map is expected: shards refuse what they must not take
 * and the broker asks the Coordinator for the current map (`authoritative`).
 */
const entries = new Map<string, Entry>();

export async function cachedShardMap(env: Env, accountId: string, queueRef: string): Promise<ShardMap | null> {
  if (!isQueueRef(queueRef)) return null;
  const key = cacheKey(accountId, queueRef);
  const hit = entries.get(key);
  const now = Date.now();
  if (hit && hit.expiresAt > now) return hit.map;
  const kvKey = QUEUE_ID_PATTERN.test(queueRef)
    ? shardMapKeyById(accountId, queueRef)
    : shardMapKeyByName(accountId, queueRef);
  const fromKv = await env.SHARD_MAPS.get<ShardMap>(kvKey, "json");
  const map = fromKv && fromKv.accountId === accountId ? fromKv : await authoritativeShardMap(env, accountId, queueRef);
  remember(env, key, map);
  return map;
}

/** The Coordinator's current map, bypassing memory and KV; refreshes the cache. */
export async function authoritativeShardMap(env: Env, accountId: string, queueRef: string): Promise<ShardMap | null> {
  if (!isQueueRef(queueRef)) return null;
  // Ids go through the account's catalog too: an id of another account's queue, or a
  // made-up one, resolves to nothing and never wakes a Coordinator.
  const queueId = await catalogFor(env, accountId).resolve(queueRef);
  const map = queueId ? await coordinatorFor(env, queueId).shardMap() : null;
  const mine = map && map.accountId === accountId ? map : null;
  remember(env, cacheKey(accountId, queueRef), mine);
  return mine;
}

/**
 * Remembers, until the cached map expires, that a shard refused sends, so this
 * isolate stops offering it batches without asking the Coordinator for a new map.
 */
export function noteShardRefused(accountId: string, queueRef: string, shardName: string, state: ShardState): void {
  const hit = entries.get(cacheKey(accountId, queueRef));
  if (!hit?.map) return;
  const shards = hit.map.shards.map((s) => (s.name === shardName ? { ...s, state } : s));
  hit.map = { ...hit.map, shards };
}

/** Forget what this isolate knows of a queue (after a create, delete or settings change here). */
export function forgetShardMap(accountId: string, ...queueRefs: string[]): void {
  for (const ref of queueRefs) entries.delete(cacheKey(accountId, ref));
}

function remember(env: Env, key: string, map: ShardMap | null): void {
  if (entries.size >= MAX_ENTRIES) entries.delete(entries.keys().next().value!);
  const ttl = map ? serviceConfig(env).shardMapCacheTtlMs : NEGATIVE_TTL_MS;
  entries.set(key, { map, expiresAt: Date.now() + ttl });
}

function cacheKey(accountId: string, queueRef: string): string {
  return `${accountId}/${queueRef}`;
}

function isQueueRef(ref: string): boolean {
  return QUEUE_ID_PATTERN.test(ref) || QUEUE_NAME_PATTERN.test(ref);
}
