/**
 * Queue operations over HTTP: purge (Cloudflare's), and looking up or cancelling one
 * message by id (beyond Cloudflare: our ids are returned by send). Each asks every
 * shard that may hold messages. They read the Coordinator's current map rather than a
 * cached one: a shard added a moment ago must not be skipped by a purge or a lookup,
 * and these are operator calls, rare enough to afford the two extra round trips.
 */
import { z } from "zod";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { HttpError, messageNotFound, queueNotFound, unavailable } from "../../src/kernel/errors";
import { locate, MESSAGE_ID_PATTERN, shardNumber } from "../../src/kernel/ids";
import type { MessageStatus } from "../../src/kernel/message-operations";
import { notRetired, type ShardMap } from "../../src/kernel/shard-map";
import { ok } from "./envelope";
import { readJson } from "./read-json";
import { findQueue, lookupQueue, lookupQueueId } from "../../src/routing/queue-lookup";
import { parseWith } from "../../src/kernel/validate";
import { PURGE_PER_CALL } from "../../src/kernel/limits";

/**
 * Purge calls one request makes at most (over all shards): 64 x 5,000 rows. Beyond
 * that it answers `completed: false` and the client calls again, rather than hold a
 * request open for as long as an arbitrarily large backlog takes.
 */
const MAX_PURGE_CALLS = 64;
/** Messages one request deletes at most when it answers their ids: the answer stays a few hundred KB. */
export const MAX_PURGED_IDS = 10_000;

export const purgeBody = z
  .object({
    // Cloudflare refuses a purge without it: deleting everything must be asked for in so many words.
    delete_messages_permanently: z.literal(true, {
      error: (iss) => (iss.input === undefined ? "is required" : "must be true"),
    }),
    return_ids: z.boolean({ error: "must be true or false" }).optional(),
  })
  .strict();

/**
 * POST .../purge: deletes every message of the queue, ready, delayed and leased. Answers the
 * queue, as Cloudflare's purge does (the SDK's `purge.start` types it a Queue), with shardq's
 * counts beside its fields: `purged`, `completed` (false: call again) and, asked for, `ids`.
 * None of them is a field of Cloudflare's Queue, so the answer is both. The queue's Coordinator
 * notes the purge, started and then done, for GET .../purge.
 */
export async function purgeQueue(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const body = parseWith(purgeBody, await readJson(request));
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const coordinator = coordinatorFor(env, map.queueId);
  const startedAt = Date.now();
  if (!(await coordinator.notePurge(startedAt, false))) throw queueNotFound(queueRef);
  const counts = body.return_ids ? await purgeShardsWithIds(env, map) : await purgeShards(env, map);
  const queue = await coordinator.notePurge(startedAt, counts.completed);
  if (!queue) throw queueNotFound(queueRef);
  return ok({ ...queue, ...counts });
}

/**
 * GET .../purge: Cloudflare's purge status, of the queue's last purge: `started_at` (ISO 8601)
 * and `completed`, "true" or "false" (Cloudflare types it a string): "false" while it runs, when
 * it stopped at its bound with messages left (a purge called again goes on), or when it failed.
 * `{}` when the queue was never purged.
 */
export async function purgeStatus(env: Env, accountId: string, queueRef: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const { queue, last } = await coordinatorFor(env, queueId).lastPurge();
  if (!queue) throw queueNotFound(queueRef);
  return ok(last ? { completed: String(last.completed), started_at: new Date(last.startedAt).toISOString() } : {});
}

/**
 * A purge that answers which messages it deleted (an operator's record, and the fault run's:
 * what a purge reports gone must never be delivered again). Shard after shard, up to
 * MAX_PURGED_IDS; `completed: false` means call again.
 */
export async function purgeShardsWithIds(
  env: Env,
  map: ShardMap,
  most = MAX_PURGED_IDS,
): Promise<{ purged: number; completed: boolean; ids: string[] }> {
  const ids: string[] = [];
  try {
    for (const s of notRetired(map.shards)) {
      const shard = storageShardFor(env, s.name, s.region);
      for (;;) {
        if (ids.length >= most) return { purged: ids.length, completed: false, ids };
        const r = await shard.purge(map.queueId, Math.min(PURGE_PER_CALL, most - ids.length), true);
        ids.push(...(r.ids ?? []));
        if (!r.more) break;
      }
    }
  } catch (err) {
    console.error(`purge of queue ${map.queueId}: a storage shard failed:`, err);
    throw unavailable(
      `the purge stopped after deleting ${ids.length} message(s) (${ids.join(", ") || "none"}): a storage shard did not answer; call it again`,
    );
  }
  return { purged: ids.length, completed: true, ids };
}

/**
 * Empties each shard in bounded steps, the shards side by side. Exported for tests,
 * which lower the limits to see the `completed: false` answer.
 */
