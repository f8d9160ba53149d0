/**
 * Idempotent HTTP sends: an `Idempotency-Key` header on POST .../messages or
 * .../messages/batch, and message ids chosen by the producer (`id` on a message).
 * Each is claimed in the queue's IdempotencyKeys objects before anything is stored
 * (coordinator/idempotency-keys.ts says why a table, and not only the storage shards'
 * memory of recent ids), so for 24 hours a retried request stores nothing again and is
 * answered with the ids of the first, and a key or id reused for something else is
 * refused with 409. Plain sends never come here: they pay nothing for this.
 */
import { idempotencyKeysFor, storageShardFor } from "../kernel/addressing";
import type { Env } from "../kernel/env";
import { HttpError, unavailable } from "../kernel/errors";
import { drawTagOf, keyDrawnId, locate, newMessageId, randomHex, shardNumber } from "../kernel/ids";
import type { PendingMessage } from "./pending-messages";
import type { ShardBacklog } from "../kernel/figures";
import type { ClaimOutcome, KeyClaim } from "../kernel/id-claims";
import type { ShardEntry } from "../kernel/shard-map";
import { seededRandom } from "./placement";
import { lookupQueue } from "./queue-lookup";
import { storeMessages, type SendTarget, type Stored } from "./store";

/** Objects a queue's keys are spread over, so idempotent sends are not bound to one object's rate. */
export const IDEMPOTENCY_BUCKETS = 16;
/** Visible ASCII only (no spaces, no control characters), at most 255 characters, as Stripe takes them. */
export const IDEMPOTENCY_KEY_PATTERN = /^[\x21-\x7e]{1,255}$/;

export const HEADER = "idempotency-key";

/** The request's Idempotency-Key, null without one; 400 naming the header when it is not a usable key. */
export function idempotencyKeyOf(request: Request): string | null {
  const raw = request.headers.get(HEADER);
  if (raw === null) return null;
  if (!IDEMPOTENCY_KEY_PATTERN.test(raw))
    throw HttpError.invalid(HEADER, "must be 1 to 255 visible ASCII characters (no spaces or control characters)");
  return raw;
}

export interface IdempotentSend {
  /** The Idempotency-Key header, or null. */
  key: string | null;
  route: "message" | "batch";
  messages: PendingMessage[];
  batchDelaySeconds: number | undefined;
  /** Where a message's id sits in the request, for errors: "id", "messages[3].id". */
  idField: (index: number) => string;
}

interface Held {
  bucket: number;
  keys: string[];
}

export function bucketOf(key: string): number {
  return Math.floor(seededRandom(key)() * IDEMPOTENCY_BUCKETS);
}

/** Stores the request's messages at most once per key and per producer id; answers with their ids in order. */
export async function sendIdempotent(env: Env, target: SendTarget, req: IdempotentSend): Promise<Stored> {
  const map = await lookupQueue(env, target.accountId, target.queueRef);
  const now = Date.now();
  const token = randomHex(16);
  const digests = await Promise.all(req.messages.map(messageDigest));
  const tag = randomHex(6);
  const drawn = new Set<string>();
  let ids = req.messages.map(
    (m) => m.id ?? (req.key === null ? newMessageId(now) : drawForKey(now, tag, req.key, drawn)),
  );
  const held: Held[] = [];
  const skip = new Set<number>();
  let retry = false;
  try {
    if (req.key !== null) {
      const digest = await sha256Hex(
        utf8.encode(
          JSON.stringify([
            req.route,
            req.batchDelaySeconds ?? null,
            req.messages.map((m, i) => [m.id ?? null, digests[i]]),
          ]),
        ),
      );
      const [outcome] = await claim(
        env,
        map.queueId,
        [{ key: `key:${req.key}`, digest, ids, tag, digests }],
        token,
        held,
      );
      if (outcome!.status === "done") return { ids: outcome!.ids, queueId: map.queueId, backlogs: [] };
      const claimed = claimedOrThrow(outcome!, HEADER, "was already used with a different request to this queue");
      ids = claimed.ids;
      retry ||= claimed.retry;
    }
    const withIds = req.messages.flatMap((m, i) => (m.id === undefined ? [] : [i]));
    if (withIds.length > 0) {
      const claims = withIds.map((i) => ({
        key: `id:${ids[i]}`,
        digest: digests[i]!,
        ids: [ids[i]!],
        tag: drawTagOf(ids[i]!),
      }));
      const outcomes = await claim(env, map.queueId, claims, token, held);
      outcomes.forEach((o, j) => {
        if (o.status === "done") skip.add(withIds[j]!);
        else
          retry ||= claimedOrThrow(
            o,
            req.idField(withIds[j]!),
            "was already sent to this queue with a different body, content type or delay",
          ).retry;
      });
      for (const i of await drawnByShards(
        env,
        target,
        req,
        withIds.filter((i) => !skip.has(i)),
      ))
        skip.add(i);
    }
  } catch (err) {
    // Refused before anything was sent: keys this request claimed are let go.
    await release(env, map.queueId, held, token, false);
    throw err;
  }

  let store = req.messages.flatMap((_, i) => (skip.has(i) ? [] : [i]));
  let backlogs: ShardBacklog[] = [];
  if (store.length > 0) {
    try {
      if (retry) {
        const there = await heldAnywhere(
          env,
          target,
          store.map((i) => ids[i]!),
        );
        store = store.filter((i) => !there.has(ids[i]!));
      }
      // Each on the shard its id picks, which skips ids it has: with `retry`, one may
      // have been stored there since the look above, by an attempt that is still running.
      if (store.length > 0)
        ({ backlogs } = await storeMessages(
          env,
          target,
          store.map((i) => req.messages[i]!),
          req.batchDelaySeconds,
          store.map((i) => ids[i]!),
          retry,
        ));
    } catch (err) {
      await release(env, map.queueId, held, token, true);
      throw err;
    }
  }
  // Stored and so acknowledged, whatever happens next. A key left pending is taken over
  // by a retry after IN_PROGRESS_MS, which stores with dedupe on the same shard.
  const done = await Promise.allSettled(
    held.map((h) => idempotencyKeysFor(env, map.queueId, h.bucket).complete(h.keys)),
  );
  for (const d of done) if (d.status === "rejected") console.error("marking idempotency keys done failed:", d.reason);
  return { ids, queueId: map.queueId, backlogs };
}

