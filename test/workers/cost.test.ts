import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage } from "../../src/kernel/protocol";

const QUEUE = "c".padEnd(32, "0");
const utf8 = new TextEncoder();
const msg = (i: number): EncodedMessage => {
  const body = utf8.encode(`message ${i}`);
  return { id: i.toString(16).padStart(32, "0"), body, contentType: "text", delayMs: 0, checksum: crc32(body) };
};

const fresh = (i: number): EncodedMessage => {
  const { id: _drawn, ...m } = msg(i);
  return m;
};

describe("cost figures a storage shard keeps", () => {
  it("counts the RPCs it serves and the SQLite rows it writes and reads, index entries included", async () => {
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("cost"));
    await shard.activate({ name: "cost", queueId: QUEUE, accountId: "local", region: "local" });
    const before = (await shard.stats()).cost;
    await shard.append({ queueId: QUEUE, messages: Array.from({ length: 100 }, (_, i) => fresh(i)) });
    const afterAppend = (await shard.stats()).cost;
    // Two RPCs (append, stats); the batch is one segment row, with no index entry (its ids
    // say where they live), and the running totals are written at most once a second.
    expect(afterAppend.rpcs - before.rpcs).toBe(2);
    expect(afterAppend.rowsWritten - before.rowsWritten).toBeLessThanOrEqual(1 + 1);

    const leased = await shard.lease({ queueId: QUEUE, limit: 100, leaseMs: 30_000, maxWaitMs: 0, retentionMs: 1e12 });
    expect(leased.messages).toHaveLength(100);
    await shard.settle({
      queueId: QUEUE,
      acks: leased.messages.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    const afterDelivery = (await shard.stats()).cost;
    // Stored (one insert), leased (in memory) and acked (one delete of the segment): two rows
    // for the hundred, plus at most one write of the running totals per call.
    expect(afterDelivery.rowsWritten - before.rowsWritten).toBeGreaterThanOrEqual(2);
    expect(afterDelivery.rowsWritten - before.rowsWritten).toBeLessThanOrEqual(2 + 3);
    expect(afterDelivery.rpcs - afterAppend.rpcs).toBe(3);
    expect(afterDelivery.rowsRead!).toBeGreaterThan(afterAppend.rowsRead!);
  });

  it("charges the index of ids a sender chose to the sends that choose them: one row each way", async () => {
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("cost-chosen"));
    await shard.activate({ name: "cost-chosen", queueId: QUEUE, accountId: "local", region: "local" });
    const before = (await shard.stats()).cost;
    await shard.append({ queueId: QUEUE, messages: Array.from({ length: 100 }, (_, i) => msg(i)) });
    const leased = await shard.lease({ queueId: QUEUE, limit: 100, leaseMs: 30_000, maxWaitMs: 0, retentionMs: 1e12 });
    await shard.settle({
      queueId: QUEUE,
      acks: leased.messages.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    const after = (await shard.stats()).cost;
    expect(after.rowsWritten - before.rowsWritten).toBeGreaterThanOrEqual(200 + 2);
    expect(after.rowsWritten - before.rowsWritten).toBeLessThanOrEqual(200 + 2 + 3);
  });
});
