/**
 * A consumer shard's rounds, the requests each costs per batch: a lone message leased once,
 * the settle saying its storage shard is left empty; a wake-up when the batch is due, not at
 * once; at once when an arrival fills the batch.
 */
import { describe, expect, it, onTestFinished } from "vitest";
import { ConsumerShard as ConsumerShardClass } from "../../consumer-shard/consumer-shard";
type ConsumerShard = ConsumerShardClass;
import type { LeaseRequest } from "../../src/kernel/protocol";
import { sleep } from "../../src/kernel/sleep";
import { StorageShard } from "../../storage-shard/storage-shard";
import { eventually, producer } from "./helpers";
import { noPushes, oneShardQueue } from "./consumer-shard-helpers";

describe("a consumer round's requests per batch", () => {
  /** Counts the leases of one storage shard from now on. */
  function countLeases(shardName: string): () => number {
    let n = 0;
    const original = StorageShard.prototype.lease;
    StorageShard.prototype.lease = function (this: StorageShard, req: LeaseRequest) {
      if ((this as unknown as { identity: { name: string } | null }).identity?.name === shardName) n++;
      return original.call(this, req);
    };
    onTestFinished(() => {
      StorageShard.prototype.lease = original;
    });
    return () => n;
  }

  it("leases a lone message once: the settle says the shard is left empty, so no lease goes to find out", async () => {
    const { active, delivered } = await oneShardQueue("round-settle-empty", { batch_size: 5, max_wait_time_ms: 0 });
    await noPushes(active);
    await producer("round-settle-empty").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    await sleep(100);
    const leases = countLeases(active);
    for (let i = 1; i <= 3; i++) {
      await producer("round-settle-empty").send(i);
      await eventually(
        async () => delivered(),
        (n) => n === 1 + i,
      );
      await sleep(100);
    }
    // And the shard, left empty by each settle, still wakes the consumer at the next arrival.
    expect(leases()).toBe(3);
  });

  it("is woken for when a lone message's batch is due, not at once, and delivers it then", async () => {
    const { q, delivered, deliveries, active } = await oneShardQueue("round-due-wake", {
      batch_size: 5,
      max_wait_time_ms: 400,
    });
    await noPushes(active);
    await producer("round-due-wake").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    await sleep(100);
    // The storage shard's wake-ups of this queue's consumer shard, with the time each asks for.
    const wakes: Array<number | undefined> = [];
    const original = ConsumerShardClass.prototype.wake;
    ConsumerShardClass.prototype.wake = function (
      this: ConsumerShard,
      queueId: string,
      index: number,
      planVersion?: string,
      shard?: string,
      dueAt?: number,
    ) {
      // A storage shard's wake-up names itself (the Coordinator's does not).
      if (shard !== undefined && queueId === q.queue_id) wakes.push(dueAt);
      return original.call(this, queueId, index, planVersion, shard, dueAt);
    };
    onTestFinished(() => {
      ConsumerShardClass.prototype.wake = original;
    });
    const sentAt = Date.now();
    await producer("round-due-wake").send(1);
    await eventually(
      async () => delivered(),
      (n) => n === 2,
    );
    const took = Date.now() - sentAt;
    expect(wakes).toHaveLength(1);
    expect(wakes[0]).toBeGreaterThanOrEqual(sentAt + 400);
    expect(wakes[0]).toBeLessThanOrEqual(sentAt + took);
    // It waited for its batch to fill, as the consumer asked.
    expect(took).toBeGreaterThanOrEqual(350);
    expect(deliveries.at(-1)!.ids).toHaveLength(1);
  });

  it("is woken at once by the arrival that fills the batch it was woken for later", async () => {
    const { delivered, deliveries } = await oneShardQueue("round-due-filled", {
      batch_size: 3,
      max_wait_time_ms: 30_000,
    });
    await producer("round-due-filled").sendBatch([{ body: 0 }, { body: 1 }, { body: 2 }]);
    await eventually(
      async () => delivered(),
      (n) => n === 3,
    );
    await sleep(100);
    const sentAt = Date.now();
    for (let i = 0; i < 3; i++) await producer("round-due-filled").send(i);
    await eventually(
      async () => delivered(),
      (n) => n === 6,
    );
    expect(Date.now() - sentAt).toBeLessThan(10_000);
    expect(deliveries.at(-1)!.ids).toHaveLength(3);
  });
});
