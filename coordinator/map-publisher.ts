/**
 * Writes a queue's shard map to Workers KV under the queue's id and name, where
 * brokers read it. KV takes at most one write a second per key: a change inside that
 * window is deferred to the Coordinator's alarm, never lost.
 */
import { shardMapKeys } from "../src/kernel/addressing";
import type { QueueRecord, QueueStore } from "./queue-store";

/** Workers KV accepts at most one write per second to a key. */
const KV_MIN_WRITE_INTERVAL_MS = 1000;
const PUBLISH_RETRY_MS = 5000;

/** Sets the object's alarm to `at` unless it is already due sooner. */
export async function armAlarm(storage: DurableObjectStorage, at: number): Promise<void> {
  const current = await storage.getAlarm();
  if (current === null || at < current) await storage.setAlarm(at);
}

export class MapPublisher {
  private publishing = false;
  /** The fault harness's stale map: KV keeps the old one until then (as KV's own delay could). */
  private holdUntil = 0;

  constructor(
    private readonly store: QueueStore,
    private readonly storage: DurableObjectStorage,
    private readonly kv: KVNamespace,
    private readonly now: () => number,
  ) {}

  /** Keeps the published map as it is for `ms`. */
  hold(ms: number): void {
    this.holdUntil = this.now() + ms;
  }

  /** Until when the published map is held, or null when it is not. */
  heldUntil(): number | null {
    return this.holdUntil > this.now() ? this.holdUntil : null;
  }

  /** Writes the current map unless KV has it already. */
  async publish(): Promise<void> {
    const queue = this.store.readyQueue();
    if (!queue || queue.published_version >= queue.map_version) return;
    const now = this.now();
    if (now < this.holdUntil) return void (await armAlarm(this.storage, this.holdUntil));
    const earliest = queue.published_at + KV_MIN_WRITE_INTERVAL_MS;
    // A write already on its way to KV counts as the one write of this second.
    if (this.publishing || now < earliest) {
      await armAlarm(this.storage, Math.max(earliest, now + (this.publishing ? KV_MIN_WRITE_INTERVAL_MS : 0)));
      return;
    }
    this.publishing = true;
    const map = this.store.shardMap(now)!;
    const value = JSON.stringify(map);
    try {
      await Promise.all(this.keys(queue).map((k) => this.kv.put(k, value)));
    } catch (err) {
      console.error(`shard map publish failed for queue ${queue.queue_id}, retrying: ${(err as Error).message}`);
      await armAlarm(this.storage, now + PUBLISH_RETRY_MS);
      return;
    } finally {
      this.publishing = false;
    }
    // Another change may have landed while we awaited KV: only mark what we wrote.
    this.store.markPublished(map.version, now);
    const after = this.store.queue(); // null if the queue was deleted meanwhile
    if (after && after.map_version > map.version) await armAlarm(this.storage, now + KV_MIN_WRITE_INTERVAL_MS);
  }

  /** Deletes the published maps of a queue being deleted. */
  async unpublish(queue: QueueRecord): Promise<void> {
    await Promise.all(this.keys(queue).map((k) => this.kv.delete(k)));
  }

  private keys(queue: QueueRecord): string[] {
    return shardMapKeys(queue.account_id, queue.queue_id, queue.queue_name);
  }
}
