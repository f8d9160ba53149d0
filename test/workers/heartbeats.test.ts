import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/clock";
import { coordinatorFor } from "../../src/addressing";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { api, createQueue, producer, queuePath } from "./helpers";

/**
 * Fake time far ahead of real time: alarms the shard sets for fake times then lie in
 * the real future and wait for runDurableObjectAlarm instead of firing on their own.
 */
const FUTURE = Date.now() + 100_000_000_000;

describe("storage shard heartbeats", () => {
  it("report backlog and arrival rate to the Coordinator while busy, then stop when idle", async () => {
    const q = await createQueue("beats");
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    const name = map.shards[0]!.name;
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name));
    const clock = new ManualClock(FUTURE);
    await runInDurableObject(shard, (obj: StorageShard) => {
      obj.clock = clock;
    });

    // Only this shard takes sends: the others drain.
    for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    // 20 JSON strings of 0 to 9 characters: 90 characters and 40 quotes.
    await producer("beats").sendBatch(Array.from({ length: 20 }, (_, i) => ({ body: "0123456789".slice(0, i % 10) })));
    clock.advance(4000);

    expect(await runDurableObjectAlarm(shard)).toBe(true);
    const beats = await coordinatorFor(env, q.queue_id).heartbeats();
    expect(beats).toEqual([expect.objectContaining({ name, backlog_count: 20, backlog_bytes: 130, messages_in: 20, period_ms: 4000 })]);

    const metrics = await api("GET", `${queuePath("beats")}/metrics`);
    const mine = metrics.json.result.shards.find((s: { name: string }) => s.name === name);
    expect(mine.heartbeat).toEqual({ received_at_ms: expect.any(Number), messages_in_per_second: 5 });

    // Busy in the last period: re-armed. The next report finds no arrivals and is the last;
    // what remains armed is the retention deadline of the oldest message (4 days by default).
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect((await coordinatorFor(env, q.queue_id).heartbeats())[0]!.messages_in).toBe(0);
    await runInDurableObject(shard, async (_obj: StorageShard, state) => {
      expect(await state.storage.getAlarm()).toBe(FUTURE + 345_600_000);
    });
  });

  it("are dropped by a Coordinator that does not know the shard", async () => {
    const q = await createQueue("beats-unknown");
    const res = await coordinatorFor(env, q.queue_id).heartbeat({
      shard: "someone-else", backlogCount: 1, backlogBytes: 1, oldestEnqueuedAt: 1, messagesIn: 1, periodMs: 1, sentAt: 1,
      totals: { leased: 0, acked: 0, retried: 0, deadLettered: 0, dropped: 0, expired: 0, quarantined: 0 },
    });
    expect(res).toEqual({ known: false, retentionMs: null });
    expect(await coordinatorFor(env, q.queue_id).heartbeats()).toEqual([]);
  });

  it("expire messages no consumer reads once they pass the queue's retention, then stop", async () => {
    const q = await createQueue("beats-retention", { message_retention_period: 60 });
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(map.shards[0]!.name));
    const clock = new ManualClock(FUTURE);
    await runInDurableObject(shard, (obj: StorageShard) => {
      obj.clock = clock;
    });
    await producer("beats-retention").sendBatch([{ body: 1 }, { body: 2 }]);
    expect(await runDurableObjectAlarm(shard)).toBe(true); // busy: reports, re-arms
    expect(await runDurableObjectAlarm(shard)).toBe(true); // idle: reports, arms for the retention deadline
    expect((await shard.stats()).backlogCount).toBe(2);
    clock.advance(60_001);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    const stats = await shard.stats();
    expect(stats.backlogCount).toBe(0);
    expect(stats.totals.expired).toBe(2);
    expect(await runDurableObjectAlarm(shard)).toBe(false);
  });
});
