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
 * and each pull looks at the shards again (broker/http/long-poll.ts).
 *
 * A pull whose client went away is cancelled by its wait id: a waiter still waiting is
 * dropped, so the next message wakes a pull someone will read; one already woken hands its
 * wake-up to the next waiter; and a pull between two waits does not wait again. A woken
 * pull that answered with messages says so (answered), so a cancel after its answer is
 * told the truth and wakes nobody: its wake-up was used.
 *
 * Waiting pulls are capped per queue and per token (limits): each holds a request at the
 * edge and a call here, so a client opening them without end grows the service's memory
 * without end. The caps are far above a consumer fleet's needs (README, "Pull consumers
 * and long polling", says why); a pull over one is refused before it waits.
 */
import { MAX_WAITING_PULLS_PER_QUEUE, MAX_WAITING_PULLS_PER_TOKEN } from "../src/kernel/limits";
import type { WaitCap } from "../src/kernel/pull-waits";
import { systemTimers, type Timers } from "../src/kernel/clock";

/** The timers waits run on: the system's, or a test's. */
export type WaitTimers = Timers;

/** How long a notification that found nobody waiting still wakes the next pull that comes. */
export const UNCLAIMED_WAKE_MS = 1000;
/** How long woken and cancelled waiters' ids are remembered: a cancel after the wake-up, a wait after the cancel. */
export const WAIT_ID_MEMORY_MS = 30_000;

interface Waiter {
  id: string | undefined;
  token: string | undefined;
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
  /** Woken pulls that answered with messages lately: a cancel after the answer is too late. */
  private readonly answeredIds = new Map<string, number>();
  /** Waiters per token, to hold the per-token cap without a scan. */
  private readonly byToken = new Map<string, number>();
  limits = { perQueue: MAX_WAITING_PULLS_PER_QUEUE, perToken: MAX_WAITING_PULLS_PER_TOKEN };

  constructor(
    private readonly now: () => number,
    public timers: WaitTimers = systemTimers,
  ) {}

  /** The cap a new waiter of `token` would go over, or null when it may wait. */
  overCap(token?: string): { capped: WaitCap; limit: number } | null {
    if (this.waiting.length >= this.limits.perQueue) return { capped: "queue", limit: this.limits.perQueue };
    if (token !== undefined && (this.byToken.get(token) ?? 0) >= this.limits.perToken)
      return { capped: "token", limit: this.limits.perToken };
    return null;
  }

  /** Resolves true when woken by new messages, false when `ms` passed first (or it was cancelled). */
  wait(ms: number, id?: string, token?: string): Promise<boolean> {
    if (id !== undefined && this.cancelled.has(id)) return Promise.resolve(false);
    // Waiting again after a wake-up that found nothing: that wake-up is spent.
    if (id !== undefined) this.woken.delete(id);
    if (this.unclaimedAt !== null && this.now() - this.unclaimedAt < UNCLAIMED_WAKE_MS) {
      this.unclaimedAt = null;
      if (id !== undefined) this.remember(this.woken, id);
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const waiter: Waiter = {
        id,
        token,
        resolve,
        handle: this.timers.set(() => {
          this.remove(waiter);
          resolve(false);
        }, ms),
      };
      this.waiting.push(waiter);
      if (token !== undefined) this.byToken.set(token, (this.byToken.get(token) ?? 0) + 1);
    });
  }

  /** Ends every wait with nothing (delivery was paused: a waiting pull must not lease). */
  endAll(): number {
    const all = this.waiting.splice(0);
    this.byToken.clear();
    for (const w of all) {
      this.timers.clear(w.handle);
      w.resolve(false);
    }
    return all.length;
  }

  /** The woken pull `id` answered with messages: its wake-up is used, and a cancel now is too late. */
  answered(id: string): void {
    this.woken.delete(id);
    this.remember(this.answeredIds, id);
  }

  /** Whether pull `id` answered with messages in the last WAIT_ID_MEMORY_MS. */
  hasAnswered(id: string): boolean {
    const at = this.answeredIds.get(id);
    return at !== undefined && this.now() - at < WAIT_ID_MEMORY_MS;
  }

  private remove(waiter: Waiter): boolean {
    const i = this.waiting.indexOf(waiter);
    if (i < 0) return false;
    this.waiting.splice(i, 1);
    this.untrack(waiter);
    return true;
  }

  private untrack(waiter: Waiter): void {
    if (waiter.token === undefined) return;
    const n = (this.byToken.get(waiter.token) ?? 1) - 1;
    if (n <= 0) this.byToken.delete(waiter.token);
    else this.byToken.set(waiter.token, n);
  }

  /** New messages: wakes the longest waiter. True while others still wait. */
  wakeOne(): boolean {
    const waiter = this.waiting.shift();
    if (!waiter) {
      this.unclaimedAt = this.now();
      return false;
    }
    this.untrack(waiter);
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
    const waiter = this.waiting.find((w) => w.id === id);
    if (waiter && this.remove(waiter)) {
      this.timers.clear(waiter.handle);
      waiter.resolve(false);
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
