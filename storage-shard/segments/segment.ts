/**
 * A segment: the messages that arrived together, stored as one SQLite row (schema.ts),
 * as a log stores a batch. This module is the row's format and nothing else: the
 * per-message headers, the packed bodies, the bitmap of settled slots, and the ids that
 * say where their message lives. docs/segments.md tells the life of a message in one.
 *
 * A slot is a message's place in its segment (0 to count - 1). A slot's header and body
 * never change once written (the open head segment takes new slots after its last, see
 * segment-writes.ts appendToHead); what changes is which slots are settled (acked,
 * dead-lettered, retried elsewhere, expired, ...), and the segment row is deleted when all are.
 */
import type { ContentType } from "../../src/kernel/protocol";
export { locate, locatedId, shardNumber } from "../../src/kernel/ids";

/** One message's header, as stored in its segment. */
export interface Header {
  /** The message id. */
  id: string;
  contentType: ContentType;
  size: number;
  /** CRC-32 of the body, as the broker computed it. */
  checksum: number;
  /** When it arrived at this queue (retention and redrive filters count from here). */
  enqueuedAt: number;
  /** When it is first due; 0 for a message ready as soon as it arrived. */
  dueAt: number;
  /** Deliveries that failed before this copy was written (a retry rewrites the message with one more). */
  attempts: number;
  /** When it was first sent, for a message moved from another queue; else 0 (enqueuedAt). */
  sentAt: number;
  /**
   * The copy this message is, when it was rewritten (a retry, a lease that ran out) or
   * converted from a row of the old schema; "" when this slot is where it was first written.
   * It names the stored copy for ever (moves are remembered by it) and is what a lease id
   * starts with, so a message keeps one identity however often it is rewritten.
   */
  copy: string;
  /** Whether its id is in the message_ids index (its id does not say where it lives). */
  indexed: boolean;
  /** Its ordering key, for a keyed message (keyed-order.ts); absent for the rest. */
  key?: string;
  /** A keyed message's epoch on arrival here: a hand-off holds back those of an epoch (handoff.ts). */
  gen?: number;
  /**
   * A keyed message's place in its key's order, when it is not this slot: the first place
   * it was written on this shard (`<seg>.<slot>`), which a rewrite keeps. "" or absent: here.
   */
  pos?: string;
}

/** Largest total of bodies in one segment: a batch over it is split. Rows must stay under 2 MB. */
export const SEGMENT_MAX_BYTES = 1024 * 1024;
/** Most messages in one segment: a slot number must fit a located id, and one settled bitmap stays small. */
export const SEGMENT_MAX_MESSAGES = 4096;

/** A keyless header's ten fields; a keyed one adds its key, epoch and place in its key's order. */
type HeaderTuple = [
  string,
  ContentType,
  number,
  number,
  number,
  number,
  number,
  number,
  string,
  0 | 1,
  string?,
  number?,
  string?,
];

/** Headers as the row's `headers` column: JSON tuples, a fraction of the bytes of objects. */
export function encodeHeaders(headers: readonly Header[]): string {
  return JSON.stringify(
    headers.map((h): HeaderTuple => {
      const t: HeaderTuple = [
        h.id,
        h.contentType,
        h.size,
        h.checksum,
        h.enqueuedAt,
        h.dueAt,
        h.attempts,
        h.sentAt,
        h.copy,
        h.indexed ? 1 : 0,
      ];
      if (h.key !== undefined) t.push(h.key, h.gen ?? 0, h.pos ?? "");
      return t;
    }),
  );
}

export function decodeHeaders(text: string): Header[] {
  return (JSON.parse(text) as HeaderTuple[]).map(
    ([id, contentType, size, checksum, enqueuedAt, dueAt, attempts, sentAt, copy, indexed, key, gen, pos]) => {
      const h: Header = {
        id,
        contentType,
        size,
        checksum,
        enqueuedAt,
        dueAt,
        attempts,
        sentAt,
        copy,
        indexed: indexed === 1,
      };
      if (key !== undefined) Object.assign(h, { key, gen: gen ?? 0, pos: pos ?? "" });
      return h;
    },
  );
}

