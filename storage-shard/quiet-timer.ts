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
 */
import type { Timers } from "../src/kernel/clock";

/** No request for this long: the quiet work runs. Well under the platform's eviction of an idle object. */
export const QUIET_MS = 3000;

export class QuietTimer {
  private handle: unknown = null;
  private armedOn: Timers | null = null;

  constructor(
    /** The timers to run on now: none while a test drives fake time (it runs the quiet work itself). */
    private readonly timers: () => Timers | null,
    private readonly run: () => Promise<void>,
  ) {}

  /** A request came: the quiet work runs QUIET_MS after the last one. */
  touch(): void {
    this.cancel();
    const timers = this.timers();
    if (!timers) return;
    this.armedOn = timers;
    this.handle = timers.set(() => {
      this.handle = null;
      this.armedOn = null;
      this.run().catch((err: unknown) => console.error("storage shard: quiet work failed (the next request or alarm does it):", err));
    }, QUIET_MS);
  }

  cancel(): void {
    if (this.handle !== null) this.armedOn?.clear(this.handle);
    this.handle = null;
    this.armedOn = null;
  }
}
