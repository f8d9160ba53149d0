/**
 * A consumer shard's control traffic off the per-message path. It keeps its
 * delivery plan from round to round (a wake-up carrying another version, a refused lease
 * or a long refresh makes it ask again), reports at most every REPORT_EVERY_MS while it
 * delivers, and is woken by the storage shard it leased from, not through the Coordinator.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, onTestFinished } from "vitest";
import { Coordinator } from "../../coordinator/coordinator";
import { StorageShard } from "../../storage-shard/storage-shard";
import type { BatchPushDeps } from "../../storage-shard/batch-push";
import type { LeaseRequest } from "../../src/kernel/protocol";
import { ConsumerShard as ConsumerShardClass } from "../../consumer-shard/consumer-shard";
type ConsumerShard = ConsumerShardClass;
import { consumerShardFor, coordinatorFor } from "../../src/kernel/addressing";
import { addConsumer, api, createQueue, eventually, fakeConsumer, producer, queuePath } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

/** A queue that takes sends on one storage shard (the others drain), with a stand-in handler that acks. */
async function oneShardQueue(name: string, settings: Record<string, unknown>) {
  const q = await createQueue(name);
  const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
  for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
  const deliveries = await fakeConsumer(q.queue_id, () => {});
  const consumer = await addConsumer(name, { settings });
  const shard = consumerShardFor(env, q.queue_id, 0);
  const fetches = () => runInDurableObject(shard, (obj: ConsumerShard) => obj.planFetches);
  const delivered = () => deliveries.reduce((n, d) => n + d.ids.length, 0);
  return { q, consumer, shard, deliveries, fetches, delivered, active: map.shards[0]!.name };
}

/** A storage shard that wakes its consumer shard for its own round instead of pushing batches to it: the tests of rounds. */
async function noPushes(...names: string[]) {
  for (const name of names)
    await runInDurableObject(env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name)), (obj: StorageShard) => {
      obj.pushBatches = false;
    });
}

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
    // The drained shards retire when the Coordinator's loop next runs, each a new map: on a slow
    // machine that falls inside this test, and the consumer shard rightly fetches that plan too.
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

async function storageShardStats(name: string) {
  return env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name)).stats();
}

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
