import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { crc32 } from "../../src/kernel/checksum";
import { ManualClock } from "../../src/kernel/clock";
import { locate } from "../../src/kernel/ids";
import type { EncodedMessage, LeaseRequest } from "../../src/kernel/protocol";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { SEGMENT_MAX_BYTES } from "../../storage-shard/segments/segment";

const QUEUE = "5e".padEnd(32, "0");
const utf8 = new TextEncoder();

function fresh(body: string | Uint8Array, delayMs = 0): EncodedMessage {
  const bytes = typeof body === "string" ? utf8.encode(body) : body;
  return { body: bytes, contentType: "bytes", delayMs, checksum: crc32(bytes) };
}

async function shardAt(name: string) {
  const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name));
  await shard.activate({ name: `${QUEUE}:local:7`, queueId: QUEUE, accountId: "local", region: "local" });
  return shard;
}

const leaseAll = (limit = 100): LeaseRequest => ({
  queueId: QUEUE,
  limit,
  leaseMs: 30_000,
  maxWaitMs: 0,
  retentionMs: 1e12,
});

async function segmentCount(shard: DurableObjectStub<StorageShard>): Promise<number> {
  return runInDurableObject(
    shard,
    (_o: StorageShard, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM segments").one().n,
  );
}

describe("segments", () => {
  it("draws ids that say where each message lives: this shard's number, its segment and slot", async () => {
    const shard = await shardAt("seg-ids");
    const r = await shard.append({ queueId: QUEUE, messages: [fresh("a"), fresh("b"), fresh("c")] });
    if (!r.ok) throw new Error("refused");
    expect(r.ids).toHaveLength(3);
    const places = r.ids.map((id) => locate(id)!);
    expect(places.map((p) => [p.shard, p.slot])).toEqual([
      [7, 0],
      [7, 1],
      [7, 2],
    ]);
    expect(new Set(places.map((p) => p.seg)).size).toBe(1);
    // Ids still sort by the time they were made; a lone send goes into the open head, after its last slot.
    const later = await shard.append({ queueId: QUEUE, messages: [fresh("d")] });
    expect(later.ok && later.ids[0]! > r.ids[2]!).toBe(true);
    expect(later.ok && locate(later.ids[0]!)).toMatchObject({ seg: places[0]!.seg, slot: 3 });
    expect(await segmentCount(shard)).toBe(1);
  });

  it("answers a batch written again after a lost reply with its first ids, storing nothing", async () => {
    const shard = await shardAt("seg-again");
    const batch = [fresh("one"), fresh("two", 5000)];
    const first = await shard.append({ queueId: QUEUE, messages: batch, batch: "tok-1" });
    const again = await shard.append({ queueId: QUEUE, messages: batch, batch: "tok-1", dedupe: true });
    expect(again).toMatchObject({ ok: true, stored: 0, duplicates: 2 });
    expect(first.ok && again.ok && again.ids).toEqual(first.ok && first.ids);
    // Another batch's token, or a first try, stores.
    expect(await shard.append({ queueId: QUEUE, messages: batch, batch: "tok-2", dedupe: true })).toMatchObject({
      stored: 2,
    });
    expect((await shard.stats()).backlogCount).toBe(4);
  });

  it("finds a message by id reading a few rows, whatever the backlog: located, rewritten by a retry, or chosen by its sender", async () => {
    const shard = await shardAt("seg-lookup");
    const ids: string[] = [];
    for (let i = 0; i < 200; i++) {
      const r = await shard.append({
        queueId: QUEUE,
        messages: Array.from({ length: 20 }, (_, j) => fresh(`m${i}.${j}`)),
      });
      if (r.ok) ids.push(...r.ids);
    }
    await shard.append({
      queueId: QUEUE,
      messages: [{ ...fresh("chosen"), id: "c0ffee".padStart(32, "0") }],
      remember: true,
    });
    // Rows read by `fn`, less those the stats() call that reads the figure reads itself.
    const rowsRead = async (fn: () => Promise<unknown>) => {
      const before = (await shard.stats()).cost.rowsRead!;
      await fn();
      const after = (await shard.stats()).cost.rowsRead!;
      return after - before - ((await shard.stats()).cost.rowsRead! - after);
    };
    const middle = ids[2000]!;
    expect(await rowsRead(() => shard.findMessage(QUEUE, middle))).toBeLessThanOrEqual(4);
    expect(await shard.findMessage(QUEUE, middle)).toMatchObject({ id: middle, state: "ready", attempts: 0 });
    expect(await rowsRead(() => shard.findMessage(QUEUE, "c0ffee".padStart(32, "0")))).toBeLessThanOrEqual(4);
    expect(await rowsRead(() => shard.findMessage(QUEUE, "f".repeat(32)))).toBeLessThanOrEqual(4);
    expect(await shard.findMessage(QUEUE, "f".repeat(32))).toBeNull();

    // A retry rewrites the message elsewhere: its id still finds it, through the index.
    const first = (await shard.lease(leaseAll(20))).messages;
    await shard.settle({
      queueId: QUEUE,
      acks: [],
      retries: [{ id: first[0]!.id, leaseId: first[0]!.leaseId, delayMs: 60_000 }],
      deadLettered: [],
      dropped: [],
    });
    expect(await shard.findMessage(QUEUE, first[0]!.id)).toMatchObject({ state: "delayed", attempts: 1 });
    expect(await rowsRead(() => shard.findMessage(QUEUE, first[0]!.id))).toBeLessThanOrEqual(6);
    // Cancelled where it lives now; its old place settled long ago.
    expect(await shard.cancelMessage(QUEUE, first[0]!.id)).toBe(true);
    expect(await shard.findMessage(QUEUE, first[0]!.id)).toBeNull();
  });

  it("quarantines one corrupted message of a segment; its neighbours are delivered, and the segment goes once they are acked", async () => {
    const shard = await shardAt("seg-quarantine");
    await shard.append({ queueId: QUEUE, messages: [fresh("aa"), fresh("bb"), fresh("cc")] });
    await runInDurableObject(shard, (_o: StorageShard, state) => {
      state.storage.sql.exec("UPDATE segments SET bodies = ?", utf8.encode("aaXbcc").buffer);
    });
    const got = (await shard.lease(leaseAll())).messages;
    expect(got.map((m) => new TextDecoder().decode(m.body))).toEqual(["aa", "cc"]);
    expect((await shard.stats()).totals.quarantined).toBe(1);
    await shard.settle({
      queueId: QUEUE,
      acks: got.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(await segmentCount(shard)).toBe(0);
    expect((await shard.stats()).backlogCount).toBe(0);
  });

  it("splits a batch over the segment size, keeps a 128 KB message whole, and keeps the ids in the batch's order", async () => {
    const shard = await shardAt("seg-split");
    const big = new Uint8Array(128 * 1024).fill(7);
    const messages = Array.from({ length: Math.ceil((2 * SEGMENT_MAX_BYTES) / big.byteLength) + 1 }, () => fresh(big));
    const r = await shard.append({ queueId: QUEUE, messages });
    if (!r.ok) throw new Error("refused");
    expect(await segmentCount(shard)).toBeGreaterThanOrEqual(3);
    const got = (await shard.lease(leaseAll())).messages;
    expect(got.map((m) => m.id)).toEqual(r.ids);
    expect(got.every((m) => m.body.byteLength === big.byteLength && m.body[100] === 7)).toBe(true);
  });

  it("rewrites a retried message with its new attempts and due time, settling its old slot in the same write", async () => {
    const shard = await shardAt("seg-retry");
    const r = await shard.append({ queueId: QUEUE, messages: [fresh("x"), fresh("y")] });
    const [x, y] = (await shard.lease(leaseAll())).messages;
    await shard.settle({
      queueId: QUEUE,
      acks: [{ id: y!.id, leaseId: y!.leaseId }],
      retries: [{ id: x!.id, leaseId: x!.leaseId, delayMs: 0 }],
      deadLettered: [],
      dropped: [],
    });
    // The first segment is settled whole (x moved on, y acked) and deleted; x lives in a new one.
    expect(await segmentCount(shard)).toBe(1);
    const again = (await shard.lease(leaseAll())).messages;
    expect(again.map((m) => [m.id, m.attempts])).toEqual([[r.ok && r.ids[0], 2]]);
    // Its lease id still starts with the copy it is: where it was first written.
    expect(again[0]!.leaseId.split("-")[0]).toBe(x!.leaseId.split("-")[0]);
    // It keeps its arrival time, and is still the backlog's oldest message from its new segment.
    expect(again[0]!.enqueuedAt).toBe(x!.enqueuedAt);
    expect((await shard.stats()).oldestEnqueuedAt).toBe(x!.enqueuedAt);
    const later = x!.enqueuedAt + 10_000;
    await runInDurableObject(shard, (obj: StorageShard) => {
      obj.clock = new ManualClock(later);
    });
    await shard.append({ queueId: QUEUE, messages: [fresh("z")] });
    await shard.settle({
      queueId: QUEUE,
      acks: [{ id: again[0]!.id, leaseId: again[0]!.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    // Gone with its segment: the oldest is the next message, read again rather than remembered.
    expect((await shard.stats()).oldestEnqueuedAt).toBe(later);
    expect((await shard.stats()).backlogCount).toBe(1);
  });
});
