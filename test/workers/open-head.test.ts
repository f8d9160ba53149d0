// What a lone message costs a storage shard (docs/segments.md): small appends go into the
// open head segment with one row written each, a consumer's batch of them is settled with
// one row, a push consumer's acks (deferrable) ride on the next write of their segment, and
// the running totals are written at most once a minute while traffic flows.
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { crc32 } from "../../src/kernel/checksum";
import { ManualClock } from "../../src/kernel/clock";
import { locate } from "../../src/kernel/ids";
import type { EncodedMessage, LeasedMessage, LeaseRequest, SettleRequest } from "../../src/kernel/protocol";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { DEFERRED_MAX_MS } from "../../storage-shard/segments/delivery-state";
import { HEAD_MAX_AGE_MS, HEAD_MAX_BYTES, HEAD_MAX_MESSAGES } from "../../storage-shard/segments/segment-writes";

const QUEUE = "4e".padEnd(32, "0");
const utf8 = new TextEncoder();

function fresh(body: string, delayMs = 0): EncodedMessage {
  const bytes = utf8.encode(body);
  return { body: bytes, contentType: "text", delayMs, checksum: crc32(bytes) };
}

async function shardAt(name: string) {
  const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name));
  await shard.activate({ name: `${QUEUE}:local:3`, queueId: QUEUE, accountId: "local", region: "local" });
  const clock = new ManualClock(5_000_000);
  await runInDurableObject(shard, (obj: StorageShard) => {
    obj.clock = clock;
  });
  return { shard, clock };
}

const leaseAll = (limit = 100): LeaseRequest => ({
  queueId: QUEUE,
  limit,
  leaseMs: 30_000,
  maxWaitMs: 0,
  retentionMs: 1e12,
});
const acks = (ms: LeasedMessage[], deferrable = false): SettleRequest => ({
  queueId: QUEUE,
  acks: ms.map((m) => ({ id: m.id, leaseId: m.leaseId })),
  retries: [],
  deadLettered: [],
  dropped: [],
  ...(deferrable ? { deferrable } : {}),
});

type Shard = Awaited<ReturnType<typeof shardAt>>["shard"];

/** Rows written by `fn`, by the shard's own meter (stats() itself writes none). */
async function rowsWrittenBy(shard: Shard, fn: () => Promise<unknown>): Promise<number> {
  const before = (await shard.stats()).cost.rowsWritten;
  await fn();
  return (await shard.stats()).cost.rowsWritten - before;
}

async function segments(shard: Shard): Promise<Array<{ seg: number; count: number; live: number }>> {
  return runInDurableObject(shard, (_o: StorageShard, state) =>
    state.storage.sql
      .exec<{ seg: number; count: number; live: number }>("SELECT seg, count, live FROM segments ORDER BY seg")
      .toArray(),
  );
}

