import { jurisdictionOfQueue, queueIdIn, type Jurisdiction } from "./jurisdiction";

/**
 * Message ids a broker draws for an idempotent send (the shard draws located ids for the
 * others, below): 32 lowercase hex characters like Cloudflare's, time-ordered so that an
 * id tells when it was made: 12 hex of milliseconds since the epoch, then 20 random hex.
 */
export function newMessageId(now: number): string {
  return now.toString(16).padStart(12, "0").slice(-12) + randomHex(10);
}

/**
 * An id the broker draws for a message of an Idempotency-Key send: newMessageId's shape,
 * with the send's `tag` (12 hex) after the milliseconds, so that the queue's
 * IdempotencyKeys find the send that drew it by the tag (coordinator/idempotency-keys.ts)
 * when a producer sends it later as its own id.
 */
export function keyDrawnId(now: number, tag: string): string {
  return now.toString(16).padStart(12, "0").slice(-12) + tag + randomHex(4);
}

/** The tag a key send that drew `id` gave it (keyDrawnId); any 32-hex id has one, most were never drawn. */
export function drawTagOf(id: string): string {
  return id.slice(12, 24);
}

/** Queue ids: 32 hex characters, as Cloudflare's queue_id; random, or in a jurisdiction its tagged form (./jurisdiction.ts). */
export function newQueueId(jurisdiction?: Jurisdiction): string {
  if (jurisdiction) return queueIdIn(randomHex(8), jurisdiction);
  for (;;) {
    const id = randomHex(16);
    if (jurisdictionOfQueue(id) === undefined) return id;
  }
}

export function randomHex(bytes: number): string {
  const buf = new Uint8Array(bytes);
  crypto.getRandomValues(buf);
  let out = "";
  for (const b of buf) out += HEX[b]!;
  return out;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

export const QUEUE_ID_PATTERN = /^[0-9a-f]{32}$/;
export const MESSAGE_ID_PATTERN = /^[0-9a-f]{32}$/;

/**
 * A located id: the id a storage shard draws for a message it stores, 32 lowercase hex
 * characters as Cloudflare's, that says where the message was written: 14 for its
 * segment (storage-shard/segments/segment.ts: the number counts from the clock, so these ids
 * still sort by the time they were made), 6 for the shard's number in its queue
 * (shardNumber), 4 for its slot in the segment, and 8 random. Ids a sender chose, or a
 * message kept from another queue, say nothing: the shard indexes those.
 */
export function locatedId(seg: number, shard: number, slot: number, random: string): string {
  return (
    seg.toString(16).padStart(14, "0") +
    (shard & 0xffffff).toString(16).padStart(6, "0") +
    slot.toString(16).padStart(4, "0") +
    random
  );
}

/** Where a located id says its message was written. Any 32-hex id parses: the shard's header decides. */
export function locate(id: string): { seg: number; shard: number; slot: number } | null {
  if (!MESSAGE_ID_PATTERN.test(id)) return null;
  const seg = parseInt(id.slice(0, 14), 16);
  if (!Number.isSafeInteger(seg)) return null;
  return { seg, shard: parseInt(id.slice(14, 20), 16), slot: parseInt(id.slice(20, 24), 16) };
}

/** The number a storage shard's name ends with (`<queue>:<region>:<n>`); a name of another shape gets 0xffffff. */
export function shardNumber(name: string): number {
  const n = Number(name.slice(name.lastIndexOf(":") + 1));
  return Number.isSafeInteger(n) && n >= 0 && n < 0xffffff ? n : 0xffffff;
}
