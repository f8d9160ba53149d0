import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import { BACKSTOP_MS, IDLE_MS } from "../../consumer-shard/round-schedule";
import { consumerShardFor, coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import {
  addConsumer,
  api,
  backlog,
  createQueue,
  eventually,
  fakeConsumer,
  producer,
  queuePath,
  storedMessages,
} from "./helpers";
import { sleep } from "../../src/kernel/sleep";

interface Stats {
  received: number;
  distinct: number;
  duplicates: number;
  byAttempts: Array<{ attempts: number; n: number }>;
}

const consumerStats = async (queue: string): Promise<Stats> =>
  (await env.EXAMPLE_CONSUMER.fetch(`http://consumer/stats?queue=${queue}`)).json();

/** Sends everything to one storage shard (the others drain), to make batch boundaries exact. */
async function singleShard(queue: string, queueId: string) {
  const map = (await coordinatorFor(env, queueId).shardMap())!;
  for (const s of map.shards.slice(1)) await coordinatorFor(env, queueId).setShardState(s.name, "draining");
}

describe("push delivery to a queue() handler", () => {
  it("delivers every message to the example consumer's queue() handler, in batches, each once", async () => {
    await createQueue("push-queue");
    await addConsumer("push-queue", { settings: { batch_size: 5, max_wait_time_ms: 100 } });
    const { messageIds: ids } = await producer("push-queue").sendBatch(
      Array.from({ length: 60 }, (_, i) => ({ body: { i } })),
    );
    const stats = await eventually(
      () => consumerStats("push-queue"),
      (s) => s.distinct === 60,
    );
    expect(stats.duplicates).toBe(0);
    expect(stats.byAttempts).toEqual([{ attempts: 1, n: 60 }]);
    await eventually(
      () => backlog("push-queue"),
      (n) => n === 0,
    );
    expect(ids).toHaveLength(60);
  });

  it("gives queue() the queue's backlog count and bytes in batch.metadata.metrics, over every shard", async () => {
    const q = await createQueue("push-metrics");
    const seen: MessageBatchMetrics[] = [];
    await fakeConsumer(q.queue_id, (batch) => {
      seen.push(batch.metadata.metrics);
      // Keep them all: every batch then sees the whole backlog.
      batch.retryAll({ delaySeconds: 60 });
    });
    // Spread over the shards (sends pick a shard at random), heartbeats in before delivery starts.
    for (let i = 0; i < 12; i++) await producer("push-metrics").send("0123456789", { contentType: "text" });
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    for (const s of map.shards) await runDurableObjectAlarm(storageShardFor(env, s.name));
    await addConsumer("push-metrics", { settings: { batch_size: 100, max_wait_time_ms: 0, max_retries: 5 } });
    await eventually(
      async () => seen.length,
      (n) => n > 0,
    );
    expect(seen[0]).toMatchObject({ backlogCount: 12, backlogBytes: 120 });
    expect(seen[0]!.oldestMessageTimestamp).toBeInstanceOf(Date);
  });

  it("keeps a wake-up that came during a round: the round's own later alarm does not replace it", async () => {
    const idle = consumerShardFor(env, "no-such-queue-wake", 0);
    await runInDurableObject(idle, async (obj: ConsumerShard, state) => {
      const now = Date.now();
      // wake() during the round: an alarm due sooner than the round's next, a minute out. (Not
      // due now: that one fires mid-test, after which workerd at times stores the next alarm a
      // millisecond later than asked, and the exact checks below failed one run in three.)
      await state.storage.setAlarm(now + 30_000);
      await obj.schedule(now + 60_000);
      expect(await state.storage.getAlarm()).toBe(now + 30_000);
      // Nothing pending (the usual end of a round): the round's own alarm is set, and a sooner one replaces a later one.
      await state.storage.deleteAlarm();
      await obj.schedule(now + 60_000);
      expect(await state.storage.getAlarm()).toBe(now + 60_000);
      // (Beyond TIMER_WAIT_MS: sooner, a round waits on a timer; the next test.)
      await obj.schedule(now + 10_000);
      expect(await state.storage.getAlarm()).toBe(now + 10_000);
      await state.storage.deleteAlarm();
    });
  });

  it("waits for a round due soon on a timer, not an alarm: one backstop alarm behind the timers, deleted once the shard stays idle", async () => {
    const shard = consumerShardFor(env, "no-such-queue-timer", 0);
    const timers: Array<{ fn: () => void; ms: number }> = [];
    const now = Date.now();
    await runInDurableObject(shard, async (obj: ConsumerShard, state) => {
      obj.timers = { set: (fn, ms) => timers.push({ fn, ms }), clear: () => {} };
      // A queue the Coordinator does not know: its round finds no plan and ends idle.
      await state.storage.put("queueId", "0".repeat(32));
      await obj.schedule(now + 1000);
      expect(timers.map((t) => t.ms)).toEqual([expect.any(Number)]);
      expect(timers[0]!.ms).toBeLessThanOrEqual(1000);
      expect(await state.storage.getAlarm()).toBe(now + 1000 + BACKSTOP_MS);
      // Another round due soon: a timer, and no alarm of its own (the backstop stays, sooner than its own would be).
      await obj.schedule(now + 500);
      expect(timers).toHaveLength(2);
      expect(await state.storage.getAlarm()).toBe(now + 1000 + BACKSTOP_MS);
    });
    await runInDurableObject(shard, () => timers[1]!.fn());
    // The round ends idle: the backstop goes once the shard stays idle IDLE_MS (at a trickle
    // the next wake-up comes sooner, and the backstop stays).
    const idle = await eventually(
      async () => timers.length,
      (n) => n === 3,
    );
    expect(timers[idle - 1]!.ms).toBe(IDLE_MS);
    expect(await runInDurableObject(shard, (_obj: ConsumerShard, state) => state.storage.getAlarm())).toBe(
      now + 1000 + BACKSTOP_MS,
    );
    await runInDurableObject(shard, () => timers[idle - 1]!.fn());
    await eventually(
      () => runInDurableObject(shard, (_obj: ConsumerShard, state) => state.storage.getAlarm()),
      (a) => a === null,
    );
  });

  it("delivers through the ShardqConsumer RPC entrypoint (the transport that deploys) the same way", async () => {
    await createQueue("push-rpc");
    await addConsumer("push-rpc", {
      script_name: "example-rpc",
      settings: { transport: "rpc", batch_size: 10, max_wait_time_ms: 100 },
    });
    await producer("push-rpc").sendBatch(Array.from({ length: 40 }, (_, i) => ({ body: { i } })));
    const stats = await eventually(
      () => consumerStats("push-rpc"),
      (s) => s.distinct === 40,
    );
    expect(stats.duplicates).toBe(0);
    await eventually(
      () => backlog("push-rpc"),
      (n) => n === 0,
    );
  });

  it("gives a handler that throws its messages again with rising attempts, then moves them to the dead-letter queue", async () => {
    await createQueue("push-throws");
    await createQueue("push-throws-dlq");
    await addConsumer("push-throws", {
      dead_letter_queue: "push-throws-dlq",
      settings: { max_retries: 2, retry_delay: 0, max_wait_time_ms: 0 },
    });
    const [bad] = (await producer("push-throws").sendBatch([{ body: { throw: true } }])).messageIds;
    const stats = await eventually(
      () => consumerStats("push-throws"),
      (s) => s.received === 3,
    );
    expect(stats.byAttempts).toEqual([1, 2, 3].map((attempts) => ({ attempts, n: 1 })));
    const dlq = await eventually(
      () => storedMessages("push-throws-dlq"),
      (s) => s.messages.length === 1,
    );
    expect(dlq.messages[0]!.id).toBe(bad);
    expect(new TextDecoder().decode(dlq.messages[0]!.body)).toBe('{"throw":true}');
    await eventually(
      () => backlog("push-throws"),
      (n) => n === 0,
    );
    await sleep(300);
    expect((await consumerStats("push-throws")).received).toBe(3);
  });

  it("deletes and counts a message out of retries when there is no dead-letter queue", async () => {
    const q = await createQueue("push-drop");
    await addConsumer("push-drop", { settings: { max_retries: 1, retry_delay: 0, max_wait_time_ms: 0 } });
    await producer("push-drop").send({ retry: true });
    await producer("push-drop").send({ fine: true });
    await eventually(
      () => backlog("push-drop"),
      (n) => n === 0,
    );
    const stats = await consumerStats("push-drop");
    expect(stats.received).toBe(3); // the retried message twice (max_retries 1), the fine one once
    const metrics = await api("GET", `${queuePath(q.queue_id)}/metrics`);
    expect(metrics.json.result.backlog_count).toBe(0);
  });

  it("honours batch_size exactly and the explicit per-message outcomes of a real handler", async () => {
    const q = await createQueue("push-batches");
    await singleShard("push-batches", q.queue_id);
    const deliveries = await fakeConsumer(q.queue_id, (batch) => {
      for (const m of batch.messages) {
        if ((m.body as { n: number }).n % 4 === 0 && m.attempts === 1) m.retry({ delaySeconds: 0 });
        else m.ack();
      }
    });
    await addConsumer("push-batches", { settings: { batch_size: 3, max_wait_time_ms: 0 } });
    await producer("push-batches").sendBatch(Array.from({ length: 9 }, (_, n) => ({ body: { n } })));
    await eventually(
      () => backlog("push-batches"),
      (n) => n === 0,
    );
    for (const d of deliveries) expect(d.ids.length).toBeLessThanOrEqual(3);
    const all = deliveries.flatMap((d) => d.ids.map((id, i) => [id, d.attempts[i]]));
    expect(all.filter(([, a]) => a === 1)).toHaveLength(9);
    expect(all.filter(([, a]) => a === 2)).toHaveLength(3); // n = 0, 4, 8 retried once
  });

  it("waits up to max_wait_time_ms for a batch to fill", async () => {
    const q = await createQueue("push-wait");
    await singleShard("push-wait", q.queue_id);
    const deliveries = await fakeConsumer(q.queue_id, () => {});
    await addConsumer("push-wait", { settings: { batch_size: 10, max_wait_time_ms: 1500 } });
    const sentAt = Date.now();
    await producer("push-wait").sendBatch([{ body: 1 }, { body: 2 }]);
    await sleep(700);
    await producer("push-wait").sendBatch([{ body: 3 }]);
    await eventually(
      async () => deliveries.length,
      (n) => n > 0,
      5000,
    );
    const waited = Date.now() - sentAt;
    expect(deliveries[0]!.ids).toHaveLength(3);
    expect(waited).toBeGreaterThanOrEqual(1400);
  });

  it("sends a waiting batch as soon as it fills, not when the wait is up", async () => {
    const q = await createQueue("push-fills");
    await singleShard("push-fills", q.queue_id);
    const deliveries = await fakeConsumer(q.queue_id, () => {});
    await addConsumer("push-fills", { settings: { batch_size: 10, max_wait_time_ms: 60_000 } });
    await producer("push-fills").sendBatch(Array.from({ length: 4 }, (_, i) => ({ body: i })));
    await sleep(500); // a consumer shard has leased, found 4 of 10 and gone to sleep until the wait is up
    expect(deliveries).toHaveLength(0);
    await producer("push-fills").sendBatch(Array.from({ length: 6 }, (_, i) => ({ body: 4 + i })));
    // Well inside the minute it would wait (the storage shard's own check is in leases.test.ts).
    await eventually(
      async () => deliveries.length,
      (n) => n > 0,
      10_000,
    );
    expect(deliveries[0]!.ids).toHaveLength(10);
  });

  // Waits out leases and their extensions in real time, which a loaded CI machine can take near the default timeout to do.
  it("extends the leases of a slow handler so no one else gets its batch, up to the maximum execution time", async () => {
    const q = await createQueue("push-slow");
    await singleShard("push-slow", q.queue_id);
    let slow = true;
    const deliveries = await fakeConsumer(
      q.queue_id,
      async () => {
        if (slow) await sleep(1500);
      },
      { shards: 2, leaseMs: 300, maxExecutionMs: 60_000 },
    );
    await addConsumer("push-slow", { settings: { max_wait_time_ms: 0 } });
    await producer("push-slow").send("take your time");
    await eventually(
      async () => deliveries.length,
      (n) => n === 1,
    );
    // The other consumer shard looks while the first is still working: the lease holds.
    await runInDurableObject(consumerShardFor(env, q.queue_id, 1), (obj: ConsumerShard) =>
      obj.deliverRound(q.queue_id),
    );
    await eventually(
      () => backlog("push-slow"),
      (n) => n === 0,
    );
    expect(deliveries).toHaveLength(1);

    // A handler hanging past the maximum execution time loses its lease: delivered again.
    const q2 = await createQueue("push-hang");
    await singleShard("push-hang", q2.queue_id);
    const hung = await fakeConsumer(
      q2.queue_id,
      async (batch) => {
        if (batch.messages[0]!.attempts === 1) await sleep(2500);
      },
      { shards: 2, leaseMs: 300, maxExecutionMs: 600 },
    );
    await addConsumer("push-hang", { settings: { max_wait_time_ms: 0 } });
    await producer("push-hang").send("hang");
    await eventually(
      async () => hung.length,
      (n) => n === 1,
    );
    await sleep(1000);
    await runInDurableObject(consumerShardFor(env, q2.queue_id, 1), (obj: ConsumerShard) =>
      obj.deliverRound(q2.queue_id),
    );
    expect(hung.map((d) => d.attempts[0])).toEqual([1, 2]);
    slow = false;
  }, 15_000);

  // Waits out a lease in real time, which a loaded CI machine can take near the default timeout to do.
  it("loses nothing when the consumer shard is reset mid-batch: the lease expires and the batch comes again", async () => {
    const q = await createQueue("push-abort");
    let first = true;
    const deliveries = await fakeConsumer(
      q.queue_id,
      async () => {
        if (first) {
          first = false;
          // The consumer shard dies while the handler runs; nothing was acked.
          await runInDurableObject(consumerShardFor(env, q.queue_id, 0), (_obj: ConsumerShard, state) =>
            state.abort("reset mid-batch"),
          ).catch(() => {});
          throw new Error("the shard running me is gone");
        }
      },
      { leaseMs: 500 },
    );
    await addConsumer("push-abort", { settings: { max_wait_time_ms: 0, max_retries: 5 } });
    const id = (await producer("push-abort").send("survive")).messageId;
    await eventually(
      () => backlog("push-abort"),
      (n) => n === 0,
      20_000,
    );
    expect(deliveries.map((d) => [d.ids[0], d.attempts[0]])).toEqual([[id, 1]]);
    // The restarted consumer shard has no stand-in handler: the example consumer got the second delivery.
    expect((await consumerStats("push-abort")).byAttempts).toEqual([{ attempts: 2, n: 1 }]);
  }, 15_000);

  it("stops on delivery_paused and resumes when it is cleared", async () => {
    await createQueue("push-paused", { delivery_paused: true });
    await addConsumer("push-paused", { settings: { max_wait_time_ms: 0 } });
    await producer("push-paused").sendBatch([{ body: 1 }, { body: 2 }]);
    await sleep(500);
    expect((await consumerStats("push-paused")).received).toBe(0);
    await api("PATCH", queuePath("push-paused"), { settings: { delivery_paused: false } });
    await eventually(
      () => consumerStats("push-paused"),
      (s) => s.distinct === 2,
    );
  });

  it("resumes at once even when a consumer shard last said it was running and its next round is far off", async () => {
    const q = await createQueue("push-resume");
    await addConsumer("push-resume", { settings: { max_wait_time_ms: 0 } });
    await api("PATCH", queuePath("push-resume"), { settings: { delivery_paused: true } });
    // Consumer shard 0 reported a round running a moment ago and set its next alarm a minute out:
    // heartbeats leave such a shard to its round, so only the resume itself can wake it.
    await consumerShardFor(env, q.queue_id, 0).wake(q.queue_id, 0);
    await runInDurableObject(consumerShardFor(env, q.queue_id, 0), (obj: ConsumerShard, state) =>
      state.storage.setAlarm(Date.now() + 60_000),
    );
    await coordinatorFor(env, q.queue_id).consumerReport({
      index: 0,
      running: true,
      delivered: 0,
      batches: 0,
      errors: 0,
    });
    await producer("push-resume").sendBatch([{ body: 1 }, { body: 2 }]);
    await api("PATCH", queuePath("push-resume"), { settings: { delivery_paused: false } });
    await eventually(
      () => consumerStats("push-resume"),
      (s) => s.distinct === 2,
      3000,
    );
  });

  it("reports a consumer shard delivering while its rounds deliver, and idle at once when a round finds nothing", async () => {
    const q = await createQueue("push-idle");
    await addConsumer("push-idle", { settings: { max_wait_time_ms: 0 } });
    await producer("push-idle").send("one");
    await eventually(
      () => consumerStats("push-idle"),
      (s) => s.distinct === 1,
    );
    // Its round delivered: it counts as delivering until its next report is due (~30 s), not per round.
    await eventually(
      () => coordinatorFor(env, q.queue_id).consumerShards(),
      (c) => c.shards.length > 0 && c.running === 1,
      5000,
    );
    // A round that finds nothing: stopped, said at once.
    await consumerShardFor(env, q.queue_id, 0).wake(q.queue_id, 0);
    await eventually(
      () => coordinatorFor(env, q.queue_id).consumerShards(),
      (c) => c.running === 0,
      5000,
    );
  });

  it("delivers a delayed message when its delay has passed, not before", async () => {
    await createQueue("push-delayed");
    await addConsumer("push-delayed", { settings: { max_wait_time_ms: 0 } });
    await producer("push-delayed").send("later", { delaySeconds: 1 });
    await sleep(600);
    expect((await consumerStats("push-delayed")).received).toBe(0);
    await eventually(
      () => consumerStats("push-delayed"),
      (s) => s.received === 1,
      5000,
    );
  });
});
