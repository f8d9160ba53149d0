import { serviceConfig } from "../kernel/config";
import type { Env } from "../kernel/env";
import { HttpError } from "../kernel/errors";
import { newMessageId } from "../kernel/ids";
import type { AppendRequest, AppendResult, EncodedMessage, ShardBacklog, ShardEntry, ShardMap } from "../kernel/protocol";
import { storageShardFor } from "../kernel/addressing";
import type { PendingMessage } from "./pending-messages";
import { authoritativeShardMap, cachedShardMap, noteShardRefused } from "./shard-map-cache";

/** Attempts over different shards before a send gives up (each refusal stored nothing). */
const MAX_SHARD_ATTEMPTS = 8;
/** How long a send keeps trying when every shard is at its capacity, waiting for the autoscaler. */
const OVERLOAD_PATIENCE_MS = 5000;
/** Retries of the same shard after a transient RPC failure; a retry is deduplicated by id on the shard. */
const MAX_TRANSIENT_RETRIES = 2;
const BACKOFF_BASE_MS = 25;
const BACKOFF_CAP_MS = 400;

/**
 * What a send answers with: its ids in order, its queue, and the backlog of the shard
 * that took it (null when nothing was written: an idempotent send already stored).
 */
export interface Stored {
  ids: string[];
  queueId: string;
  backlog: ShardBacklog | null;
}

export interface SendTarget {
  accountId: string;
  queueRef: string;
  region: string | undefined;
}

/**
 * Stores a batch on one storage shard of the queue, all or nothing, and returns the
 * message ids in order (with the shard's backlog after it, for the queue's figures). A shard that refuses (draining, retired, unknown: a stale map)
 * has stored nothing, so the batch goes to another; the map is then re-read from the
 * Coordinator. Every batch lands exactly once or the caller gets an error.
 */
export async function storeMessages(
  env: Env,
  target: SendTarget,
  pending: PendingMessage[],
  batchDelaySeconds?: number,
  keepIds?: string[],
  /** Ask the shard to skip ids it already stored: a write again of the same messages. */
  dedupe = keepIds !== undefined,
): Promise<Stored> {
  let map = await cachedShardMap(env, target.accountId, target.queueRef);
  if (!map) throw notFound(target.queueRef);
  const now = Date.now();
  // Messages that keep their ids (a move to a dead-letter queue, an idempotent send) go to
  // a shard chosen by id, so writing them again after a crash lands on the same shard
  // and stores nothing new.
  const random = keepIds ? seededRandom(keepIds[0]!) : Math.random;
  const messages: EncodedMessage[] = pending.map((m, i) => ({
    id: keepIds?.[i] ?? newMessageId(now),
    body: m.body,
    contentType: m.contentType,
    delayMs: (m.delaySeconds ?? batchDelaySeconds ?? map!.settings.delivery_delay) * 1000,
    checksum: m.checksum,
    ...(m.moveKey !== undefined ? { moveKey: m.moveKey } : {}),
    ...(m.sentAt !== undefined ? { sentAt: m.sentAt } : {}),
  }));
  const region = target.region ?? serviceConfig(env).defaultRegion;
  const refused = new Set<string>();
  let refreshed = false;
  let overloaded = 0;
  const patience = Date.now() + OVERLOAD_PATIENCE_MS;

  for (let attempt = 0; attempt < MAX_SHARD_ATTEMPTS; attempt++) {
    const shard = pickShard(map, region, refused, random);
    if (!shard) {
      // Every shard was at capacity just now: back off (full jitter) and try them all
      // again with a fresh map, which may have new shards by then.
      if (overloaded > 0 && overloaded === refused.size && Date.now() < patience) {
        await sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(6, attempt)));
        map = (await authoritativeShardMap(env, target.accountId, target.queueRef)) ?? map;
        refused.clear();
        overloaded = 0;
        attempt = -1; // a new round over every shard; bounded by OVERLOAD_PATIENCE_MS
        continue;
      }
      if (refreshed) break;
      map = await authoritativeShardMap(env, target.accountId, target.queueRef);
      if (!map) throw notFound(target.queueRef);
      refreshed = true;
      continue;
    }
    // Ids kept or chosen by the sender may be written again after a lost reply, even once consumed.
    const result = await appendWithRetry(env, shard, { queueId: map.queueId, messages, ...(dedupe ? { dedupe: true } : {}), ...(keepIds ? { remember: true } : {}) });
    if (result.ok) return { ids: messages.map((m) => m.id), queueId: map.queueId, backlog: result.backlog };
    refused.add(shard.name);
    if (result.refused === "overloaded") {
      overloaded++;
      continue;
    }
    if (result.refused === "draining" || result.refused === "retired") {
      noteShardRefused(target.accountId, target.queueRef, shard.name, result.refused);
    }
    if (!refreshed && result.refused !== "draining" && result.refused !== "corrupt") {
      // Retired or unknown: the map is older than a shard change or a queue delete.
      map = await authoritativeShardMap(env, target.accountId, target.queueRef);
      if (!map) throw notFound(target.queueRef);
      refreshed = true;
    }
  }
  const err = new HttpError("unavailable", "no storage shard of this queue accepted the messages; retry later");
  err.headers["retry-after"] = "1";
  throw err;
}

/**
 * A random active shard in the caller's region; any active shard when the region has
 * none. Random choice spreads load without coordination between broker isolates.
 */
export function pickShard(map: ShardMap, region: string, exclude: ReadonlySet<string>, random: () => number = Math.random): ShardEntry | undefined {
  const usable = map.shards.filter((s) => s.state === "active" && !exclude.has(s.name));
  const local = usable.filter((s) => s.region === region);
  const pool = local.length ? local : usable;
  return pool.length ? pool[Math.floor(random() * pool.length)] : undefined;
}

/** A number in [0, 1) fixed by `key` (FNV-1a): where a message that keeps its id is placed. */
export function seededRandom(key: string): () => number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  const value = (h >>> 0) / 2 ** 32;
  return () => value;
}

async function appendWithRetry(env: Env, shard: ShardEntry, req: AppendRequest): Promise<AppendResult> {
  for (let retry = 0; ; retry++) {
    try {
      // The first try may have been stored with its reply lost: a retry skips what is there.
      return await storageShardFor(env, shard.name, shard.region).append(retry > 0 ? { ...req, dedupe: true } : req);
    } catch (err) {
      const e = err as { retryable?: boolean; overloaded?: boolean };
      // Never retry an overloaded object: that only adds to its load.
      if (!e.retryable || e.overloaded || retry >= MAX_TRANSIENT_RETRIES) {
        console.error(`append to shard ${shard.name} failed:`, err);
        throw new HttpError("unavailable", "storage shard unavailable; retry later");
      }
      await sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** retry));
    }
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function notFound(queueRef: string): HttpError {
  return new HttpError("not_found", `queue "${queueRef}" not found`, "queue");
}