export async function purgeShards(
  env: Env,
  map: ShardMap,
  limits = { perCall: PURGE_PER_CALL, maxCalls: MAX_PURGE_CALLS },
): Promise<{ purged: number; completed: boolean }> {
  let calls = 0;
  let purged = 0;
  let completed = true;
  const outcomes = await Promise.allSettled(
    notRetired(map.shards).map(async (s) => {
      const shard = storageShardFor(env, s.name, s.region);
      for (;;) {
        if (calls >= limits.maxCalls) {
          completed = false;
          return;
        }
        calls++;
        const r = await shard.purge(map.queueId, limits.perCall);
        purged += r.deleted;
        if (!r.more) return;
      }
    }),
  );
  const failed = outcomes.filter((o) => o.status === "rejected");
  if (failed.length > 0) {
    console.error(
      `purge of queue ${map.queueId}: ${failed.length} storage shard(s) failed:`,
      (failed[0] as PromiseRejectedResult).reason,
    );
    throw unavailable(
      `the purge stopped after deleting ${purged} message(s): ${failed.length} storage shard(s) did not answer; call it again`,
    );
  }
  return { purged, completed };
}

/** GET .../messages/:message_id */
export async function lookupMessage(
  env: Env,
  accountId: string,
  queueRef: string,
  messageId: string,
): Promise<Response> {
  checkMessageId(messageId);
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const hit = await findOnShards(env, map, messageId);
  if (hit) return ok(view(hit.status, hit.shard));
  // Dead-letter moves keep the id, so a message that left the queue that way is found there.
  const dlqName = (await coordinatorFor(env, map.queueId).consumers())[0]?.dead_letter_queue;
  const dlq = dlqName ? await findQueue(env, accountId, dlqName, { current: true }) : null;
  const dead = dlq ? await findOnShards(env, dlq, messageId) : null;
  if (dead) return ok({ ...view(dead.status, dead.shard), state: "dead_lettered", dead_letter_queue: dlq!.queueName });
  throw messageNotFound(messageId);
}

/** DELETE .../messages/:message_id */
export async function cancelMessage(
  env: Env,
  accountId: string,
  queueRef: string,
  messageId: string,
): Promise<Response> {
  checkMessageId(messageId);
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  // Every shard, not the first hit: an id should live on one shard, but cancel must leave none behind.
  const outcomes = await Promise.allSettled(
    notRetired(map.shards).map((s) => storageShardFor(env, s.name, s.region).cancelMessage(map.queueId, messageId)),
  );
  if (outcomes.some((o) => o.status === "fulfilled" && o.value)) return ok({ id: messageId, cancelled: true });
  if (outcomes.some((o) => o.status === "rejected"))
    throw unavailable("a storage shard of this queue did not answer, so the message may be there; retry");
  throw messageNotFound(messageId);
}

/**
 * The shard holding the message: the one its id names, if it does (ids a shard drew say
 * where they live), else all at once, each looking in its index of the ids that do not.
 * A shard that fails only matters when no other has the message: then "not found" might
 * be wrong, so it is a 503.
 */
async function findOnShards(
  env: Env,
  map: ShardMap,
  messageId: string,
): Promise<{ status: MessageStatus; shard: string } | null> {
  const named = locate(messageId)?.shard;
  const first = notRetired(map.shards).find((s) => shardNumber(s.name) === named);
  const there = first
    ? await storageShardFor(env, first.name, first.region)
        .findMessage(map.queueId, messageId)
        .then(
          (status) => ({ status }),
          () => null,
        )
    : null;
  if (there?.status) return { status: there.status, shard: first!.name };
  // The named shard answered "not here": the message was moved or rewritten, or the id is not one a shard drew.
  const shards = notRetired(map.shards).filter((s) => s !== first || !there);
  const outcomes = await Promise.allSettled(
    shards.map((s) => storageShardFor(env, s.name, s.region).findMessage(map.queueId, messageId)),
  );
  let failed = false;
  for (const [i, o] of outcomes.entries()) {
    if (o.status === "rejected") failed = true;
    else if (o.value) return { status: o.value, shard: shards[i]!.name };
  }
  if (failed)
    throw unavailable(`a storage shard of queue "${map.queueName}" did not answer, so the message may be there; retry`);
  return null;
}

function view(m: MessageStatus, shard: string) {
  return {
    id: m.id,
    state: m.state as string,
    attempts: m.attempts,
    timestamp_ms: m.enqueuedAt,
    visible_at_ms: m.visibleAt,
    size: m.size,
    content_type: m.contentType,
    shard,
  };
}

function checkMessageId(id: string): void {
  if (!MESSAGE_ID_PATTERN.test(id))
    throw HttpError.invalid("message_id", "must be 32 lowercase hexadecimal characters, as send returns it");
}
