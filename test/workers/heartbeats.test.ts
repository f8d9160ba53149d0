import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/kernel/clock";
import { crc32 } from "../../src/kernel/checksum";
import { coordinatorFor } from "../../src/kernel/addressing";
import { SLOW_REPORT_MS } from "../../src/kernel/heartbeat";
import type { Coordinator } from "../../coordinator/coordinator";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { api, createQueue, producer, queuePath } from "./helpers";
import { onlyShard as onlyShardAt } from "./shard-clock-helpers";
import { QUIET_MS } from "../../storage-shard/quiet-timer";

/**
 * Fake time far ahead of real time: alarms the shard sets for fake times then lie in
 * the real future and wait for runDurableObjectAlarm instead of firing on their own.
 */
const FUTURE = Date.now() + 100_000_000_000;

describe("storage shard heartbeats", () => {
  const onlyShard = (name: string, settings?: Record<string, unknown>) => onlyShardAt(name, FUTURE, settings);

  /** A shard that took a send and reported once on the slow cadence: its next report minutes away. */
  async function onSlowCadence(name: string, send: () => Promise<unknown>) {
    const only = await onlyShard(name);
    await send();
    only.clock.advance(5000);
    expect(await runDurableObjectAlarm(only.shard)).toBe(true);
    expect(await only.alarm()).toBe(only.clock.now() + SLOW_REPORT_MS);
    return only;
  }

  it("report backlog, arrivals, departures and leases to the Coordinator every interval", async () => {
    const { q, shard, shardName: name, clock } = await onlyShard("beats");
    // 20 JSON strings of 0 to 9 characters: 90 characters and 40 quotes.
    await producer("beats").sendBatch(Array.from({ length: 20 }, (_, i) => ({ body: "0123456789".slice(0, i % 10) })));
    clock.advance(4000);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    const beats = await coordinatorFor(env, q.queue_id).heartbeats();
    expect(beats.find((b) => b.name === name)).toEqual(
      expect.objectContaining({
        backlog_count: 20,
        backlog_bytes: 130,
        messages_in: 20,
        messages_out: 0,
        leased_now: 0,
        period_ms: 4000,
        healthy: true,
      }),
    );
    const metrics = await api("GET", `${queuePath("beats")}/metrics`);
    const mine = metrics.json.result.shards.find((s: { name: string }) => s.name === name);
    expect(mine.heartbeat).toMatchObject({
      received_at_ms: expect.any(Number),
      healthy: true,
      messages_in_per_second: 5,
      messages_out_per_second: 0,
      leased: 0,
    });

    // Always re-armed, busy or not: a Coordinator notices a shard that stops reporting. Five
    // messages a second is far below what the autoscaler acts on: the slow cadence, said in the report.
    await runInDurableObject(shard, async (_obj: StorageShard, state) => {
      expect(await state.storage.getAlarm()).toBe(FUTURE + 4000 + SLOW_REPORT_MS);
    });
    const leased = await shard.lease({
      queueId: q.queue_id,
      limit: 5,
      leaseMs: 60_000,
      maxWaitMs: 0,
      retentionMs: 1e12,
    });
    clock.advance(5000);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    const after = (await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)!;
    expect(after).toMatchObject({ messages_in: 0, messages_out: 5, leased_now: 5, backlog_count: 20 });
    expect(after.totals.leased).toBe(5);
    await shard.settle({
      queueId: q.queue_id,
      acks: leased.messages.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    clock.advance(5000);
    await runDurableObjectAlarm(shard);
    expect((await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)).toMatchObject({
      leased_now: 0,
      backlog_count: 15,
    });
  });

  it("report only the leases still running: ones that ran out, or were re-leased after running out, are not counted (a draining shard must be seen empty)", async () => {
    const { q, shard, shardName: name, clock } = await onlyShard("beats-lease-expiry");
    await producer("beats-lease-expiry").sendBatch(Array.from({ length: 10 }, (_, i) => ({ body: i })));
    const lease = (limit: number) =>
      shard.lease({ queueId: q.queue_id, limit, leaseMs: 3000, maxWaitMs: 0, retentionMs: 1e12 });
    const leasedNow = async () => {
      clock.advance(1);
      await runDurableObjectAlarm(shard);
      return (await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)!.leased_now;
    };
    expect((await lease(4)).messages).toHaveLength(4);
    expect(await leasedNow()).toBe(4);
    // The four memory leases run out: nothing is held.
    clock.advance(5000);
    expect(await leasedNow()).toBe(0);
    // Leased again (now stored leases), and those run out too.
    const again = await lease(10);
    expect(again.messages).toHaveLength(10);
    expect(await leasedNow()).toBe(10);
    clock.advance(5000);
    expect(await leasedNow()).toBe(0);
    // A third lease, acked: the shard is empty and says so.
    const third = await lease(10);
    await shard.settle({
      queueId: q.queue_id,
      acks: third.messages.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(await leasedNow()).toBe(0);
    expect((await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)).toMatchObject({
      backlog_count: 0,
    });
  });

  it("sleep once a report finds nothing changed: no report and no heartbeat alarm, figures exact, healthy, no traffic", async () => {
    const { q, shard, shardName: name, clock } = await onlyShard("beats-sleep");
    await producer("beats-sleep").sendBatch([{ body: 1 }, { body: 2 }, { body: 3 }]);
    const coordinator = coordinatorFor(env, q.queue_id);
    const rpcs = async () => (await coordinator.costFigures()).rpcs;
    clock.advance(5000);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    // A period with activity: awake, the next report on the slow cadence (three messages are far below the autoscaler's target).
    await runInDurableObject(shard, async (_obj: StorageShard, state) =>
      expect(await state.storage.getAlarm()).toBe(clock.now() + SLOW_REPORT_MS),
    );
    clock.advance(5000);
    const before = await rpcs();
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    // Its last report: no activity, the figures as they stay.
    expect(await rpcs()).toBe(before + 1);
    // Asleep: the one alarm left is the oldest message's retention (4 days), not a heartbeat.
    const retention = 4 * 24 * 3600 * 1000;
    const stats = await shard.stats();
    await runInDurableObject(shard, async (_obj: StorageShard, state) =>
      expect(await state.storage.getAlarm()).toBe(stats.oldestEnqueuedAt! + retention + 1),
    );
    // Run early, that alarm does its due work and wakes the shard for one report of what changed: nothing did.
    clock.advance(5000);
    const quiet = await rpcs();
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(await rpcs()).toBe(quiet);

    await runInDurableObject(env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id)), (obj: Coordinator) => {
      obj.clock = new ManualClock(Date.now() + 3 * 5000 + 1000);
    });
    const beat = (await coordinator.heartbeats()).find((b) => b.name === name)!;
    expect(beat).toMatchObject({ sleeping: true, healthy: true, backlog_count: 3, messages_in: 0, messages_out: 0 });
    const metrics = await api("GET", `${queuePath("beats-sleep")}/metrics`);
    expect(metrics.json.result.shards.find((s: { name: string }) => s.name === name).heartbeat).toMatchObject({
      sleeping: true,
      healthy: true,
      messages_in_per_second: 0,
    });
  });

  it("report on a slow cadence while traffic is far below the autoscaler's target, saying when, healthy meanwhile; a growing backlog brings the next report within an interval", async () => {
    const {
      q,
      shardName: name,
      clock,
      alarm,
    } = await onSlowCadence("beats-slow", () => producer("beats-slow").send(1));
    const coordinator = coordinatorFor(env, q.queue_id);
    // The Coordinator knows when the next report is due: three intervals on, it is not late.
    await runInDurableObject(env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id)), (obj: Coordinator) => {
      obj.clock = new ManualClock(Date.now() + 3 * 5000 + 1000);
    });
    const beat = (await coordinator.heartbeats()).find((b) => b.name === name)!;
    expect(beat).toMatchObject({ healthy: true, sleeping: false, messages_in: 1 });
    expect(beat.next_report_at).toBeGreaterThan(beat.received_at + 60_000);
    // A backlog that grows by a hundred: consumer scaling must hear of it within an interval.
    await producer("beats-slow").sendBatch(Array.from({ length: 100 }, (_, i) => ({ body: i })));
    await producer("beats-slow").send("one more");
    expect(await alarm()).toBe(clock.now() + 5000);
  });

  it("once its requests stop, send its last report at once and sleep: its figures exact, its deferred acks and totals written, no alarm left", async () => {
    // Awake on the slow cadence: without the quiet work, its last report would wait minutes.
    const {
      q,
      shard,
      shardName: name,
      clock,
      alarm,
    } = await onSlowCadence("beats-quiet", () => producer("beats-quiet").send(1));
    const coordinator = coordinatorFor(env, q.queue_id);
    await producer("beats-quiet").send(2);
    const leased = await shard.lease({
      queueId: q.queue_id,
      limit: 10,
      leaseMs: 30_000,
      maxWaitMs: 0,
      retentionMs: 1e12,
    });
    expect(leased.messages).toHaveLength(2);
    await shard.settle({
      queueId: q.queue_id,
      acks: leased.messages.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      retries: [],
      deadLettered: [],
      dropped: [],
      deferrable: true,
    });
    const rowsLeft = () =>
      runInDurableObject(
        shard,
        (_o: StorageShard, state) =>
          state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM segments").one().n,
      );
    // The push consumer's acks wait in memory for a write to ride on.
    expect(await rowsLeft()).toBe(1);
    clock.advance(QUIET_MS);
    await runInDurableObject(shard, (obj: StorageShard) => obj.quietNow());
    const beat = (await coordinator.heartbeats()).find((b) => b.name === name)!;
    expect(beat).toMatchObject({ sleeping: true, healthy: true, backlog_count: 0, messages_in: 1, messages_out: 2 });
    expect(beat.totals).toMatchObject({ stored: 2, leased: 2, acked: 2 });
    expect(await rowsLeft()).toBe(0);
    const totals = await runInDurableObject(shard, (_o: StorageShard, state) =>
      state.storage.sql.exec("SELECT stored, leased, acked FROM counters").one(),
    );
    expect(totals).toEqual({ stored: 2, leased: 2, acked: 2 });
    // Asleep with nothing due: no alarm, and the quiet work again sends nothing.
    expect(await alarm()).toBeNull();
    const rpcs = async () => (await coordinator.costFigures()).rpcs;
    const before = await rpcs();
    await runInDurableObject(shard, (obj: StorageShard) => obj.quietNow());
    expect(await rpcs()).toBe(before);
  });

  it("report a quarantine within an interval, even on the slow cadence", async () => {
    const { q, shard, clock, alarm } = await onSlowCadence("beats-quarantine", () =>
      producer("beats-quarantine").sendBatch([{ body: "aa" }, { body: "bb" }]),
    );
    await runInDurableObject(shard, (_o: StorageShard, state) => {
      state.storage.sql.exec("UPDATE segments SET bodies = zeroblob(length(bodies))");
    });
    await shard.lease({ queueId: q.queue_id, limit: 10, leaseMs: 30_000, maxWaitMs: 0, retentionMs: 1e12 });
    expect((await shard.stats()).totals.quarantined).toBe(2);
    expect(await alarm()).toBe(clock.now() + 5000);
  });

  it("mark a shard unhealthy once it has missed three heartbeats after a busy report (it had not sent its last one)", async () => {
    const q = await createQueue("beats-health");
    const shardName = (await coordinatorFor(env, q.queue_id).shardMap())!.shards[0]!.name;
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
    await coordinatorFor(env, q.queue_id).heartbeat({
      shard: shardName,
      state: "active",
      backlogCount: 1,
      backlogBytes: 1,
      oldestEnqueuedAt: 1,
      messagesIn: 1,
      messagesOut: 0,
      refusals: 0,
      leasedNow: 0,
      periodMs: 5000,
      sentAt: Date.now(),
      totals: {
        stored: 1,
        leased: 0,
        acked: 0,
        retried: 0,
        deadLettered: 0,
        dropped: 0,
        expired: 0,
        quarantined: 0,
        purged: 0,
        cancelled: 0,
      },
      cost: { rpcs: 0, rowsWritten: 0 },
    });
    await runInDurableObject(coordinator, (obj: Coordinator) => {
      obj.clock = new ManualClock(Date.now() + 3 * 5000 + 1000);
    });
    const beat = (await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === shardName)!;
    expect(beat).toMatchObject({ healthy: false, sleeping: false });
  });

  it("asleep, wake at a delayed message's due time and tell the Coordinator: a waiting pull is woken", async () => {
    const { q, shard, clock } = await onlyShard("beats-due");
    await api("POST", `${queuePath("beats-due")}/consumers`, { type: "http_pull" });
    await producer("beats-due").send("later", { delaySeconds: 60 });
    clock.advance(5000);
    await runDurableObjectAlarm(shard);
    // Its requests stopped: the quiet work sends its last report.
    clock.advance(5000);
    await runInDurableObject(shard, (obj: StorageShard) => obj.quietNow());
    // Asleep: the alarm is the delayed message's due time.
    const dueAt = await runInDurableObject(shard, async (_obj: StorageShard, state) => state.storage.getAlarm());
    expect(dueAt).toBeGreaterThan(clock.now() + 40_000);
    expect(dueAt).toBeLessThanOrEqual(clock.now() + 60_000);
    const waiting = coordinatorFor(env, q.queue_id).waitForMessages(20_000);
    clock.set(dueAt!);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(await waiting).toBe("woken");
    // Awake again: its report of the new figures is an interval on.
    await runInDurableObject(shard, async (_obj: StorageShard, state) =>
      expect(await state.storage.getAlarm()).toBe(dueAt! + 5000),
    );
  });

  it("asleep, expire messages at the oldest one's retention: one alarm, then a report of the new backlog", async () => {
    const {
      q,
      shard,
      shardName: name,
      clock,
    } = await onlyShard("beats-retention-asleep", { message_retention_period: 60 });
    await producer("beats-retention-asleep").sendBatch([{ body: 1 }, { body: 2 }]);
    clock.advance(5000);
    await runDurableObjectAlarm(shard);
    clock.advance(5000);
    await runDurableObjectAlarm(shard);
    const oldest = (await shard.stats()).oldestEnqueuedAt!;
    const at = await runInDurableObject(shard, async (_obj: StorageShard, state) => state.storage.getAlarm());
    expect(at).toBe(oldest + 60_000 + 1);
    clock.set(at!);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect((await shard.stats()).backlogCount).toBe(0);
    clock.advance(5000);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect((await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)).toMatchObject({
      backlog_count: 0,
    });
    // Empty and told: nothing left to wake it.
    clock.advance(5000);
    await runDurableObjectAlarm(shard);
    expect(await runInDurableObject(shard, async (_obj: StorageShard, state) => state.storage.getAlarm())).toBeNull();
  });

  it("report the messages sent from other regions by region, for a region without a shard of its own", async () => {
    const { q, shard, shardName: name, clock } = await onlyShard("beats-origin");
    const body = new TextEncoder().encode("x");
    const message = { body, contentType: "text" as const, delayMs: 0, checksum: crc32(body) };
    expect((await shard.append({ queueId: q.queue_id, messages: [message, message], origin: "weur" })).ok).toBe(true);
    expect((await shard.append({ queueId: q.queue_id, messages: [message] })).ok).toBe(true);
    clock.advance(5000);
    await runDurableObjectAlarm(shard);
    expect((await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)).toMatchObject({
      messages_in: 3,
      in_from: { weur: 2 },
    });
    clock.advance(5000);
    await runDurableObjectAlarm(shard);
    expect((await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)).toMatchObject({
      messages_in: 0,
      in_from: null,
    });
  });

  it("are dropped by a Coordinator that does not know the shard", async () => {
    const q = await createQueue("beats-unknown");
    const res = await coordinatorFor(env, q.queue_id).heartbeat({
      shard: "someone-else",
      state: "active",
      backlogCount: 1,
      backlogBytes: 1,
      oldestEnqueuedAt: 1,
      messagesIn: 1,
      messagesOut: 0,
      refusals: 0,
      leasedNow: 0,
      periodMs: 1,
      sentAt: 1,
      totals: {
        leased: 0,
        acked: 0,
        retried: 0,
        deadLettered: 0,
        dropped: 0,
        expired: 0,
        quarantined: 0,
        purged: 0,
        cancelled: 0,
      },
      cost: { rpcs: 0, rowsWritten: 0 },
    });
    expect(res).toEqual({ known: false, retentionMs: null });
    expect((await coordinatorFor(env, q.queue_id).heartbeats()).some((b) => b.name === "someone-else")).toBe(false);
  });

  it("expire messages no consumer reads once they pass the queue's retention", async () => {
    const { q, shard, shardName: name, clock } = await onlyShard("beats-retention", { message_retention_period: 60 });
    await producer("beats-retention").sendBatch([{ body: 1 }, { body: 2 }]);
    clock.advance(5000);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect((await shard.stats()).backlogCount).toBe(2);
    clock.advance(60_001);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    const stats = await shard.stats();
    expect(stats.backlogCount).toBe(0);
    expect(stats.totals.expired).toBe(2);
    // Expired after its report: one more report before it sleeps, so the Coordinator's figures are true.
    clock.advance(5000);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect((await coordinatorFor(env, q.queue_id).heartbeats()).find((b) => b.name === name)).toMatchObject({
      backlog_count: 0,
    });
  });
});
