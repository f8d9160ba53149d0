/**
 * What a storage shard keeps in memory about delivery, so that delivering and acking a
 * segment's messages writes nothing but the segment row's settled bitmap (or its delete):
 *
 * - Leases. Every lease is held here, by slot, never written: a lease that fails (a
 *   retry, or its time running out) rewrites the message into a new segment with one
 *   more attempt (segment-leases.ts); one that succeeds settles the slot.
 * - The scan cursor: every ready slot of a segment at or below the cursor is leased
 *   here or settled, so the next lease reads on from the cursor and never re-reads them.
 * - The number the next segment gets, and the headers of segments read lately (a slot's
 *   never change, and an ack soon after a lease needs them again).
 * - The open head segment, where small appends go (segment-writes.ts appendToHead).
 * - Deferred acks: acks nobody waits on, settled here at once and written with the next
 *   write of their segment (docs/segments.md).
 * - The running totals, written to SQLite at most once a minute while traffic flows and
 *   when the shard goes to sleep (flushTotals).
 *
 * Before an idle object can be evicted, the quiet work writes the deferred acks, the totals
 * and the leases still running (quiet-timer.ts, held-leases.ts), and the next instance holds
 * those leases again. The rest, and all of it in a crash, is lost, and that is safe: the cursor starts again
 * at 0, so every unsettled slot is ready again (at-least-once: a message whose lease was
 * lost, or whose deferred ack was not written yet, is delivered again, and that delivery
 * is not counted as a retry); a late ack for a lost lease still settles its slot; the
 * next append opens a new head; totals lose what was counted since they were last written.
 */
import type { DeliveryTotals } from "../../src/kernel/figures";
import { KeyBook } from "../keyed/key-book";
import { decodeHeaders, type Header } from "./segment";

export interface MemoryLease {
  /** The message id, checked on settle. */
  id: string;
  /** The random part of the lease id handed out. */
  lease: string;
  until: number;
  /** Whether the delivery counts as an attempt (a redrive's lease does not). */
  counts: boolean;
}

/** Headers of this many segments are kept decoded. */
const HEADER_CACHE = 512;

/** The running totals, by the column names of the `counters` table. */
export type TotalName =
  | "stored"
  | "leased"
  | "acked"
  | "retried"
  | "dead_lettered"
  | "dropped"
  | "expired"
  | "quarantined"
  | "purged"
  | "cancelled";
const TOTAL_NAMES: readonly TotalName[] = [
  "stored",
  "leased",
  "acked",
  "retried",
  "dead_lettered",
  "dropped",
  "expired",
  "quarantined",
  "purged",
  "cancelled",
];
/**
 * How often, at most, the running totals are written while traffic flows: a row each
 * second would be a row per message for a queue of slow, steady sends. A shard going to
 * sleep writes them at once.
 */
export const TOTALS_FLUSH_MS = 60_000;
/** How long a deferred ack waits at most for a write of its segment before it is written alone. */
export const DEFERRED_MAX_MS = 5000;

/** The open head segment: the newest segment, written ready by an append, still taking small appends. */
export interface Head {
  seg: number;
  count: number;
  bytes: number;
  openedAt: number;
}

/**
 * Where a message whose memory lease ran out was rewritten, by the slot it was leased
 * from: an ack under that lease still lands on the new copy until someone leases it, as
 * Cloudflare accepts a late ack nobody overtook. Lost on restart, like the leases.
 */
export interface Lapsed {
  id: string;
  lease: string;
  key: string;
}
/** Lapsed leases remembered at most (the oldest are forgotten first). */
const LAPSED_KEPT = 10_000;

