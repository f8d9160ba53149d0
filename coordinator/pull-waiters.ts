/**
 * Long-polling pulls (POST .../messages/pull with `wait_time_ms`) waiting for messages. A
 * pull that found nothing holds a call here until a storage shard of the queue says it has
 * new messages (notifyReady) or its wait ends. One waiter is woken per notification, the
 * one that has waited longest: a thousand idle pullers woken by one message would be a
 * thousand leases for one message. While others still wait, the shard is told to say so
 * again on its next new messages (a shard otherwise says it once, until a lease finds it
 * empty); and a woken pull that took a full batch wakes the next, since more may be ready.
 *
 * A notification that finds nobody waiting is kept for a moment: a pull that found nothing
 * and is on its way here would otherwise miss the message that came meanwhile and wait out
 * its whole wait. Waiters live in memory: a Coordinator that restarts fails their calls,
 * and each pull looks at the shards again (broker/http/pull-api.ts).
 *
 * A pull whose client went away is cancelled by its wait id: a waiter still waiting is
 * dropped, so the next message wakes a pull someone will read; one already woken hands its
 * wake-up to the next waiter; and a pull between two waits does not wait again.
 */

/** The timers waits run on: the system's, or a test's. */
export interface WaitTimers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export const systemTimers: WaitTimers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** How long a notification that found nobody waiting still wakes the next pull that comes. */
export const UNCLAIMED_WAKE_MS = 1000;
/** How long woken and cancelled waiters' ids are remembered: a cancel after the wake-up, a wait after the cancel. */
export const WAIT_ID_MEMORY_MS = 30_000;

interface Waiter {
  id: string | undefined;
  resolve: (woken: boolean) => void;
  handle: unknown;
}

export class PullWaiters {
  private readonly waiting: Waiter[] = [];
  /** When a notification last found nobody waiting; null once a pull has taken it. */
  private unclaimedAt: number | null = null;
  /** Waiters woken lately, by id, with when: a cancel after the wake-up passes it on. */
  private readonly woken = new Map<string, number>();
  /** Waits cancelled lately: the pull may be between two waits, and must not wait again. */
  private readonly cancelled = new Map<string, number>();

  constructor(
    private readonly now: () => number,
    public timers: WaitTimers = systemTimers,
  ) {}

  /** Resolves true when woken by new messages, false when `ms` passed first (or it was cancelled). */
  wait(ms: number, id?: string): Promise<boolean> {
    if (id !== undefined && this.cancelled.has(id)) return Promise.resolve(false);
    if (this.unclaimedAt !== null && this.now() - this.unclaimedAt < UNCLAIMED_WAKE_MS) {
      this.unclaimedAt = null;
      if (id !== undefined) this.remember(this.woken, id);
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const waiter: Waiter = {
        id,
        resolve,
        handle: this.timers.set(() => {
          const i = this.waiting.indexOf(waiter);
          if (i >= 0) this.waiting.splice(i, 1);
          resolve(false);
        }, ms),
      };
      this.waiting.push(waiter);
    });
  }

  /** New messages: wakes the longest waiter. True while others still wait. */
  wakeOne(): boolean {
    const waiter = this.waiting.shift();
    if (!waiter) {
      this.unclaimedAt = this.now();
      return false;
    }
    this.timers.clear(waiter.handle);
    if (waiter.id !== undefined) this.remember(this.woken, waiter.id);
    waiter.resolve(true);
    return this.waiting.length > 0;
  }

  /**
   * The client of waiter `id` went away: dropped if it still waits; if it was woken, the
   * wake-up goes to the next waiter (or is kept for the next pull). False when neither: the
   * pull had answered, or never waited.
   */
  cancel(id: string): boolean {
    this.remember(this.cancelled, id);
    const i = this.waiting.findIndex((w) => w.id === id);
    if (i >= 0) {
      const [waiter] = this.waiting.splice(i, 1);
      this.timers.clear(waiter!.handle);
      waiter!.resolve(false);
      return true;
    }
    if (!this.woken.delete(id)) return false;
    this.wakeOne();
    return true;
  }

  private remember(ids: Map<string, number>, id: string): void {
    const now = this.now();
    for (const [old, at] of ids) {
      if (now - at < WAIT_ID_MEMORY_MS) break; // in insertion order: the rest are newer
      ids.delete(old);
    }
    ids.delete(id);
    ids.set(id, now);
  }

  get count(): number {
    return this.waiting.length;
  }
}
