/**
 * What a storage shard keeps in memory about delivery, so that a message delivered and
 * acked the first time costs two row writes (insert, delete) and no more:
 *
 * - Leases of fresh messages. A fresh message (due_at NULL) is leased here, not in
 *   SQLite; only when its lease fails (retry, expiry) is the row updated, and from then
 *   on it is a scheduled message with a stored lease (delivery.ts).
 * - The scan cursor: every fresh row with seq <= cursor is leased here or gone, so the
 *   next lease reads on from the cursor and never re-reads leased rows.
 * - The running totals, written to SQLite at most once a second (flushTotals).
 *
 * All of it is lost when the object restarts, and that is safe: the cursor starts again
 * at 0, so every fresh row is ready again (at-least-once: a message whose lease was
 * lost is delivered again, and that delivery is not counted as a retry); a late ack for
 * a lost lease still deletes the message; totals lose at most the last second.
 */
import type { DeliveryTotals } from "../src/kernel/protocol";

export interface MemoryLease {
  /** The message id, checked on settle: seq values can be reused after a restart. */
  id: string;
  /** The random part of the lease id handed out. */
  lease: string;
  until: number;
}

/** The running totals, by the column names of the `counters` table. */
export type TotalName = "stored" | "leased" | "acked" | "retried" | "dead_lettered" | "dropped" | "expired" | "quarantined" | "purged" | "cancelled";
const TOTAL_NAMES: readonly TotalName[] = ["stored", "leased", "acked", "retried", "dead_lettered", "dropped", "expired", "quarantined", "purged", "cancelled"];
/** How often, at most, the running totals are written. */
export const TOTALS_FLUSH_MS = 1000;

export class DeliveryState {
  readonly leases = new Map<number, MemoryLease>();
  cursor = 0;
  /** Seq for the next insert: always above the cursor, so a new row is never behind it. */
  nextSeq: number;
  private readonly totals: Record<TotalName, number>;
  private dirty = false;
  private flushedAt = 0;
  /** The earliest `until` among memory leases (a lower bound): when to look for expired ones. */
  private earliestUntil = Infinity;

  constructor(private readonly sql: SqlStorage) {
    const row = sql.exec(`SELECT ${TOTAL_NAMES.join(", ")} FROM counters`).one() as Record<TotalName, number>;
    this.totals = { ...row };
    this.nextSeq = (sql.exec<{ s: number | null }>("SELECT MAX(seq) AS s FROM messages").one().s ?? 0) + 1;
  }

  /** A lease id names the row (seq) and the lease (random): settling needs no index. */
  static leaseId(seq: number, lease: string): string {
    return `${seq}-${lease}`;
  }

  static parseLeaseId(leaseId: string): { seq: number; lease: string } | null {
    const dash = leaseId.indexOf("-");
    const seq = Number(leaseId.slice(0, dash));
    const lease = leaseId.slice(dash + 1);
    return dash > 0 && Number.isSafeInteger(seq) && seq > 0 && lease ? { seq, lease } : null;
  }

  hold(seq: number, lease: MemoryLease): void {
    this.leases.set(seq, lease);
    if (lease.until < this.earliestUntil) this.earliestUntil = lease.until;
  }

  /** The memory lease on `seq` if it is the one named, else undefined. */
  held(seq: number, id: string, lease: string): MemoryLease | undefined {
    const l = this.leases.get(seq);
    return l && l.id === id && l.lease === lease ? l : undefined;
  }

  extend(seq: number, until: number): void {
    const l = this.leases.get(seq);
    if (l) l.until = until;
  }

  /** Memory leases past their time, removed from the table: the caller stores them as failed deliveries. */
  takeExpired(now: number): Array<[number, MemoryLease]> {
    if (now < this.earliestUntil) return [];
    const out: Array<[number, MemoryLease]> = [];
    let earliest = Infinity;
    for (const [seq, l] of this.leases) {
      if (l.until <= now) out.push([seq, l]);
      else if (l.until < earliest) earliest = l.until;
    }
    for (const [seq] of out) this.leases.delete(seq);
    this.earliestUntil = earliest;
    return out;
  }

  /** Memory leases still running at `now` (one that ran out is only removed at the next lease). */
  liveLeases(now: number): number {
    let n = 0;
    for (const l of this.leases.values()) if (l.until > now) n++;
    return n;
  }

  /** When the first memory lease runs out, or null: a lower bound (a lease settled since may be the one). */
  earliestExpiry(): number | null {
    return this.earliestUntil === Infinity ? null : this.earliestUntil;
  }

  bump(name: TotalName, n: number): void {
    if (n === 0) return;
    this.totals[name] += n;
    this.dirty = true;
    // A quarantine is rare and is what operators alert on: written with the transaction
    // that moved the row, so a crash in the next second cannot drop it from the total.
    if (name === "quarantined") this.flushedAt = -Infinity;
  }

  current(): DeliveryTotals {
    const t = this.totals;
    return {
      stored: t.stored, leased: t.leased, acked: t.acked, retried: t.retried, deadLettered: t.dead_lettered, dropped: t.dropped,
      expired: t.expired, quarantined: t.quarantined, purged: t.purged, cancelled: t.cancelled,
    };
  }

  /** Writes the totals (one row) when they changed and the last write is a second old, or when `force`d. */
  flushTotals(now: number, force = false): void {
    if (!this.dirty || (!force && now - this.flushedAt < TOTALS_FLUSH_MS)) return;
    this.sql.exec(`UPDATE counters SET ${TOTAL_NAMES.map((n) => `${n} = ?`).join(", ")}`, ...TOTAL_NAMES.map((n) => this.totals[n]));
    this.dirty = false;
    this.flushedAt = now;
  }

  /** After deleteAll(): nothing held, nothing counted. */
  reset(): void {
    this.leases.clear();
    this.cursor = 0;
    this.nextSeq = 1;
    for (const n of TOTAL_NAMES) this.totals[n] = 0;
    this.dirty = false;
    this.earliestUntil = Infinity;
  }
}