/**
 * An id for a message of an Idempotency-Key send, drawn so that its claim as a producer's
 * id (`id:<it>`) falls in the key's own IdempotencyKeys object, which so finds the send
 * that drew it by its tag without a row per id. About 16 draws of a hash, no I/O. The ids
 * of one send share their time and tag, so each is drawn unlike the others (`drawn`).
 */
function drawForKey(now: number, tag: string, key: string, drawn: Set<string>): string {
  const bucket = bucketOf(`key:${key}`);
  for (;;) {
    const id = keyDrawnId(now, tag);
    if (bucketOf(`id:${id}`) === bucket && !drawn.has(id)) {
      drawn.add(id);
      return id;
    }
  }
}

/**
 * Producer ids (at `indexes` of the request) that a storage shard of the queue drew for a
 * message of its own, which the id claims cannot know: a shard's located id names the
 * shard (src/kernel/ids.ts locate), which answers whether it drew it. The same message
 * (content type, ordering key, body) is answered as stored, so its index is returned and
 * nothing is stored; another, or one whose every trace is gone, is a 409 naming the id.
 * A random id names none of the queue's shards, so this asks nothing for almost every send.
 */
async function drawnByShards(env: Env, target: SendTarget, req: IdempotentSend, indexes: number[]): Promise<number[]> {
  if (indexes.length === 0) return [];
  let map = await lookupQueue(env, target.accountId, target.queueRef);
  // A shard added since this isolate read the map may have drawn it: shards are numbered on
  // from the last, so only a number just past the map's asks the Coordinator for its current one.
  const last = Math.max(...map.shards.map((s) => shardNumber(s.name)));
  if (indexes.some((i) => isJustPast(locate(req.messages[i]!.id!)?.shard, last)))
    map = await lookupQueue(env, target.accountId, target.queueRef, { current: true });
  const byShard = new Map<ShardEntry, number[]>();
  for (const i of indexes) {
    const named = locate(req.messages[i]!.id!)?.shard;
    for (const s of map.shards) if (shardNumber(s.name) === named) byShard.set(s, [...(byShard.get(s) ?? []), i]);
  }
  const same = new Set<number>();
  const answers = await Promise.allSettled(
    [...byShard].map(async ([s, at]) => {
      const probes = at.map((i) => {
        const m = req.messages[i]!;
        return {
          id: m.id!,
          contentType: m.contentType,
          body: m.body,
          ...(m.orderingKey !== undefined ? { orderingKey: m.orderingKey } : {}),
        };
      });
      const said = await storageShardFor(env, s.name, s.region).drawnIds(map.queueId, probes);
      at.forEach((i, k) => {
        if (said[k] === "other")
          throw new HttpError(
            "conflict",
            `${req.idField(i)}: is an id this queue drew for another message; choose another`,
            req.idField(i),
          );
        if (said[k] === "same") same.add(i);
      });
    }),
  );
  const conflict = answers.find((a) => a.status === "rejected" && a.reason instanceof HttpError);
  if (conflict) throw (conflict as PromiseRejectedResult).reason;
  const failed = answers.find((a) => a.status === "rejected");
  if (failed) {
    console.error("asking a shard whether it drew an id failed:", (failed as PromiseRejectedResult).reason);
    throw unavailable("storage shard unavailable; retry later", null);
  }
  return [...same];
}

