/**
 * A consumer shard's control traffic off the per-message path. It keeps its
 * delivery plan from round to round (a wake-up carrying another version, a refused lease
 * or a long refresh makes it ask again), reports at most every REPORT_EVERY_MS while it
 * delivers, and is woken by the storage shard it leased from, not through the Coordinator.
 * The requests of its rounds: consumer-rounds.test.ts; batches pushed to it:
 * consumer-pushed-batches.test.ts.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, onTestFinished } from "vitest";
import { Coordinator } from "../../coordinator/coordinator";
import { StorageShard } from "../../storage-shard/storage-shard";
import type { LeaseRequest } from "../../src/kernel/protocol";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import { coordinatorFor } from "../../src/kernel/addressing";
import { addConsumer, api, createQueue, eventually, fakeConsumer, producer, queuePath } from "./helpers";
import { sleep } from "../../src/kernel/sleep";
import { noPushes, oneShardQueue, storageShardStats } from "./consumer-shard-helpers";

describe("a consumer shard's plan and reports", () => {
  it("delivers 20 batches on the plan it asked for once, and reports them once, not every round", async () => {
    const { q, fetches, deliveries, delivered } = await oneShardQueue("plan-kept", {
      batch_size: 5,
      max_wait_time_ms: 0,
    });
    await producer("plan-kept").sendBatch(Array.from({ length: 100 }, (_, i) => ({ body: i })));
    await eventually(
      async () => delivered(),
      (n) => n === 100,
    );
    expect(deliveries.length).toBe(20);
    const reported = await eventually(
      () => coordinatorFor(env, q.queue_id).consumerShards(),
      (c) => c.shards.some((s) => s.index === 0 && s.delivered > 0),
    );
    // More rounds: each a wake-up from the storage shard, none asks for the plan, none reports (within REPORT_EVERY_MS).
    for (let round = 0; round < 3; round++) {
      await producer("plan-kept").sendBatch(Array.from({ length: 5 }, (_, i) => ({ body: i })));
      await eventually(
        async () => delivered(),
        (n) => n === 105 + 5 * round,
      );
    }
    expect(await fetches()).toBe(1);
    const later = await coordinatorFor(env, q.queue_id).consumerShards();
    expect(later.shards.find((s) => s.index === 0)!.delivered).toBe(
      reported.shards.find((s) => s.index === 0)!.delivered,
    );
  });

  it("hears of a plan change while it runs: a new batch size is used from the next batch, a pause stops it", async () => {
    const { q, consumer, fetches, deliveries, delivered } = await oneShardQueue("plan-changed", {
      batch_size: 5,
      max_wait_time_ms: 0,
    });
    // Any other change of the shard map while the test runs (the Coordinator's loop) is a new plan,
    // which the consumer shard rightly fetches too.
    const mapVersion = async () => (await coordinatorFor(env, q.queue_id).shardMap())!.version;
    const v0 = await mapVersion();
    await producer("plan-changed").sendBatch(Array.from({ length: 10 }, (_, i) => ({ body: i })));
    await eventually(
      async () => delivered(),
      (n) => n === 10,
    );
    expect(deliveries.every((d) => d.ids.length === 5)).toBe(true);
    const res = await api("PATCH", `${queuePath("plan-changed")}/consumers/${consumer.consumer_id}`, {
      settings: { batch_size: 2 },
    });
    expect(res.status).toBe(200);
    await producer("plan-changed").sendBatch(Array.from({ length: 6 }, (_, i) => ({ body: i })));
    await eventually(
      async () => delivered(),
      (n) => n === 16,
    );
    expect(deliveries.slice(2).map((d) => d.ids.length)).toEqual([2, 2, 2]);
    // One fetch for the new batch size, none per batch.
    const maps = (await mapVersion()) - v0;
    expect(await fetches()).toBeGreaterThanOrEqual(2);
    expect(await fetches()).toBeLessThanOrEqual(2 + maps);
    const beforePause = await fetches();
    // Paused: the shard is told, and what arrives next waits.
    expect((await api("PATCH", queuePath("plan-changed"), { settings: { delivery_paused: true } })).status).toBe(200);
    await eventually(fetches, (n) => n >= beforePause + 1);
    await producer("plan-changed").send("held");
    await sleep(500);
    expect(delivered()).toBe(16);
    expect((await api("PATCH", queuePath("plan-changed"), { settings: { delivery_paused: false } })).status).toBe(200);
    await eventually(
      async () => delivered(),
      (n) => n === 17,
    );
    expect(q.queue_id).toBeTruthy();
  });

  it("asks for the plan again when a storage shard refuses its lease (retired or unknown: its plan is older than the map)", async () => {
    const { shard, fetches, delivered, active } = await oneShardQueue("plan-refused", {
      batch_size: 5,
      max_wait_time_ms: 0,
    });
    await noPushes(active);
    await producer("plan-refused").send(1);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    expect(await fetches()).toBe(1);
    // A shard the plan kept names and that is no shard of the queue, heavy enough to be picked first.
    await runInDurableObject(shard, (obj: ConsumerShard) => {
      const plan = (obj as unknown as { plan: { shards: Array<Record<string, unknown>> } }).plan;
      plan.shards.unshift({
        name: "plan-refused-no-such-shard",
        region: "local",
        state: "active",
        backlog: {
          shard: "plan-refused-no-such-shard",
          count: 1e9,
          bytes: 0,
          oldestAt: null,
          at: Date.now() + 3_600_000,
        },
      });
    });
    await producer("plan-refused").send(2);
    await eventually(
      async () => delivered(),
      (n) => n === 2,
    );
    await producer("plan-refused").send(3);
    await eventually(
      async () => delivered(),
      (n) => n === 3,
    );
    expect(await fetches()).toBe(2);
  });

  it("is woken by the storage shard it found empty when new messages arrive there, without the Coordinator", async () => {
    const { delivered } = await oneShardQueue("plan-direct-wake", { batch_size: 5, max_wait_time_ms: 0 });
    await producer("plan-direct-wake").send(1);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    const told: string[] = [];
    // RPC reaches class methods only: listen on the prototype for this test.
    const original = Coordinator.prototype.notifyReady;
    Coordinator.prototype.notifyReady = async (name: string) => (told.push(name), false);
    onTestFinished(() => {
      Coordinator.prototype.notifyReady = original;
    });
    await producer("plan-direct-wake").send(2);
    await eventually(
      async () => delivered(),
      (n) => n === 2,
    );
    expect(told).toEqual([]);
  });

  it("visits only the storage shards it has word of messages on: one its own lease found empty is passed over until it names itself", async () => {
    const q = await createQueue("plan-visits");
    const deliveries = await fakeConsumer(q.queue_id, () => {});
    await addConsumer("plan-visits", { settings: { batch_size: 5, max_wait_time_ms: 0 } });
    const delivered = () => deliveries.reduce((n, d) => n + d.ids.length, 0);
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards.map((s) => s.name);
    expect(shards.length).toBeGreaterThan(2);
    await noPushes(...shards);
    await producer("plan-visits").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    // Its first round visited every shard (a sweep): each lease found its shard empty at last.
    const leased: string[] = [];
    const original = StorageShard.prototype.lease;
    StorageShard.prototype.lease = function (this: StorageShard, req: LeaseRequest) {
      // Other tests' consumer shards may still be at work: only this queue's shards count.
      if (
        shards.includes(
          req.queueId === q.queue_id
            ? ((this as unknown as { identity: { name: string } | null }).identity?.name ?? "")
            : "",
        )
      )
        leased.push((this as unknown as { identity: { name: string } }).identity.name);
      return original.call(this, req);
    };
    onTestFinished(() => {
      StorageShard.prototype.lease = original;
    });
    await producer("plan-visits").send(1);
    await eventually(
      async () => delivered(),
      (n) => n === 2,
    );
    await sleep(200);
    const visited = new Set(leased);
    // The shard the message went to, leased until found empty again; no other.
    expect(visited.size).toBe(1);
    const [one] = [...visited];
    expect((await storageShardStats(one!)).totals.leased).toBeGreaterThan(0);
  });
});
