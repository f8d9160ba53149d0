/**
 * The work a storage shard does once its requests stop, before the platform can drop its
 * memory.
 *
 * A Durable Object with no request for about ten seconds is evicted (hibernated on
 * Cloudflare, evicted by workerd under `wrangler dev`): its next request or alarm finds a
 * new instance that knows only its rows. A shard keeps some things in memory to write them
 * with a later write for nothing (deferred acks, the running totals: docs/segments.md), so
 * they must be written before that. And a shard on the slow report cadence whose traffic
 * stopped would otherwise send its last report at its next slow report, minutes later,
 * from an instance that has lost its activity and its deferred acks.
 *
 * So QUIET_MS after the last request, a timer in memory runs the shard's quiet work
 * (ShardCore.quietNow): its last report, saying it sleeps (StorageHeartbeat.last), and the
 * write of everything deferred. The timer costs no request, no alarm and no row: it runs
 * in the instance the last request kept alive, within the time the platform keeps it
 * anyway. Traffic with no gap of QUIET_MS never runs it.
 *
 * One timer at a time, never cleared: a timer belongs to the request that set it, and
 * clearTimeout() from another request of the object does not reach it (workerd). When it
 * fires and a request came since, it waits out the rest of the quiet time again; one that
 * never fired (its request's context gone) is replaced at the next request.
 */
import type { Timers } from "../src/kernel/clock";

/** No request for this long: the quiet work runs. Well under the platform's eviction of an idle object. */
export const QUIET_MS = 3000;

export class QuietTimer {
  /** When the last request came (Date.now(): the timers run on real time). */
  private lastTouch = 0;
  /** When the pending timer should fire; null when none is pending. */
  private firesAt: number | null = null;

  constructor(
    /** The timers to run on now: none while a test drives fake time (it runs the quiet work itself). */
    private readonly timers: () => Timers | null,
    private readonly run: () => Promise<void>,
  ) {}

  /** A request came: the quiet work runs QUIET_MS after the last one. */
  touch(): void {
    const timers = this.timers();
    if (!timers) return;
    const now = Date.now();
    this.lastTouch = now;
    // A timer past due by a quiet time never fired: its context is gone; a new one.
    if (this.firesAt !== null && now < this.firesAt + QUIET_MS) return;
    this.arm(timers, QUIET_MS);
  }

  private arm(timers: Timers, ms: number): void {
    this.firesAt = Date.now() + ms;
    timers.set(() => {
      this.firesAt = null;
      const quietFor = Date.now() - this.lastTouch;
      if (quietFor < QUIET_MS) return this.arm(timers, QUIET_MS - quietFor);
      this.run().catch((err: unknown) =>
        console.error("storage shard: quiet work failed (the next request or alarm does it):", err),
      );
    }, ms);
  }
}