/** Shard numbers a map read a few seconds ago may not show yet: a scale-out adds a few at a time. */
const NEW_SHARDS = 64;

function isJustPast(n: number | undefined, last: number): boolean {
  return n !== undefined && n > last && n <= last + NEW_SHARDS;
}

/**
 * Which of `ids` some shard of the queue holds or remembers storing. An earlier attempt
 * placed them by id over the map it read, and the map may have changed since (a shard
 * drained, retired or added, or that attempt's map was stale): the shard an id picks now
 * may never have seen it, and would store a second copy, delivered again after the first
 * was acked. So every shard of the Coordinator's current map is asked, draining and
 * retired ones too. A shard that cannot answer fails the send (503, nothing stored, the
 * key kept for the next retry) rather than risk the copy. The one place left unasked is
 * a shard retired long enough ago for the Coordinator to forget it (coordinator/control-loop.ts).
 */
async function heldAnywhere(env: Env, target: SendTarget, ids: string[]): Promise<Set<string>> {
  const map = await lookupQueue(env, target.accountId, target.queueRef, { current: true });
  const answers = await Promise.allSettled(
    map.shards.map((s) => storageShardFor(env, s.name, s.region).heldIds(map.queueId, ids)),
  );
  const held = new Set<string>();
  for (const a of answers) {
    if (a.status === "rejected") {
      console.error("asking a shard which ids it holds failed:", a.reason);
      throw unavailable("storage shard unavailable; retry later with the same key", null);
    }
    for (const id of a.value) held.add(id);
  }
  return held;
}

function claimedOrThrow(outcome: ClaimOutcome, field: string, mismatch: string): { ids: string[]; retry: boolean } {
  if (outcome.status === "claimed") return outcome;
  if (outcome.status === "mismatch")
    throw new HttpError("conflict", `${field}: ${mismatch} in the last 24 hours`, field);
  const seconds = Math.max(1, Math.ceil((outcome.status === "busy" ? outcome.retryAfterMs : 1000) / 1000));
  const err = new HttpError(
    "conflict",
    `${field}: a request with this ${field === HEADER ? "key" : "message id"} is in progress; retry after ${seconds} s`,
    field,
  );
  err.headers["retry-after"] = String(seconds);
  throw err;
}

/** Claims over the buckets the keys hash to, side by side; what each bucket claimed is added to `held`. */
async function claim(
  env: Env,
  queueId: string,
  claims: KeyClaim[],
  token: string,
  held: Held[],
): Promise<ClaimOutcome[]> {
  const byBucket = new Map<number, number[]>();
  claims.forEach((c, i) => {
    const b = bucketOf(c.key);
    byBucket.set(b, [...(byBucket.get(b) ?? []), i]);
  });
  const outcomes: ClaimOutcome[] = new Array(claims.length);
  const calls = await Promise.allSettled(
    [...byBucket].map(async ([bucket, indexes]) => {
      const answer = await idempotencyKeysFor(env, queueId, bucket).claim(
        indexes.map((i) => claims[i]!),
        token,
      );
      indexes.forEach((i, j) => (outcomes[i] = answer[j]!));
      const keys = indexes.filter((_, j) => answer[j]!.status === "claimed").map((i) => claims[i]!.key);
      if (keys.length > 0) held.push({ bucket, keys });
    }),
  );
  const failed = calls.find((c) => c.status === "rejected");
  if (failed) {
    console.error("idempotency key claim failed:", failed.reason);
    throw unavailable("idempotency keys could not be checked; retry with the same key", null);
  }
  return outcomes;
}

async function release(env: Env, queueId: string, held: Held[], token: string, sent: boolean): Promise<void> {
  const calls = await Promise.allSettled(
    held.map((h) => idempotencyKeysFor(env, queueId, h.bucket).release(h.keys, token, sent)),
  );
  // Unreleased keys free themselves after IN_PROGRESS_MS.
  for (const c of calls) if (c.status === "rejected") console.error("releasing idempotency keys failed:", c.reason);
}

const utf8 = new TextEncoder();

/** What makes two sends of a message the same: its content type, its own delay, its ordering key and its body bytes. */
async function messageDigest(m: PendingMessage): Promise<string> {
  // The key only when there is one: digests of keyless sends stay what they were before keys existed.
  const head = utf8.encode(
    `${m.contentType}\n${m.delaySeconds ?? ""}\n${m.orderingKey === undefined ? "" : `key:${m.orderingKey}\n`}`,
  );
  const bytes = new Uint8Array(head.byteLength + m.body.byteLength);
  bytes.set(head);
  bytes.set(m.body, head.byteLength);
  return sha256Hex(bytes);
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}
