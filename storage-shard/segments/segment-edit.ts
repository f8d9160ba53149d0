/**
 * Settling slots of a segment row in one write, and writing the acks deferred in memory
 * (DeliveryState.deferred) the same way. Every function runs inside the caller's
 * transactionSync.
 */
import { DEFERRED_MAX_MS, type DeliveryState } from "./delivery-state";
import { Settled, type Header } from "./segment";
import { headersOf, readState, type SegmentState } from "./segment-rows";

/**
 * Writes deferred acks: those of every segment but the open head (its next append writes
 * them for nothing), and the head's too once they waited DEFERRED_MAX_MS, or with `all`
 * (the shard goes to sleep, a test corrupts bodies). One row written per segment (its
 * bitmap, or its delete when nothing is left).
 */
export function writeDeferred(sql: SqlStorage, ds: DeliveryState, now: number, all = false): void {
  for (const [seg, d] of [...ds.deferred]) {
    if (!all && seg === ds.head?.seg && now - d.since < DEFERRED_MAX_MS) continue;
    const state = readState(sql, seg);
    if (!state) {
      ds.deferred.delete(seg);
      continue;
    }
    new SegmentEdit(state, headersOf(sql, ds, seg)!, ds).commit(sql, ds);
  }
}

/**
 * Slots of one segment settled in one write: the bitmap and live figures, or the delete
 * when none is left, which takes the index entries of its indexed messages with it.
 * Returns the bytes of the slots settled now (those already settled are not counted).
 */
export class SegmentEdit {
  private readonly settled: Settled;
  private live: number;
  private liveBytes: number;
  private changed = false;
  private dueAt: number | null;
  private dueChanged = false;

  /** The acks deferred on this segment when it was read: this edit writes them. */
  private readonly deferred: boolean;

  constructor(
    readonly state: SegmentState,
    readonly headers: Header[],
    ds: DeliveryState,
  ) {
    this.settled = Settled.of(state.settled);
    this.live = state.live;
    this.liveBytes = state.live_bytes;
    this.dueAt = state.due_at;
    const deferred = ds.deferredSlots(state.seg);
    this.deferred = deferred !== undefined;
    for (const slot of deferred ?? []) this.settle(slot);
  }

  isSettled(slot: number): boolean {
    return this.settled.has(slot);
  }

  /** Settles a slot; false when it already was. */
  settle(slot: number): boolean {
    if (slot >= this.headers.length || this.settled.has(slot)) return false;
    this.settled.set(slot);
    this.live--;
    this.liveBytes -= this.headers[slot]!.size;
    this.changed = true;
    return true;
  }

  /** When the leaser should look at this scheduled segment next. */
  setDueAt(at: number | null): void {
    if (at === this.dueAt) return;
    this.dueAt = at;
    this.dueChanged = true;
  }

  get remaining(): number {
    return this.live;
  }

  /** Writes what changed: one row written (with its index entry when due_at moved), or the delete. */
  commit(sql: SqlStorage, ds: DeliveryState): void {
    const seg = this.state.seg;
    if (this.deferred) ds.deferred.delete(seg);
    if (this.changed && this.live <= 0) {
      this.headers.forEach((h, slot) => {
        if (h.indexed && this.settled.has(slot))
          sql.exec("DELETE FROM message_ids WHERE id = ? AND seg = ?", h.id, seg);
      });
      sql.exec("DELETE FROM segments WHERE seg = ?", seg);
      ds.forget(seg);
      // It may have held the scheduled segments' oldest message: read that again when asked.
      if (
        this.state.due_at !== null &&
        ds.scheduledOldest !== undefined &&
        this.state.enqueued_at <= (ds.scheduledOldest ?? Infinity)
      )
        ds.scheduledOldest = undefined;
      return;
    }
    if (this.changed) {
      sql.exec(
        "UPDATE segments SET settled = ?, live = ?, live_bytes = ?, due_at = ? WHERE seg = ?",
        this.settled.blob(),
        this.live,
        this.liveBytes,
        this.dueAt,
        seg,
      );
    } else if (this.dueChanged) {
      sql.exec("UPDATE segments SET due_at = ? WHERE seg = ?", this.dueAt, seg);
    }
  }
}
