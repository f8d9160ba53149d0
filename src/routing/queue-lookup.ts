/**
 * How a request finds its queue from the name or id in its path or body. Every caller
 * comes here, so a queue of another account, a made-up id and a name that cannot be a
 * queue's all resolve to the same 404 (queueNotFound), whichever route asked.
 *
 * Three sources, each for a reason:
 * - the cached map (isolate memory, then KV, then the Coordinator; shard-map-cache.ts):
 *   sends and everything on their path, which must not cost a round trip each;
 * - the Coordinator's current map (`current`): operator calls that must not skip a shard
 *   added a moment ago (purge, lookups by id, peek, redrive), rare enough to afford it;
 * - the account's catalog alone (lookupQueueId): calls that go to the queue's
 *   Coordinator next anyway, and must see a queue created a moment ago by another
 *   isolate, which a cached "no such queue" would hide.
 */
import { catalogFor } from "../kernel/addressing";
import type { Env } from "../kernel/env";
import { queueNotFound } from "../kernel/errors";
import type { ShardMap } from "../kernel/shard-map";
import { authoritativeShardMap, cachedShardMap } from "./shard-map-cache";

export interface QueueLookup {
  /** The Coordinator's current map rather than the cached one. */
  current?: boolean;
  /** The request field that named the queue, for the 404; "queue" (the path) unless a body field did. */
  field?: string;
}

/** The queue's shard map, or null when the account has no such queue. */
export async function findQueue(
  env: Env,
  accountId: string,
  queueRef: string,
  opts: Pick<QueueLookup, "current"> = {},
): Promise<ShardMap | null> {
  return (opts.current ? authoritativeShardMap : cachedShardMap)(env, accountId, queueRef);
}

/** The queue's shard map; 404 when the account has no such queue. */
export async function lookupQueue(
  env: Env,
  accountId: string,
  queueRef: string,
  opts: QueueLookup = {},
): Promise<ShardMap> {
  const map = await findQueue(env, accountId, queueRef, opts);
  if (!map) throw queueNotFound(queueRef, opts.field);
  return map;
}

/** The queue's id from the account's catalog; 404 when the account has no such queue. */
export async function lookupQueueId(env: Env, accountId: string, queueRef: string): Promise<string> {
  const queueId = await catalogFor(env, accountId).resolve(queueRef);
  if (!queueId) throw queueNotFound(queueRef);
  return queueId;
}

/**
 * What `read` gets from the queue (its Coordinator, say) through the cached map. A cached
 * map may name a queue deleted (and perhaps created again) since: when `read` answers null
 * for it, the current map is read and `read` asked once more; null again is a 404.
 */
export async function readQueue<T>(
  env: Env,
  accountId: string,
  queueRef: string,
  read: (map: ShardMap) => Promise<T | null>,
): Promise<T> {
  for (const current of [false, true]) {
    const found = await read(await lookupQueue(env, accountId, queueRef, { current }));
    if (found !== null) return found;
  }
  throw queueNotFound(queueRef);
}
