/**
 * Whether a consumer shard asks the storage shards to push it their batches
 * (storage-shard/batch-push.ts) or leaves the batches to its own rounds. A storage shard pushes
 * a partial batch once its oldest message has waited max_wait_time_ms; a round gathers the
 * partial batches of several shards into one as soon as together they fill it (gather.ts). So:
 * pushes while the batches come from one storage shard (a stream kept on its shard,
 * src/routing/sticky-placement.ts) or would not fill within max_wait_time_ms even together (a
 * trickle); rounds while traffic spread over several shards fills batches, where each shard's
 * pushed remainder waited out the whole max_wait_time_ms.
 */

/** How far back deliveries count: which shards batches came from, and how many messages. */
export const SPREAD_WINDOW_MS = 5000;

export class PushChoice {
  /** When a batch last came from each storage shard. */
  private readonly lastFrom = new Map<string, number>();
  /** Messages delivered, by when, within the window, and their sum. */
  private readonly recent: Array<{ at: number; count: number }> = [];
  private messages = 0;

  /** A batch (or its part) from `shard` was handed to the consumer. */
  delivered(shard: string, count: number, now: number): void {
    this.lastFrom.set(shard, now);
    this.recent.push({ at: now, count });
    this.messages += count;
    this.forget(now);
  }

  /** Whether storage shards should push batches of `batchSize` that wait at most `maxWaitMs`. */
  wanted(now: number, batchSize: number, maxWaitMs: number): boolean {
    this.forget(now);
    if (this.lastFrom.size <= 1) return true;
    // Messages a max_wait_time_ms brings across the shards, at the window's rate.
    return (this.messages * maxWaitMs) / SPREAD_WINDOW_MS < batchSize;
  }

  private forget(now: number): void {
    for (const [shard, at] of this.lastFrom) if (now - at >= SPREAD_WINDOW_MS) this.lastFrom.delete(shard);
    while (this.recent.length > 0 && now - this.recent[0]!.at >= SPREAD_WINDOW_MS)
      this.messages -= this.recent.shift()!.count;
  }
}
