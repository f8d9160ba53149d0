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

interface Waiter {
  resolve: (woken: boolean) => void;
  handle: unknown;
}

export class PullWaiters {
  private readonly waiting: Waiter[] = [];
  /** When a notification last found nobody waiting; null once a pull has taken it. */
  private unclaimedAt: number | null = null;

  constructor(
    private readonly now: () => number,
    public timers: WaitTimers = systemTimers,
  ) {}

  /** Resolves true when woken by new messages, false when `ms` passed first. */
  wait(ms: number): Promise<boolean> {
    if (this.unclaimedAt !== null && this.now() - this.unclaimedAt < UNCLAIMED_WAKE_MS) {
      this.unclaimedAt = null;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const waiter: Waiter = {
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
    waiter.resolve(true);
    return this.waiting.length > 0;
  }

  get count(): number {
    return this.waiting.length;
  }
}
