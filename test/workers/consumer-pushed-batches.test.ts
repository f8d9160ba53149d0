/**
 * Batches a storage shard pushes to its consumer shard with the wake-up: a lone message's batch
 * sent when due and settled from the reply, no lease nor settle; reports while batches come
 * pushed; no more pushes asked for when several shards' batches would fill sooner, nor for what
 * arrived while a pushed batch was out; the consumer's settings as they are now; a retry settled.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, onTestFinished } from "vitest";
import { Coordinator } from "../../coordinator/coordinator";
import { StorageShard } from "../../storage-shard/storage-shard";
import type { BatchPushDeps } from "../../storage-shard/batch-push";
import { ConsumerShard as ConsumerShardClass } from "../../consumer-shard/consumer-shard";
type ConsumerShard = ConsumerShardClass;
import { coordinatorFor } from "../../src/kernel/addressing";
import { sleep } from "../../src/kernel/sleep";
import { addConsumer, api, createQueue, eventually, fakeConsumer, producer, queuePath } from "./helpers";
import { oneShardQueue, storageShardStats } from "./consumer-shard-helpers";

describe("batches a storage shard pushes to its consumer shard", () => {
  /**
   * Counts one storage shard's lease and settle calls, and this queue's pushes and storage-shard
   * wake-ups, from now on. The Coordinator's wake-ups of this queue's consumer shards (the drained
   * shards retiring change the plan, at a time of their own) are dropped: each would be a round.
   * The shard's pushed batches lease and settle through the same methods, called by the shard
   * itself (storage-shard.ts `pushes`): those are not the calls counted.
   */
  async function watch(queueId: string, shardName: string) {
    const seen = { leases: 0, settles: 0, wakes: 0, pushes: [] as number[] };
    let pushing = false;
    await runInDurableObject(env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(shardName)), (shard: StorageShard) => {
      const deps = (shard.pushes as unknown as { deps: BatchPushDeps }).deps;
      const { lease, settle } = deps;
      const itself = <T>(call: () => T): T => {
        pushing = true;
        try {
          return call();
        } finally {
          pushing = false;
        }
      };
      deps.lease = (t) => itself(() => lease(t));
      deps.settle = (t, req, pushes) => itself(() => settle(t, req, pushes));
    });
    const lease = StorageShard.prototype.lease;
    const settle = StorageShard.prototype.settle;
    const wake = ConsumerShardClass.prototype.wake;
    const takePushed = ConsumerShardClass.prototype.takePushed;
    const mine = (o: StorageShard) =>
      (o as unknown as { identity: { name: string } | null }).identity?.name === shardName;
    StorageShard.prototype.lease = function (this: StorageShard, req) {
      if (mine(this) && !pushing) seen.leases++;
      return lease.call(this, req);
    };
    StorageShard.prototype.settle = function (this: StorageShard, req) {
      if (mine(this) && !pushing) seen.settles++;
      return settle.call(this, req);
    };
    ConsumerShardClass.prototype.wake = function (
      this: ConsumerShard,
      q: string,
      index: number,
      version?: string,
      shard?: string,
      dueAt?: number,
    ) {
      if (q === queueId && shard === undefined) return Promise.resolve();
      if (q === queueId) seen.wakes++;
      return wake.call(this, q, index, version, shard, dueAt);
    };
    ConsumerShardClass.prototype.takePushed = function (this: ConsumerShard, q, index, shard, messages, figures) {
      if (q === queueId) seen.pushes.push(Date.now());
      return takePushed.call(this, q, index, shard, messages, figures);
    };
    onTestFinished(() => {
      StorageShard.prototype.lease = lease;
      StorageShard.prototype.settle = settle;
      ConsumerShardClass.prototype.wake = wake;
      ConsumerShardClass.prototype.takePushed = takePushed;
    });
    return seen;
  }

  it("sends a lone message's batch with the wake-up when it is due, its outcome settled from the reply: no lease, no settle", async () => {
    const { q, active, delivered, deliveries } = await oneShardQueue("push-lone", {
      batch_size: 5,
      max_wait_time_ms: 300,
    });
    await producer("push-lone").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    await sleep(100);
    const seen = await watch(q.queue_id, active);
    for (let i = 1; i <= 3; i++) {
      const sentAt = Date.now();
      await producer("push-lone").send(i);
      await eventually(
        async () => delivered(),
        (n) => n === 1 + i,
      );
      // When its batch was due (it waited max_wait_time_ms to fill), not at once.
      expect(seen.pushes.at(-1)!).toBeGreaterThanOrEqual(sentAt + 300);
      await sleep(100);
    }
    expect(seen).toMatchObject({ leases: 0, settles: 0, wakes: 0 });
    expect(seen.pushes).toHaveLength(3);
    expect(deliveries.slice(1).map((d) => d.ids.length)).toEqual([1, 1, 1]);
    // Acked, and the ack applied at the storage shard.
    expect(
      await eventually(
        () => storageShardStats(active),
        (s) => s.backlogCount === 0,
      ),
    ).toMatchObject({ backlogCount: 0 });
  });

  it("counts as delivering while batches come pushed: the backstop's round, which finds nothing to lease, reports no stop", async () => {
    const { q, shard, delivered } = await oneShardQueue("push-running", { batch_size: 5, max_wait_time_ms: 100 });
    // The first message goes by a round (the storage shard knows no consumer shard yet), which reports.
    await producer("push-running").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    await runDurableObjectAlarm(shard);
    // That round's report a minute old: a push may report again, never that it stopped.
    await runInDurableObject(
      shard,
      (obj: ConsumerShard) =>
        void ((obj as unknown as { reports: { last: { at: number } } }).reports.last.at -= 60_000),
    );
    const reports: boolean[] = [];
    const consumerReport = Coordinator.prototype.consumerReport;
    Coordinator.prototype.consumerReport = function (this: Coordinator, r) {
      reports.push(r.running);
      return consumerReport.call(this, r);
    };
    onTestFinished(() => void (Coordinator.prototype.consumerReport = consumerReport));
    for (let i = 1; i <= 3; i++) {
      await producer("push-running").send(i);
      await eventually(
        async () => delivered(),
        (n) => n === i + 1,
      );
      // Pushed 6 s ago, as at a message a second under Cloudflare's defaults (batches fill for 5 s): longer than an interval.
      await runInDurableObject(
        shard,
        (obj: ConsumerShard) => void ((obj as unknown as { lastPushedAt: number }).lastPushedAt -= 6_000),
      );
      // The backstop alarm behind the pushes: its round leases nothing, the batches having come pushed.
      expect(await runDurableObjectAlarm(shard)).toBe(true);
      // And a round right after it, which delivers nothing either (a wake-up naming no shard).
      await shard.wake(q.queue_id, 0);
    }
    // Delivering all along: none said it stopped (at most one that it delivers again).
    expect(reports.filter((running) => !running)).toEqual([]);
    expect(reports.length).toBeLessThanOrEqual(1);
  });

  it("asks for no more pushes while batches from several shards would fill within max_wait_time_ms: the storage shard wakes it for its round instead", async () => {
    const { q, shard, active, delivered } = await oneShardQueue("push-spread", {
      batch_size: 5,
      max_wait_time_ms: 300,
    });
    await producer("push-spread").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    await sleep(100);
    const seen = await watch(q.queue_id, active);
    // As if batches had just come from two other shards, 50 messages each: 20 a second over the
    // window fill a batch of 5 within 300 ms, where a pushed remainder would wait them out.
    await runInDurableObject(shard, (obj: ConsumerShard) => {
      const choice = (obj as unknown as { pushChoice: { delivered(s: string, n: number, at: number): void } })
        .pushChoice;
      choice.delivered("elsewhere-1", 50, Date.now());
      choice.delivered("elsewhere-2", 50, Date.now());
    });
    await producer("push-spread").send(1);
    await eventually(
      async () => delivered(),
      (n) => n === 2,
    );
    await sleep(100);
    // That batch came pushed, its reply saying no more; the next goes by the consumer shard's round.
    expect(seen.pushes).toHaveLength(1);
    await producer("push-spread").send(2);
    await eventually(
      async () => delivered(),
      (n) => n === 3,
    );
    expect(seen.pushes).toHaveLength(1);
    expect(seen.wakes).toBeGreaterThanOrEqual(1);
    expect(seen.leases).toBeGreaterThanOrEqual(1);
  });

  it("pushes by the consumer's settings as they are now: a lowered batch size is never exceeded, and the next batches go by it", async () => {
    const { q, consumer, shard, active, deliveries, delivered } = await oneShardQueue("push-settings", {
      batch_size: 5,
      max_wait_time_ms: 300,
    });
    await producer("push-settings").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    await sleep(100);
    const seen = await watch(q.queue_id, active);
    await producer("push-settings").send(1);
    await eventually(
      async () => delivered(),
      (n) => n === 2,
    );
    expect(seen.pushes).toHaveLength(1);
    // Lowered while the storage shard pushes by the old settings (5 within 300 ms).
    expect(
      (
        await api("PATCH", `${queuePath("push-settings")}/consumers/${consumer.consumer_id}`, {
          settings: { batch_size: 2, max_wait_time_ms: 100 },
        })
      ).status,
    ).toBe(200);
    // The Coordinator's wake-up with the new plan is dropped here (watch): its kept plan is made stale instead.
    await runInDurableObject(
      shard,
      (obj: ConsumerShard) => void ((obj as unknown as { planAt: number }).planAt = -Infinity),
    );
    await producer("push-settings").sendBatch([{ body: 2 }, { body: 3 }, { body: 4 }]);
    await eventually(
      async () => delivered(),
      (n) => n === 5,
    );
    for (let i = 5; i < 8; i++) {
      await producer("push-settings").send(i);
      await eventually(
        async () => delivered(),
        (n) => n === i + 1,
      );
      await sleep(50);
    }
    expect(Math.max(...deliveries.slice(2).map((d) => d.ids.length))).toBeLessThanOrEqual(2);
    // The lone sends after it came pushed again, each due by the new max_wait_time_ms.
    expect(seen.pushes.length).toBeGreaterThanOrEqual(4);
  });

  it("leaves a batch's worth that arrived while a pushed batch was out to the consumer shard's own round", async () => {
    let slow = false;
    const q = await createQueue("push-backlog");
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    const deliveries = await fakeConsumer(q.queue_id, async () => {
      if (slow) await sleep(400);
    });
    await addConsumer("push-backlog", { settings: { batch_size: 5, max_wait_time_ms: 200 } });
    const delivered = () => deliveries.reduce((n, d) => n + d.ids.length, 0);
    await producer("push-backlog").send(0);
    await eventually(
      async () => delivered(),
      (n) => n === 1,
    );
    await sleep(100);
    const seen = await watch(q.queue_id, map.shards[0]!.name);
    slow = true;
    await producer("push-backlog").send(1);
    await eventually(
      async () => deliveries.length,
      (n) => n === 2,
    );
    await producer("push-backlog").sendBatch(Array.from({ length: 7 }, (_, i) => ({ body: i })));
    await eventually(
      async () => delivered(),
      (n) => n === 9,
    );
    expect(seen.pushes).toHaveLength(1);
    // Woken by the storage shard, naming itself, for its own round, which leased them.
    expect(seen.wakes).toBeGreaterThanOrEqual(1);
    expect(seen.leases).toBeGreaterThanOrEqual(1);
    expect(deliveries.slice(2).map((d) => d.ids.length)).toEqual([5, 2]);
  });

  it("settles a pushed batch's retry at the storage shard: the message comes again, attempts counted, until acked", async () => {
    const q = await createQueue("push-retry");
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    let calls = 0;
    const deliveries = await fakeConsumer(q.queue_id, (batch) => {
      // The first delivery of each message after the first is retried once.
      for (const m of batch.messages) if (m.body !== 0 && m.attempts === 1 && calls++ >= 0) m.retry();
    });
    await addConsumer("push-retry", { settings: { batch_size: 5, max_wait_time_ms: 200, retry_delay: 0 } });
    await producer("push-retry").send(0);
    await eventually(
      async () => deliveries.length,
      (n) => n === 1,
    );
    await sleep(100);
    const seen = await watch(q.queue_id, map.shards[0]!.name);
    await producer("push-retry").send(1);
    await eventually(
      async () => deliveries.length,
      (n) => n === 3,
    );
    expect(deliveries.slice(1).map((d) => d.attempts)).toEqual([[1], [2]]);
    expect(seen.leases + seen.settles).toBeLessThanOrEqual(1);
    expect(
      await eventually(
        () => storageShardStats(map.shards[0]!.name),
        (s) => s.backlogCount === 0,
      ),
    ).toMatchObject({ backlogCount: 0 });
  });
});
