/**
 * A storage shard's leases, on a manual clock: batches handed out at once or after the max wait,
 * expiry and redelivery, stale acks fenced, retries, extensions, retention, quarantine, delayed
 * messages, and the wake-ups an arrival sends. Leases across a restart: leases-restarts.test.ts.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it, onTestFinished } from "vitest";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { ConsumerShard } from "../../consumer-shard/consumer-shard";
import { Coordinator } from "../../coordinator/coordinator";
import { sleep } from "../../src/kernel/sleep";
import { msg, QUEUE, req, shardAt } from "./leases-helpers";

const utf8 = new TextEncoder();

describe("leases (vesting times)", () => {
  it("hands out a full batch at once, and a partial batch only after max wait from its oldest message", async () => {
    const { shard, clock } = await shardAt("batch-bounds");
    await shard.append({ queueId: QUEUE, messages: Array.from({ length: 25 }, () => msg()) });
    const first = await shard.lease(req());
    expect(first.messages).toHaveLength(10);
    expect(first.more).toBe(true);
    expect((await shard.lease(req())).messages).toHaveLength(10);
    const partial = await shard.lease(req());
    expect(partial.messages).toHaveLength(0);
    expect(partial.waitUntil).toBe(1_000_000 + 5000);
    clock.advance(4999);
    expect((await shard.lease(req())).messages).toHaveLength(0);
    clock.advance(1);
    const late = await shard.lease(req());
    expect(late.messages).toHaveLength(5);
    expect(late.more).toBe(false);
  });

  it("never waits with max_wait_time 0, and counts attempts from 1", async () => {
    const { shard } = await shardAt("no-wait");
    await shard.append({ queueId: QUEUE, messages: [msg("a"), msg("b")] });
    const got = await shard.lease(req({ maxWaitMs: 0 }));
    expect(got.messages.map((m) => m.attempts)).toEqual([1, 1]);
    expect(new TextDecoder().decode(got.messages[0]!.body)).toBe("a");
  });

  it("keeps a leased message invisible until its lease expires, then delivers it again with attempts + 1", async () => {
    const { shard, clock } = await shardAt("expiry");
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    const first = await shard.lease(req({ maxWaitMs: 0, leaseMs: 1000 }));
    expect(first.nextVisibleAt).toBe(1_001_000);
    expect((await shard.lease(req({ maxWaitMs: 0 }))).messages).toHaveLength(0);
    clock.advance(1000);
    const again = await shard.lease(req({ maxWaitMs: 0 }));
    expect(again.messages[0]!.id).toBe(first.messages[0]!.id);
    expect(again.messages[0]!.attempts).toBe(2);
    expect(again.messages[0]!.leaseId).not.toBe(first.messages[0]!.leaseId);
  });

  it("fences a late ack or retry: the lease was taken over, nothing changes", async () => {
    const { shard, clock } = await shardAt("fenced");
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    const old = (await shard.lease(req({ maxWaitMs: 0, leaseMs: 1000 }))).messages[0]!;
    clock.advance(1001);
    const current = (await shard.lease(req({ maxWaitMs: 0, leaseMs: 60_000 }))).messages[0]!;
    const late = await shard.settle({
      queueId: QUEUE,
      acks: [{ id: old.id, leaseId: old.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(late).toEqual({ acked: 0, retried: 0, deadLettered: 0, dropped: 0, stale: [old.id] });
    expect((await shard.stats()).backlogCount).toBe(1);
    expect(await shard.extendLeases(QUEUE, [{ id: old.id, leaseId: old.leaseId }], 99_000)).toEqual([]);
    const ok = await shard.settle({
      queueId: QUEUE,
      acks: [{ id: current.id, leaseId: current.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(ok.acked).toBe(1);
    expect((await shard.stats()).backlogCount).toBe(0);
  });

  it("accepts an ack after the lease expired when nobody else took the message (as Cloudflare does)", async () => {
    const { shard, clock } = await shardAt("late-but-free");
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    const m = (await shard.lease(req({ maxWaitMs: 0, leaseMs: 1000 }))).messages[0]!;
    clock.advance(5000);
    const r = await shard.settle({
      queueId: QUEUE,
      acks: [{ id: m.id, leaseId: m.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(r.acked).toBe(1);
  });

  it("schedules a retry after its delay and counts every outcome exactly", async () => {
    const { shard, clock } = await shardAt("outcomes");
    await shard.append({ queueId: QUEUE, messages: [msg("ack"), msg("retry"), msg("dlq"), msg("drop")] });
    const [a, r, d, x] = (await shard.lease(req({ maxWaitMs: 0 }))).messages;
    const result = await shard.settle({
      queueId: QUEUE,
      acks: [{ id: a!.id, leaseId: a!.leaseId }],
      retries: [{ id: r!.id, leaseId: r!.leaseId, delayMs: 10_000 }],
      deadLettered: [{ id: d!.id, leaseId: d!.leaseId }],
      dropped: [{ id: x!.id, leaseId: x!.leaseId }],
    });
    expect(result).toEqual({ acked: 1, retried: 1, deadLettered: 1, dropped: 1, stale: [] });
    const stats = await shard.stats();
    expect(stats).toMatchObject({ backlogCount: 1, backlogBytes: 5 });
    expect(stats.totals).toMatchObject({ leased: 4, acked: 1, retried: 1, deadLettered: 1, dropped: 1 });
    clock.advance(9999);
    expect((await shard.lease(req({ maxWaitMs: 0 }))).messages).toHaveLength(0);
    clock.advance(1);
    const back = (await shard.lease(req({ maxWaitMs: 0 }))).messages;
    expect(back.map((m) => [m.id, m.attempts])).toEqual([[r!.id, 2]]);
  });

  it("extends a held lease so the message stays invisible past its first deadline", async () => {
    const { shard, clock } = await shardAt("extend");
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    const m = (await shard.lease(req({ maxWaitMs: 0, leaseMs: 1000 }))).messages[0]!;
    clock.advance(900);
    expect(await shard.extendLeases(QUEUE, [{ id: m.id, leaseId: m.leaseId }], 1000)).toEqual([m.id]);
    clock.advance(900);
    expect((await shard.lease(req({ maxWaitMs: 0 }))).messages).toHaveLength(0);
    clock.advance(100);
    expect((await shard.lease(req({ maxWaitMs: 0 }))).messages).toHaveLength(1);
  });

  it("deletes messages past the retention period instead of delivering them, and counts them", async () => {
    const { shard, clock } = await shardAt("retention");
    await shard.append({ queueId: QUEUE, messages: [msg("old"), msg("old")] });
    clock.advance(30_000);
    await shard.append({ queueId: QUEUE, messages: [msg("new")] });
    clock.advance(31_000);
    const got = await shard.lease(req({ maxWaitMs: 0, retentionMs: 60_000 }));
    expect(got.messages.map((m) => new TextDecoder().decode(m.body))).toEqual(["new"]);
    const stats = await shard.stats();
    expect(stats.backlogCount).toBe(1);
    expect(stats.totals.expired).toBe(2);
  });

  it("quarantines a body corrupted at rest: never delivered, counted, the rest of the batch goes on", async () => {
    const { shard } = await shardAt("quarantine");
    const bad = msg("flip");
    await shard.append({ queueId: QUEUE, messages: [msg("ok"), bad] });
    await runInDurableObject(shard, (_o: StorageShard, state) => {
      // "ok" then "flip", packed in one segment: one byte of the second flipped.
      state.storage.sql.exec("UPDATE segments SET bodies = ?", utf8.encode("okflop").buffer);
    });
    const got = await shard.lease(req({ maxWaitMs: 0 }));
    expect(got.messages.map((m) => new TextDecoder().decode(m.body))).toEqual(["ok"]);
    const stats = await shard.stats();
    expect(stats.backlogCount).toBe(1);
    expect(stats.totals.quarantined).toBe(1);
    await runInDurableObject(shard, (_o: StorageShard, state) => {
      expect(state.storage.sql.exec("SELECT id, reason FROM quarantine").toArray()).toEqual([
        { id: bad.id, reason: "checksum mismatch" },
      ]);
    });
  });

  it("counts an expired memory lease as a delivery and schedules the message; the old lease acks only until someone else leases it", async () => {
    const { shard, clock } = await shardAt("memory-expiry");
    await shard.append({ queueId: QUEUE, messages: [msg("x"), msg("y")] });
    const [x, y] = (await shard.lease(req({ maxWaitMs: 0, leaseMs: 1000 }))).messages;
    clock.advance(1001);
    const next = await shard.lease(req({ maxWaitMs: 0, limit: 1 }));
    expect(next.messages.map((m) => [m.id, m.attempts])).toEqual([[x!.id, 2]]);
    // y expired too and nobody took it: its first lease still acks it.
    expect(
      (
        await shard.settle({
          queueId: QUEUE,
          acks: [{ id: y!.id, leaseId: y!.leaseId }],
          retries: [],
          deadLettered: [],
          dropped: [],
        })
      ).acked,
    ).toBe(1);
    // x was leased again: the first lease is stale, the second lands.
    expect(
      (
        await shard.settle({
          queueId: QUEUE,
          acks: [{ id: x!.id, leaseId: x!.leaseId }],
          retries: [],
          deadLettered: [],
          dropped: [],
        })
      ).stale,
    ).toEqual([x!.id]);
    expect(
      (
        await shard.settle({
          queueId: QUEUE,
          acks: [{ id: x!.id, leaseId: next.messages[0]!.leaseId }],
          retries: [],
          deadLettered: [],
          dropped: [],
        })
      ).acked,
    ).toBe(1);
    expect(await shard.stats()).toMatchObject({ backlogCount: 0, totals: { leased: 3, acked: 2 } });
  });

  it("delivers fresh messages behind delayed ones at once, and the delayed ones when they are due", async () => {
    const { shard, clock } = await shardAt("delayed-between");
    const delayed = msg("later", 10_000);
    const fresh = [msg("now-1"), msg("now-2")];
    await shard.append({ queueId: QUEUE, messages: [delayed, ...fresh] });
    const first = await shard.lease(req({ maxWaitMs: 0 }));
    expect(first.messages.map((m) => m.id)).toEqual(fresh.map((m) => m.id));
    expect(first.nextVisibleAt).toBe(1_000_000 + 10_000);
    clock.advance(10_000);
    expect((await shard.lease(req({ maxWaitMs: 0 }))).messages.map((m) => m.id)).toEqual([delayed.id]);
  });

  it("tells its Coordinator when an arrival fills the batch a consumer was told to wait for", async () => {
    const { shard } = await shardAt("fill-wakes");
    const told: string[] = [];
    // RPC reaches class methods only: listen on the prototype for this test.
    const original = Coordinator.prototype.notifyReady;
    Coordinator.prototype.notifyReady = async (name: string) => (told.push(name), false);
    onTestFinished(() => {
      Coordinator.prototype.notifyReady = original;
    });
    const settled = async (n: number) => {
      for (let i = 0; i < 50 && told.length < n; i++) await sleep(20);
      await sleep(50);
      return told.length;
    };
    await shard.append({ queueId: QUEUE, messages: [msg(), msg(), msg()] });
    expect(await settled(1)).toBe(1); // the first arrival
    expect((await shard.lease(req({ limit: 10 }))).waitUntil).not.toBeNull(); // 3 of 10: wait
    await shard.append({ queueId: QUEUE, messages: [msg(), msg(), msg()] });
    expect(await settled(2)).toBe(1); // 6 of 10: still filling, nobody told
    await shard.append({ queueId: QUEUE, messages: [msg(), msg(), msg(), msg()] });
    expect(await settled(2)).toBe(2); // 10 of 10: told at once
    expect(told).toEqual(["fill-wakes", "fill-wakes"]);
  });

  it("wakes the consumer shard that leased last when a lease of its runs out unsettled, at the next arrival, once", async () => {
    const { shard, clock } = await shardAt("lapse-wakes");
    const woken: Array<{ index: number; shard?: string; dueAt?: number }> = [];
    // RPC reaches class methods only: listen on the prototype for this test.
    const original = ConsumerShard.prototype.wake;
    ConsumerShard.prototype.wake = async (_q: string, index: number, _v?: string, shard?: string, dueAt?: number) =>
      void woken.push({ index, shard, dueAt });
    onTestFinished(() => {
      ConsumerShard.prototype.wake = original;
    });
    const settled = async () => {
      await sleep(100);
      return woken.length;
    };
    await shard.append({ queueId: QUEUE, messages: [msg(), msg(), msg()] });
    const first = await shard.lease(req({ maxWaitMs: 0, leaseMs: 1000, consumerShard: 3 }));
    expect(first.messages).toHaveLength(3);
    // Consumers were told of this shard's messages, and one is taking them: an arrival tells nobody.
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    expect(await settled()).toBe(0);
    // Its holder dropped the lease (a consumer shard reset): the next arrival wakes that shard for now.
    clock.advance(1000);
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    expect(await settled()).toBe(1);
    expect(woken[0]).toEqual({ index: 3, shard: "lapse-wakes", dueAt: undefined });
    // Once: the lapsed messages are ready again, and the next arrival tells nobody.
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    expect(await settled()).toBe(1);
    const again = await shard.lease(req({ maxWaitMs: 0, consumerShard: 3 }));
    expect(
      again.messages
        .filter((m) => m.attempts === 2)
        .map((m) => m.id)
        .sort(),
    ).toEqual(first.messages.map((m) => m.id).sort());
    expect(again.messages).toHaveLength(6);
  });
});
