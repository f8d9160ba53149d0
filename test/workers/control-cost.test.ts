/**
 * The cost figures of the objects that are not storage shards (test/workers/cost.test.ts has
 * those): the Coordinator, consumer shards (through their reports), the account catalog and
 * the idempotency tables count the RPCs they serve, their alarms and the SQLite rows they
 * write and read, key-value calls and setAlarm() included, as Cloudflare bills them.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { catalogFor, coordinatorFor, idempotencyKeysFor } from "../../src/kernel/addressing";
import { meteredStorage, newMeter, readMeter } from "../../src/kernel/sql-meter";
import { ACCOUNT, createQueue } from "./helpers";

describe("cost figures of the control objects", () => {
  it("meteredStorage bills key-value calls, setAlarm() and deleteAlarm() as rows", async () => {
    const id = env.IDEMPOTENCY_KEYS.idFromName("metered-storage");
    await runInDurableObject(env.IDEMPOTENCY_KEYS.get(id), async (_obj, state) => {
      state.storage.sql.exec("CREATE TABLE IF NOT EXISTS t (x INTEGER)");
      const meter = newMeter();
      const storage = meteredStorage(state.storage, meter);
      await storage.put("a", 1);
      await storage.put({ b: 2, c: 3 });
      await storage.get(["a", "b", "missing"]);
      await storage.delete("a");
      await storage.setAlarm(Date.now() + 60_000);
      await storage.getAlarm();
      await storage.deleteAlarm();
      storage.sql.exec("INSERT INTO t (x) VALUES (1), (2)");
      // put: 1 + 2, delete: 1, setAlarm: 1, deleteAlarm: 1, INSERT: 2.
      expect(meter.rowsWritten).toBe(8);
      // get: one per key asked, found or not.
      expect(meter.rowsRead).toBeGreaterThanOrEqual(3);
      expect(readMeter(meter, 5)).toMatchObject({ rowsWritten: 8, since: 5 });
    });
  });

  it("the Coordinator counts each RPC once and its alarms, and not the read of its figures", async () => {
    const q = await createQueue("control-cost");
    const coordinator = coordinatorFor(env, q.queue_id);
    const before = await coordinator.costFigures();
    await coordinator.info();
    // deliveryPlan() reads the consumers and the backlog through the same code as consumers() and backlogByShard(): still one RPC.
    await coordinator.deliveryPlan();
    const after = await coordinator.costFigures();
    expect(after.rpcs - before.rpcs).toBe(2);
    expect(after.since).toBe(before.since);
    expect(after.rowsRead).toBeGreaterThan(before.rowsRead);
    expect(after.storageShards.length).toBeGreaterThan(0);
  });

  it("keeps what each consumer shard reports, over its restarts", async () => {
    const q = await createQueue("control-cost-consumers");
    const coordinator = coordinatorFor(env, q.queue_id);
    const report = (since: number, rpcs: number, alarms: number) =>
      coordinator.consumerReport({
        index: 0,
        running: false,
        delivered: 0,
        batches: 0,
        errors: 0,
        cost: { rpcs, alarms, rowsWritten: 10 * rpcs, rowsRead: 0, since },
      });
    await report(1, 3, 2);
    await report(1, 5, 4);
    expect((await coordinator.costFigures()).consumerShards["0"]).toEqual({
      rpcs: 5,
      alarms: 4,
      rowsWritten: 50,
      rowsRead: 0,
    });
    // Restarted (another `since`): its life before is carried, not lost.
    await report(2, 1, 1);
    await report(2, 2, 1);
    expect((await coordinator.costFigures()).consumerShards["0"]).toEqual({
      rpcs: 7,
      alarms: 5,
      rowsWritten: 70,
      rowsRead: 0,
    });
    expect((await coordinator.consumerShards()).shards[0]?.cost).toEqual({
      rpcs: 7,
      alarms: 5,
      rowsWritten: 70,
      rowsRead: 0,
    });
    // A report without cost (a consumer shard older than the figures) changes nothing.
    await coordinator.consumerReport({ index: 0, running: false, delivered: 0, batches: 0, errors: 0 });
    expect((await coordinator.costFigures()).consumerShards["0"]?.rpcs).toBe(7);
  });

  it("a storage shard's report writes its heartbeat row once, not a delete and an insert", async () => {
    const q = await createQueue("control-cost-beats");
    const coordinator = coordinatorFor(env, q.queue_id);
    const shard = (await coordinator.shardMap())!.shards[0]!.name;
    const beat = (sentAt: number) =>
      coordinator.heartbeat({
        shard,
        state: "active",
        backlogCount: 1,
        backlogBytes: 1,
        oldestEnqueuedAt: 1,
        messagesIn: 1,
        messagesOut: 0,
        refusals: 0,
        leasedNow: 0,
        periodMs: 5000,
        sentAt,
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
    await beat(Date.now());
    const before = await coordinator.costFigures();
    await beat(Date.now() + 1);
    const after = await coordinator.costFigures();
    expect(after.rpcs - before.rpcs).toBe(1);
    // The heartbeat row, updated in place (the control loop's alarm is armed already).
    expect(after.rowsWritten - before.rowsWritten).toBe(1);
    expect((await coordinator.heartbeats()).find((b) => b.name === shard)).toMatchObject({
      backlog_count: 1,
      messages_in: 1,
    });
  });

  it("the catalog and the idempotency tables count their RPCs and rows", async () => {
    const catalog = catalogFor(env, ACCOUNT);
    const c0 = await catalog.costFigures();
    await catalog.resolve("no-such-queue");
    const c1 = await catalog.costFigures();
    expect(c1.rpcs - c0.rpcs).toBe(1);
    expect(c1.rowsRead).toBeGreaterThanOrEqual(c0.rowsRead);

    const keys = idempotencyKeysFor(env, "f".repeat(32), 0);
    const k0 = await keys.costFigures();
    await keys.claim([{ key: "k", digest: "d", ids: ["1".padStart(32, "0")] }], "token");
    const k1 = await keys.costFigures();
    expect(k1.rpcs - k0.rpcs).toBe(1);
    // The key's row (its index entry too) and the sweep alarm's setAlarm().
    expect(k1.rowsWritten - k0.rowsWritten).toBeGreaterThanOrEqual(2);
  });
});
