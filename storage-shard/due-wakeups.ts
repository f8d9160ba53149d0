/**
 * Long-polling pulls wait at the Coordinator, which hears of ready messages only when a shard
 * says so (consumer-wakeups.ts). A send says so at once; a message that becomes ready later
 * (its delay or retry delay ends, a lease runs out, a held key's next message comes due)
 * has nobody to say it. So while a pull waits, the shard it found empty watches its own
 * scheduled work: one alarm at the earliest due time (shared with the heartbeat's), which
 * tells the Coordinator then.
 *
 * What it costs follows the pulls, not the clock: a shard watches only after a pull that
 * will wait found it empty (the lease request says until when: `watchUntil`), and stops when
 * its wait is over or when the Coordinator answers a wake-up with nobody left waiting. While
 * it watches, an alarm (a row written) and a notifyReady RPC per due time that comes before
 * the next heartbeat, and at most one per waiting pull woken: nothing per message stored.
 */
import type { DeliveryState } from "./segments/delivery-state";
import { KEYED_DUE } from "./segments/segment-placement";

export class DueWakeups {
  /** Until when a waiting pull wants to hear of this shard's messages becoming ready. */
  private watchUntil = 0;
  /** When the next scheduled message is due while watched, or null. */
  wakeAt: number | null = null;

  constructor(
    private readonly sql: SqlStorage,
    private readonly ds: DeliveryState,
  ) {}

  /** A pull that found nothing here waits until `until`. */
  watch(until: number): void {
    if (until > this.watchUntil) this.watchUntil = until;
  }

  /** Nobody waits any more (the Coordinator said so). */
  stop(): void {
    this.watchUntil = 0;
    this.wakeAt = null;
  }

  /** Works out the next wake-up; true when it is sooner than the one planned (the alarm must move). */
  plan(now: number): boolean {
    if (now >= this.watchUntil) {
      this.wakeAt = null;
      return false;
    }
    const due = nextDueAfter(this.sql, this.ds, now);
    const next = due !== null && due <= this.watchUntil ? due : null;
    const sooner = next !== null && (this.wakeAt === null || next < this.wakeAt);
    this.wakeAt = next;
    return sooner;
  }

  /** At an alarm: whether a wake-up was due (it is then spent). */
  takeDue(now: number): boolean {
    if (this.wakeAt === null || now < this.wakeAt) return false;
    this.wakeAt = null;
    return true;
  }
}

/** The first time after `now` a message here becomes ready: a scheduled segment, a lease end, a key's waiting head. */
export function nextDueAfter(sql: SqlStorage, ds: DeliveryState, now: number): number | null {
  const times = [nextScheduledAfter(sql, now), ds.nextExpiryAfter(now), ds.keys.nextDue(now)];
  const due = times.filter((t): t is number => t !== null);
  return due.length === 0 ? null : Math.min(...due);
}

/**
 * The first time after `now` a scheduled segment (delayed or retried messages) is next looked
 * at: one read of the due index. A segment whose time has passed has ready messages, and
 * its later ones get their time once a lease takes those.
 */
export function nextScheduledAfter(sql: SqlStorage, now: number): number | null {
  return sql
    .exec<{ t: number | null }>(
      "SELECT MIN(due_at) AS t FROM segments WHERE due_at IS NOT NULL AND due_at > ? AND due_at < ?",
      now,
      KEYED_DUE,
    )
    .one().t;
}