describe("the open head segment", () => {
  it("stores ten lone sends a second apart with ten rows written (the running totals once), and settles them with one", async () => {
    const { shard, clock } = await shardAt("head-ten");
    const ids: string[] = [];
    const appended = await rowsWrittenBy(shard, async () => {
      for (let i = 0; i < 10; i++) {
        const r = await shard.append({ queueId: QUEUE, messages: [fresh(`m${i}`)], batch: `t${i}` });
        if (r.ok) ids.push(...r.ids);
        clock.advance(1000);
      }
    });
    // One INSERT, nine UPDATEs of the same row, and the totals once (not a row a second).
    expect(appended).toBe(10 + 1);
    expect(new Set(ids.map((id) => locate(id)!.seg)).size).toBe(1);
    expect(ids.map((id) => locate(id)!.slot)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const leased = (await shard.lease(leaseAll())).messages;
    expect(leased.map((m) => m.id)).toEqual(ids);
    // An ack somebody waits on (not deferrable) is written before it is answered: one delete for the ten.
    const settled = await rowsWrittenBy(shard, async () =>
      expect(await shard.settle(acks(leased))).toMatchObject({ acked: 10, stale: [] }),
    );
    expect(settled).toBe(1);
    expect(await segments(shard)).toEqual([]);
    expect((await shard.stats()).totals.acked).toBe(10);
  });

  it("delivers what an append adds to the head after a lease read it whole", async () => {
    const { shard } = await shardAt("head-cursor");
    await shard.append({ queueId: QUEUE, messages: [fresh("a")] });
    const first = (await shard.lease(leaseAll())).messages;
    expect(first).toHaveLength(1);
    const b = await shard.append({ queueId: QUEUE, messages: [fresh("b"), fresh("c")] });
    const second = (await shard.lease(leaseAll())).messages;
    expect(second.map((m) => m.id)).toEqual(b.ok ? b.ids : []);
    expect(locate(second[0]!.id)!.seg).toBe(locate(first[0]!.id)!.seg);
  });

  it("answers a write again after a lost reply with its ids in the head, storing nothing", async () => {
    const { shard } = await shardAt("head-again");
    const one = await shard.append({ queueId: QUEUE, messages: [fresh("one")], batch: "tok-a" });
    const two = await shard.append({ queueId: QUEUE, messages: [fresh("two"), fresh("three")], batch: "tok-b" });
    await shard.append({ queueId: QUEUE, messages: [fresh("four")], batch: "tok-c" });
    const twoAgain = await shard.append({
      queueId: QUEUE,
      messages: [fresh("two"), fresh("three")],
      batch: "tok-b",
      dedupe: true,
    });
    const oneAgain = await shard.append({ queueId: QUEUE, messages: [fresh("one")], batch: "tok-a", dedupe: true });
    expect(twoAgain).toMatchObject({ ok: true, stored: 0, duplicates: 2 });
    expect(twoAgain.ok && twoAgain.ids).toEqual(two.ok && two.ids);
    expect(oneAgain.ok && oneAgain.ids).toEqual(one.ok && one.ids);
    // A token that only starts like one stored is another write.
    expect(await shard.append({ queueId: QUEUE, messages: [fresh("x")], batch: "tok", dedupe: true })).toMatchObject({
      stored: 1,
    });
    expect((await shard.stats()).backlogCount).toBe(5);
    expect(await segments(shard)).toHaveLength(1);
  });

  it("keeps a body corrupted at rest corrupted when an append rewrites the head: that message alone is quarantined", async () => {
    const { shard } = await shardAt("head-corrupt");
    await shard.append({ queueId: QUEUE, messages: [fresh("aa")] });
    await shard.append({ queueId: QUEUE, messages: [fresh("bb")] });
    await runInDurableObject(shard, (_o: StorageShard, state) => {
      state.storage.sql.exec("UPDATE segments SET bodies = ?", utf8.encode("aaXb").buffer);
    });
    await shard.append({ queueId: QUEUE, messages: [fresh("cc")] });
    const got = (await shard.lease(leaseAll())).messages;
    expect(got.map((m) => new TextDecoder().decode(m.body))).toEqual(["aa", "cc"]);
    expect((await shard.stats()).totals.quarantined).toBe(1);
  });

  it("opens a new segment once the head holds its most messages or bytes, is old, or another segment was written", async () => {
    const { shard, clock } = await shardAt("head-bounds");
    await shard.append({
      queueId: QUEUE,
      messages: Array.from({ length: HEAD_MAX_MESSAGES - 1 }, (_, i) => fresh(`f${i}`)),
    });
    await shard.append({ queueId: QUEUE, messages: [fresh("last")] });
    await shard.append({ queueId: QUEUE, messages: [fresh("next")] });
    expect((await segments(shard)).map((s) => s.count)).toEqual([HEAD_MAX_MESSAGES, 1]);
    // Bytes: a body that would take the head past its bytes starts a segment of its own.
    await shard.append({ queueId: QUEUE, messages: [fresh("b".repeat(HEAD_MAX_BYTES - 2))] });
    expect((await segments(shard)).map((s) => s.count)).toEqual([HEAD_MAX_MESSAGES, 1, 1]);
    // Age.
    await shard.append({ queueId: QUEUE, messages: [fresh("young")] });
    clock.advance(HEAD_MAX_AGE_MS);
    await shard.append({ queueId: QUEUE, messages: [fresh("old")] });
    expect((await segments(shard)).map((s) => s.count)).toEqual([HEAD_MAX_MESSAGES, 1, 1, 1, 1]);
    // A delayed message is a scheduled segment of its own, and closes the head.
    await shard.append({ queueId: QUEUE, messages: [fresh("later", 60_000)] });
    await shard.append({ queueId: QUEUE, messages: [fresh("after")] });
    expect((await segments(shard)).map((s) => s.count)).toEqual([HEAD_MAX_MESSAGES, 1, 1, 1, 1, 1, 1]);
  });
});

describe("deferred acks", () => {
  it("settles a deferrable ack at once and writes it with the next append into its segment, for no row of its own", async () => {
    const { shard } = await shardAt("defer-ride");
    await shard.append({ queueId: QUEUE, messages: [fresh("a")] });
    const [a] = (await shard.lease(leaseAll())).messages;
    const acked = await rowsWrittenBy(shard, async () =>
      expect(await shard.settle(acks([a!], true))).toMatchObject({ acked: 1, stale: [] }),
    );
    expect(acked).toBe(0);
    // Settled now: counted, never leased again, not found, a second ack stale.
    const stats = await shard.stats();
    expect(stats).toMatchObject({ backlogCount: 0, totals: { acked: 1 } });
    expect((await shard.lease(leaseAll())).messages).toEqual([]);
    expect(await shard.findMessage(QUEUE, a!.id)).toBeNull();
    expect(await segments(shard)).toEqual([expect.objectContaining({ count: 1, live: 1 })]);
    // The next append into the head writes it: one row for both.
    const appended = await rowsWrittenBy(shard, () => shard.append({ queueId: QUEUE, messages: [fresh("b")] }));
    expect(appended).toBe(1);
    expect(await segments(shard)).toEqual([expect.objectContaining({ count: 2, live: 1 })]);
    expect(await shard.settle(acks([a!]))).toMatchObject({ acked: 0, stale: [a!.id] });
  });

  it("delivers a message again when a reset comes before its deferred ack was written", async () => {
    const { shard } = await shardAt("defer-reset");
    await shard.append({ queueId: QUEUE, messages: [fresh("a")] });
    const [a] = (await shard.lease(leaseAll())).messages;
    await shard.settle(acks([a!], true));
    await runInDurableObject(shard, (_o: StorageShard, state) =>
      state.abort("reset before the deferred ack was written"),
    ).catch(() => {});
    const restarted = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("defer-reset"));
    // At-least-once, as a lost lease: ready again, the lost delivery not counted as a retry.
    const again = (await restarted.lease({ ...leaseAll(), retentionMs: 1e15 })).messages;
    expect(again.map((m) => [m.id, m.attempts])).toEqual([[a!.id, 1]]);
  });

  it("writes every deferred ack, and the running totals, at the alarm after which the shard sleeps", async () => {
    const { shard } = await shardAt("defer-sleep");
    await shard.append({ queueId: QUEUE, messages: [fresh("a")] });
    const [a] = (await shard.lease(leaseAll())).messages;
    await shard.settle(acks([a!], true));
    const counters = () =>
      runInDurableObject(
        shard,
        (_o: StorageShard, state) =>
          state.storage.sql.exec<{ acked: number }>("SELECT acked FROM counters").one().acked,
      );
    expect(await counters()).toBe(0);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(
      await runInDurableObject(
        shard,
        (o: StorageShard) => (o as unknown as { alarms: { awake: boolean } }).alarms.awake,
      ),
    ).toBe(false);
    expect(await segments(shard)).toEqual([]);
    expect(await counters()).toBe(1);
  });

  it("writes deferred acks alone once their segment is no longer the head, or they waited their most", async () => {
    const { shard, clock } = await shardAt("defer-bound");
    await shard.append({ queueId: QUEUE, messages: [fresh("a"), fresh("b")] });
    const [a, b] = (await shard.lease(leaseAll())).messages;
    await shard.settle(acks([a!], true));
    clock.advance(DEFERRED_MAX_MS - 1);
    // A lease call short of the bound writes nothing of it.
    expect(await rowsWrittenBy(shard, () => shard.lease(leaseAll()))).toBe(0);
    clock.advance(1);
    expect(await rowsWrittenBy(shard, () => shard.lease(leaseAll()))).toBe(1);
    expect(await segments(shard)).toEqual([expect.objectContaining({ count: 2, live: 1 })]);
    // Once a delayed send closed the head, the next ack of the old head is written in its own call (the delete).
    await shard.append({ queueId: QUEUE, messages: [fresh("later", 60_000)] });
    await shard.settle(acks([b!], true));
    expect((await segments(shard)).map((s) => s.count)).toEqual([1]);
  });
});