/** Bodies end to end, in slot order; a slot's body is found by the sizes before it. */
export function packBodies(bodies: readonly Uint8Array[]): ArrayBuffer {
  let total = 0;
  for (const b of bodies) total += b.byteLength;
  const out = new Uint8Array(total);
  let at = 0;
  for (const b of bodies) {
    out.set(b, at);
    at += b.byteLength;
  }
  return out.buffer;
}

/** Where each slot's body starts in the packed bodies. */
export function offsetsOf(headers: readonly Header[]): number[] {
  const out: number[] = new Array<number>(headers.length);
  let at = 0;
  for (let i = 0; i < headers.length; i++) {
    out[i] = at;
    at += headers[i]!.size;
  }
  return out;
}

/** One slot's body: a copy, so it outlives the row read and can be sent on by RPC alone. */
export function bodyOf(
  bodies: ArrayBuffer,
  offsets: readonly number[],
  headers: readonly Header[],
  slot: number,
): Uint8Array {
  const at = offsets[slot]!;
  return new Uint8Array(bodies.slice(at, at + headers[slot]!.size));
}

/** The settled bitmap: bit `slot` set once that slot's message is settled. */
export class Settled {
  private constructor(readonly bits: Uint8Array) {}

  static none(count: number): Settled {
    return new Settled(new Uint8Array(Math.ceil(count / 8)));
  }

  static of(blob: ArrayBuffer): Settled {
    return new Settled(new Uint8Array(blob.slice(0)));
  }

  /** The same bits in a bitmap of `count` slots (a head segment that took more). */
  grown(count: number): Settled {
    const out = Settled.none(count);
    out.bits.set(this.bits.subarray(0, Math.min(this.bits.length, out.bits.length)));
    return out;
  }

  has(slot: number): boolean {
    return (this.bits[slot >> 3]! & (1 << (slot & 7))) !== 0;
  }

  set(slot: number): void {
    this.bits[slot >> 3]! |= 1 << (slot & 7);
  }

  /** As the row's `settled` column. */
  blob(): ArrayBuffer {
    return this.bits.buffer as ArrayBuffer;
  }
}

/** Segment numbers per millisecond before they run ahead of the clock. */
export const SEGS_PER_MS = 1024;

/**
 * The next segment number: above every one this shard has used and, after the last one
 * was deleted, above every one it could have used before (it counts from the clock), so
 * a number is never reused and a segment number with a slot names one copy for ever.
 */
export function nextSegment(last: number, now: number): number {
  return Math.max(last + 1, now * SEGS_PER_MS);
}

/** The key of one slot: memory leases and the header cache use it. */
export function slotKey(seg: number, slot: number): string {
  return `${seg}.${slot}`;
}

/** What a lease id names: the copy (the fault checker reads it), the slot and the lease. */
export interface LeaseName {
  copy: string;
  seg: number;
  slot: number;
  lease: string;
}

export function leaseIdOf(n: LeaseName): string {
  return `${n.copy}-${n.seg}.${n.slot}-${n.lease}`;
}

export function parseLeaseId(leaseId: string): LeaseName | null {
  const parts = leaseId.split("-");
  if (parts.length !== 3) return null;
  const [copy, where, lease] = parts as [string, string, string];
  const dot = where.indexOf(".");
  const seg = Number(where.slice(0, dot));
  const slot = Number(where.slice(dot + 1));
  return copy &&
    lease &&
    dot > 0 &&
    Number.isSafeInteger(seg) &&
    seg > 0 &&
    Number.isInteger(slot) &&
    slot >= 0 &&
    slot < SEGMENT_MAX_MESSAGES
    ? { copy, seg, slot, lease }
    : null;
}

/** The copy a slot holds: its own place, unless it was rewritten from another. */
export function copyOf(h: Header, seg: number, slot: number): string {
  return h.copy || slotKey(seg, slot);
}

/** A keyed message's place in its key's order: its first slot here, which rewrites keep. */
export type Pos = readonly [seg: number, slot: number];

export function posOf(h: Header, seg: number, slot: number): Pos {
  if (!h.pos) return [seg, slot];
  const dot = h.pos.indexOf(".");
  return [Number(h.pos.slice(0, dot)), Number(h.pos.slice(dot + 1))];
}

export function comparePos(a: Pos, b: Pos): number {
  return a[0] - b[0] || a[1] - b[1];
}

export function posText(p: Pos): string {
  return `${p[0]}.${p[1]}`;
}