export class DeliveryState {
  /** By slotKey(seg, slot). */
  readonly leases = new Map<string, MemoryLease>();
  /** Ordering keys held back, and keyed leases (key-book.ts). */
  readonly keys = new KeyBook();
  /** By the slotKey the lease was on. */
  readonly lapsed = new Map<string, Lapsed>();
  cursor = 0;
  /**
   * The earliest arrival among scheduled segments (null: none), kept so the backlog's
   * oldest message costs no scan per call; undefined when a delete may have removed it
   * and it must be read again. Writes lower it, deletes of a scheduled segment at or
   * before it forget it (segment-writes.ts, segment-edit.ts).
   */
  scheduledOldest: number | null | undefined = undefined;
  /** The last segment number used: the next is above it and above the cursor (segment.ts nextSegment). */
  lastSeg: number;
  /** Null when the next append writes a new segment (segment-writes.ts appendToHead). */
  head: Head | null = null;
  /** Acks applied here and not yet written, by segment: the slots, and when the first was deferred. */
  readonly deferred = new Map<number, { slots: Set<number>; since: number }>();
  private readonly headers = new Map<number, Header[]>();
  private readonly totals: Record<TotalName, number>;
  private dirty = false;
  private flushedAt = 0;
  /**
   * A rare total moved since the last report (dead-lettered, dropped, expired, quarantined,
   * purged, cancelled): what operators alert on, reported within an interval even on the
   * slow cadence (shard-reports.ts busy). Cleared by the report.
   */
  notable = false;
  /** The earliest `until` among memory leases (a lower bound): when to look for expired ones. */
  private earliestUntil = Infinity;

  constructor(private readonly sql: SqlStorage) {
    const row = sql.exec(`SELECT ${TOTAL_NAMES.join(", ")} FROM counters`).one() as Record<TotalName, number>;
    this.totals = { ...row };
    this.lastSeg = sql.exec<{ s: number | null }>("SELECT MAX(seg) AS s FROM segments").one().s ?? 0;
  }

  /** A segment's headers, decoded once: a slot's never changes (an append into the open head replaces the list with a longer one). */
  headersOf(seg: number, text: string): Header[] {
    let h = this.headers.get(seg);
    if (!h) {
      h = decodeHeaders(text);
      this.remember(seg, h);
    }
    return h;
  }

  /** Decoded headers kept, or undefined: the caller reads the row. */
  cachedHeaders(seg: number): Header[] | undefined {
    return this.headers.get(seg);
  }

  remember(seg: number, headers: Header[]): void {
    if (!this.headers.has(seg) && this.headers.size >= HEADER_CACHE)
      this.headers.delete(this.headers.keys().next().value!);
    this.headers.set(seg, headers);
  }

  lapse(fromKey: string, to: Lapsed): void {
    if (this.lapsed.size >= LAPSED_KEPT) this.lapsed.delete(this.lapsed.keys().next().value!);
    this.lapsed.set(fromKey, to);
  }

  /** A deleted segment's headers are not kept (its number is never used again). */
  forget(seg: number): void {
    this.headers.delete(seg);
    this.deferred.delete(seg);
    if (this.head?.seg === seg) this.head = null;
  }

  /** An ack nobody waits on: settled here now, written with the next write of its segment. */
  defer(seg: number, slot: number, now: number): void {
    const d = this.deferred.get(seg);
    if (d) d.slots.add(slot);
    else this.deferred.set(seg, { slots: new Set([slot]), since: now });
  }

  /** The open head as it is now, to restore if the append's transaction rolls back. */
  headSnapshot(): { head: Head | null; headers?: Header[]; deferred?: { slots: Set<number>; since: number } } {
    const head = this.head;
    if (!head) return { head };
    const d = this.deferred.get(head.seg);
    return {
      head: { ...head },
      headers: this.headers.get(head.seg),
      ...(d ? { deferred: { slots: new Set(d.slots), since: d.since } } : {}),
    };
  }

  restoreHead(s: ReturnType<DeliveryState["headSnapshot"]>): void {
    this.head = s.head;
    if (!s.head) return;
    if (s.headers) this.headers.set(s.head.seg, s.headers);
    else this.headers.delete(s.head.seg);
    if (s.deferred) this.deferred.set(s.head.seg, s.deferred);
  }

  /** Slots of `seg` acked here and not yet written. */
  deferredSlots(seg: number): ReadonlySet<number> | undefined {
    return this.deferred.get(seg)?.slots;
  }

  hold(key: string, lease: MemoryLease): void {
    this.leases.set(key, lease);
    if (lease.until < this.earliestUntil) this.earliestUntil = lease.until;
  }

  /** The memory lease on slot `key` if it is the one named, else undefined. */
  held(key: string, id: string, lease: string): MemoryLease | undefined {
    const l = this.leases.get(key);
    return l && l.id === id && l.lease === lease ? l : undefined;
  }

  /**
   * Drops a slot's memory lease (its message settled, or taken from the consumer): a keyed
   * lease that holds nothing more ends, its row deleted (keyed-leases.ts). Answers the lease dropped.
   */
  drop(key: string): MemoryLease | undefined {
    const l = this.leases.get(key);
    if (!l) return undefined;
    this.leases.delete(key);
    this.keyedSlotGone(l.lease, key);
    return l;
  }

