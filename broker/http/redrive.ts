/**
 * POST .../queues/:dlq/redrive: moves messages from a dead-letter queue back to the
 * queue they came from (what Cloudflare lacks; SQS's StartMessageMoveTask). A move
 * never loses a message: each batch is leased in the dead-letter queue, written to the
 * target keeping its ids, and only then acked where it was (src/routing/move-messages.ts).
 * A crash in between leaves it leased; the lease ends and the next redrive writes the
 * same copies again, which the target recognises by their move keys and stores once.
 */
import { z } from "zod";
import { catalogFor, coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { HttpError, unavailable } from "../../src/kernel/errors";
import { LIMITS, MAX_MATCHING_LEASE } from "../../src/kernel/limits";
import type { MessageFilter } from "../../src/kernel/message-operations";
import { leaseRefOf, type LeasedMessage } from "../../src/kernel/protocol";
import { notRetired, type ShardMap } from "../../src/kernel/shard-map";
import { sleep } from "../../src/kernel/sleep";
import { ok } from "./envelope";
import { moveMessages } from "../../src/routing/move-messages";
import { lookupQueue } from "../../src/routing/queue-lookup";
import { readOptionalJson } from "./read-json";
import { parseWith, wholeNumber as int } from "../../src/kernel/validate";

const DEFAULT_LIMIT = 1000;
const DEFAULT_PER_SECOND = 500;
/** How long a batch stays leased in the dead-letter queue: far beyond one write and one ack. */
const MOVE_LEASE_MS = 60_000;
/**
 * Wall time one request spends moving. A slow rate and a large limit could otherwise
 * hold a request open for hours; past this it answers with what it moved, and
 * `remaining_matching` tells the client to call again.
 */
const TIME_BUDGET_MS = 30_000;
const QUEUES_PER_PAGE = 100;
const MAX_ATTEMPTS_FILTER = 10_000;

const age = int(0, LIMITS.maxRetentionSeconds, " s (the longest retention)");
/** Deliveries in the dead-letter queue: a dead-lettered message starts there at 0, as on Cloudflare. */
const attempts = int(0, MAX_ATTEMPTS_FILTER);

export const redriveBody = z
  .object({
    target_queue: z.string({ error: "must be a queue name or id" }).min(1, "must not be empty").optional(),
    filter: z
      .object(
        {
          min_age_seconds: age.optional(),
          max_age_seconds: age.optional(),
          min_attempts: attempts.optional(),
          max_attempts: attempts.optional(),
        },
        { error: "must be an object" },
      )
      .strict()
      .optional(),
    limit: int(1, 10_000).optional(),
    messages_per_second: int(1, 5000).optional(),
  })
  .strict();

type RedriveBody = z.infer<typeof redriveBody>;

export async function redriveQueue(request: Request, env: Env, accountId: string, dlqRef: string): Promise<Response> {
  const body = parseWith(redriveBody, await readOptionalJson(request));
  const filter = toFilter(body.filter);
  const dlq = await lookupQueue(env, accountId, dlqRef, { current: true });
  const target = await resolveTarget(env, accountId, dlq, body.target_queue);
  const moved = await moveMatching(
    env,
    accountId,
    dlq,
    target,
    filter,
    body.limit ?? DEFAULT_LIMIT,
    body.messages_per_second ?? DEFAULT_PER_SECOND,
  );
  return ok({ moved, target_queue: target.queueName, remaining_matching: await countRemaining(env, dlq, filter) });
}

function toFilter(f: RedriveBody["filter"]): MessageFilter {
  if (!f) return {};
  if (f.min_age_seconds !== undefined && f.max_age_seconds !== undefined && f.min_age_seconds > f.max_age_seconds) {
    throw HttpError.invalid("filter.max_age_seconds", "must be at least filter.min_age_seconds");
  }
  if (f.min_attempts !== undefined && f.max_attempts !== undefined && f.min_attempts > f.max_attempts) {
    throw HttpError.invalid("filter.max_attempts", "must be at least filter.min_attempts");
  }
  const out: MessageFilter = {};
  if (f.min_age_seconds !== undefined) out.minAgeMs = f.min_age_seconds * 1000;
  if (f.max_age_seconds !== undefined) out.maxAgeMs = f.max_age_seconds * 1000;
  if (f.min_attempts !== undefined) out.minAttempts = f.min_attempts;
  if (f.max_attempts !== undefined) out.maxAttempts = f.max_attempts;
  return out;
}

/** The named queue, else the one queue whose consumer dead-letters into this one. */
async function resolveTarget(env: Env, accountId: string, dlq: ShardMap, asked: string | undefined): Promise<ShardMap> {
  if (asked !== undefined) {
    const map = await lookupQueue(env, accountId, asked, { current: true, field: "target_queue" });
    if (map.queueId === dlq.queueId)
      throw HttpError.invalid("target_queue", "must be another queue than the one redriven");
    return map;
  }
  const sources = await sourcesOf(env, accountId, dlq.queueName);
  if (sources.length !== 1) {
    const why =
      sources.length === 0
        ? `no queue's consumer names "${dlq.queueName}" as its dead_letter_queue`
        : `${sources.map((s) => `"${s}"`).join(", ")} all name "${dlq.queueName}" as their dead_letter_queue`;
    throw HttpError.invalid("target_queue", `is required: ${why}`);
  }
  return lookupQueue(env, accountId, sources[0]!, { current: true, field: "target_queue" });
}

/** Names of the account's queues whose consumer dead-letters into `dlqName` (consumers name it by name). */
async function sourcesOf(env: Env, accountId: string, dlqName: string): Promise<string[]> {
  const catalog = catalogFor(env, accountId);
  const out: string[] = [];
  for (let page = 1; ; page++) {
    const { queues, total } = await catalog.listQueues(page, QUEUES_PER_PAGE);
    const withConsumer = queues.filter((q) => q.consumers_total_count > 0);
    const consumers = await Promise.all(withConsumer.map((q) => coordinatorFor(env, q.queue_id).consumers()));
    for (const [i, cs] of consumers.entries())
      if (cs.some((c) => c.dead_letter_queue === dlqName)) out.push(withConsumer[i]!.queue_name);
    if (queues.length === 0 || page * QUEUES_PER_PAGE >= total) return out;
  }
}

/**
 * Moves up to `limit` matching messages, shard by shard, in batches of at most 100 and
 * at most a second's worth, each batch written no earlier than the rate allows. The
 * pause comes after the lease, so finding nothing more never costs a pause.
 */
async function moveMatching(
  env: Env,
  accountId: string,
  dlq: ShardMap,
  target: ShardMap,
  filter: MessageFilter,
  limit: number,
  perSecond: number,
): Promise<number> {
  const started = Date.now();
  let moved = 0;
  let taken = 0;
  for (const s of notRetired(dlq.shards)) {
    const shard = storageShardFor(env, s.name, s.region);
    while (taken < limit) {
      if (Date.now() - started > TIME_BUDGET_MS) return moved;
      const want = Math.min(MAX_MATCHING_LEASE, perSecond, limit - taken);
      let batch: LeasedMessage[];
      try {
        batch = await shard.leaseMatching(dlq.queueId, filter, want, MOVE_LEASE_MS);
      } catch (err) {
        throw stopped(moved, `storage shard ${s.name} of "${dlq.queueName}" did not answer`, err);
      }
      if (batch.length === 0) break;
      await sleep(started + (taken * 1000) / perSecond - Date.now());
      taken += batch.length;
      moved += await moveBatch(env, accountId, dlq, s.name, target, batch, moved);
      if (batch.length < want) break;
    }
  }
  return moved;
}

/**
 * Write, then ack; answers how many were written. A failed write gives the leases back, so
 * nothing waits out MOVE_LEASE_MS. A purge meanwhile leaves a batch under its move lease
 * alone (storage-shard/segments/segment-operations.ts purgeSome), so what is written was not reported purged.
 */
async function moveBatch(
  env: Env,
  accountId: string,
  dlq: ShardMap,
  shardName: string,
  target: ShardMap,
  batch: LeasedMessage[],
  movedSoFar: number,
): Promise<number> {
  const shard = storageShardFor(env, shardName);
  const refs = batch.map(leaseRefOf);
  try {
    // A fresh start in its queue: attempts from 1, visible at once, id and timestamp kept.
    await moveMessages(env, accountId, target.queueId, { queueId: dlq.queueId, shard: shardName }, batch);
  } catch (err) {
    await shard
      .releaseLeases(dlq.queueId, refs)
      .catch((e: unknown) =>
        console.error(`redrive: releasing leases on ${shardName} failed (they end in ${MOVE_LEASE_MS} ms):`, e),
      );
    throw stopped(
      movedSoFar,
      `writing to "${target.queueName}" failed${err instanceof HttpError ? ` (${err.message})` : ""}`,
      err,
    );
  }
  try {
    // A stale ack (the lease ran out and someone else took the message) leaves it here: at least once, never lost.
    const { stale } = await shard.settle({
      queueId: dlq.queueId,
      acks: refs,
      retries: [],
      deadLettered: [],
      dropped: [],
      moved: true,
    });
    if (stale.length > 0)
      console.warn(
        `redrive: ${stale.length} message(s) written to "${target.queueName}" were no longer leased on ${shardName}; they may be moved again`,
      );
    return batch.length;
  } catch (err) {
    throw stopped(
      movedSoFar + batch.length,
      `acknowledging on storage shard ${shardName} failed; the copies already written are not written twice`,
      err,
    );
  }
}

/** Still matching in the dead-letter queue; null when a shard could not be counted. */
async function countRemaining(env: Env, dlq: ShardMap, filter: MessageFilter): Promise<number | null> {
  const outcomes = await Promise.allSettled(
    notRetired(dlq.shards).map((s) => storageShardFor(env, s.name, s.region).countMatching(dlq.queueId, filter)),
  );
  let n = 0;
  for (const o of outcomes) {
    if (o.status === "rejected") return null;
    n += o.value;
  }
  return n;
}

function stopped(moved: number, why: string, cause: unknown): HttpError {
  console.error(`redrive stopped: ${why}:`, cause);
  return unavailable(`the redrive stopped after moving ${moved} message(s): ${why}; nothing was lost, call it again`);
}