  /** A slot of a keyed lease is not held under it any more. */
  keyedSlotGone(lease: string, key: string): void {
    if (this.keys.settled(lease, key) === true) this.sql.exec("DELETE FROM key_leases WHERE lease = ?", lease);
  }

  extend(key: string, until: number): void {
    const l = this.leases.get(key);
    if (l) l.until = until;
  }

  /** Memory leases past their time, removed from the table: the caller rewrites them as failed deliveries. */
  takeExpired(now: number): Array<[string, MemoryLease]> {
    if (now < this.earliestUntil) return [];
    const out: Array<[string, MemoryLease]> = [];
    let earliest = Infinity;
    for (const [key, l] of this.leases) {
      if (l.until <= now) out.push([key, l]);
      else if (l.until < earliest) earliest = l.until;
    }
    for (const [key] of out) this.leases.delete(key);
    this.earliestUntil = earliest;
    return out;
  }

  /**
   * Whether a memory lease ran out at or before `now` and is still held (only a lease or
   * expireLeases() removes it). One comparison while none can have; a look that finds none
   * moves the lower bound up, so the next look is one comparison again.
   */
  hasLapsed(now: number): boolean {
    if (now < this.earliestUntil) return false;
    let earliest = Infinity;
    for (const l of this.leases.values()) {
      if (l.until <= now) return true;
      if (l.until < earliest) earliest = l.until;
    }
    this.earliestUntil = earliest;
    return false;
  }

  /** Memory leases still running at `now` (one that ran out is only removed at the next lease). */
  liveLeases(now: number): number {
    let n = 0;
    for (const l of this.leases.values()) if (l.until > now) n++;
    return n;
  }

  /**
   * When the first memory lease still running after `now` runs out, or null: the lower bound
   * while it is ahead (early by a lease settled since: one look for nothing), else the leases.
   */
  nextExpiryAfter(now: number): number | null {
    if (this.earliestUntil > now) return this.earliestUntil === Infinity ? null : this.earliestUntil;
    let next = Infinity;
    for (const l of this.leases.values()) if (l.until > now && l.until < next) next = l.until;
    return next === Infinity ? null : next;
  }

  /** When the first memory lease runs out, or null: a lower bound (a lease settled since may be the one). */
  earliestExpiry(): number | null {
    return this.earliestUntil === Infinity ? null : this.earliestUntil;
  }

  bump(name: TotalName, n: number): void {
    if (n === 0) return;
    this.totals[name] += n;
    this.dirty = true;
    if (name !== "stored" && name !== "leased" && name !== "acked" && name !== "retried") this.notable = true;
    // A quarantine is rare and is what operators alert on: written with the transaction
    // that moved the row, so a crash in the next second cannot drop it from the total.
    if (name === "quarantined") this.flushedAt = -Infinity;
  }

  current(): DeliveryTotals {
    const t = this.totals;
    return {
      stored: t.stored,
      leased: t.leased,
      acked: t.acked,
      retried: t.retried,
      deadLettered: t.dead_lettered,
      dropped: t.dropped,
      expired: t.expired,
      quarantined: t.quarantined,
      purged: t.purged,
      cancelled: t.cancelled,
    };
  }

  /** Writes the totals (one row) when they changed and the last write is TOTALS_FLUSH_MS old, or when `force`d. */
  flushTotals(now: number, force = false): void {
    if (!this.dirty || (!force && now - this.flushedAt < TOTALS_FLUSH_MS)) return;
    this.sql.exec(
      `UPDATE counters SET ${TOTAL_NAMES.map((n) => `${n} = ?`).join(", ")}`,
      ...TOTAL_NAMES.map((n) => this.totals[n]),
    );
    this.dirty = false;
    this.flushedAt = now;
  }

  /** After deleteAll(): nothing held, nothing counted. */
  reset(): void {
    this.leases.clear();
    this.keys.reset();
    this.lapsed.clear();
    this.headers.clear();
    this.deferred.clear();
    this.head = null;
    this.scheduledOldest = undefined;
    this.cursor = 0;
    this.lastSeg = 0;
    for (const n of TOTAL_NAMES) this.totals[n] = 0;
    this.dirty = false;
    this.flushedAt = 0;
    this.notable = false;
    this.earliestUntil = Infinity;
  }
}
