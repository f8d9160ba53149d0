/**
 * Keyed messages in segments (docs/ordered-lanes.md): a keyed batch costs what a keyless one
 * does plus one row a lease, the scan never stalls on a held key (it leaves the key's messages
 * behind and its next lease reads them from there, in order), and a shard that kept keyed
 * messages in the ordered lanes of an earlier schema converts them with their order, their
 * leases and the lease ids consumers hold.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { shardOnClock } from "./helpers";
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage, LeaseRequest, LeasedMessage } from "../../src/kernel/protocol";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { convertLanesToSegments } from "../../storage-shard/keyed/keyed-upgrade";

const QUEUE = "k".padEnd(32, "0");
const utf8 = new TextEncoder();
const text = (m: LeasedMessage) => new TextDecoder().decode(m.body);

function keyed(body: string, key: string, delayMs = 0): EncodedMessage {
  const bytes = utf8.encode(body);
  return { body: bytes, contentType: "text", delayMs, checksum: crc32(bytes), orderingKey: key };
}

const shardAt = (name: string, t = 1_000_000) => shardOnClock(name, QUEUE, t);

const req = (over: Partial<LeaseRequest> = {}): LeaseRequest => ({
  queueId: QUEUE,
  limit: 100,
  leaseMs: 30_000,
  maxWaitMs: 0,
  retentionMs: 345_600_000,
  ...over,
});
const acks = (ms: LeasedMessage[]) => ({
  queueId: QUEUE,
  acks: ms.map((m) => ({ id: m.id, leaseId: m.leaseId })),
  retries: [],
  deadLettered: [],
  dropped: [],
});

describe("keyed messages in segments", () => {
  it("writes a batch of 100 keyed messages, leases and acks it in a handful of rows, not rows per message", async () => {
    const { shard } = await shardAt("keyed-rows");
    const before = (await shard.stats()).cost.rowsWritten;
    await shard.append({ queueId: QUEUE, messages: Array.from({ length: 100 }, (_, i) => keyed(`m${i}`, `k${i}`)) });
    const got = (await shard.lease(req())).messages;
    expect(got).toHaveLength(100);
    expect(got.every((m, i) => m.orderingKey === `k${i}`)).toBe(true);
    await shard.settle(acks(got));
    const written = (await shard.stats()).cost.rowsWritten - before;
    // The segment's insert and delete, the lease's row and its delete: far under 0.2 a message.
    expect(written).toBeLessThanOrEqual(10);
    expect((await shard.stats()).backlogCount).toBe(0);
  });

  it("counts its keys with messages the same before and after a restart, none of them leased or read yet", async () => {
    const { shard } = await shardAt("keyed-figures-restart");
    await shard.append({
      queueId: QUEUE,
      messages: Array.from({ length: 30 }, (_, i) => keyed(`m${i}`, `k${i % 10}`)),
    });
    expect((await shard.stats()).ordering?.lanes).toBe(10);
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("restart")).catch(() => {});
    const after = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("keyed-figures-restart"));
    expect((await after.stats()).ordering?.lanes).toBe(10);
  });

  it("passes a held key's messages and leases them in order once the key is let go", async () => {
    const { shard } = await shardAt("keyed-park");
    // Three batches, the hot key's messages among other keys'.
    for (let b = 0; b < 3; b++) {
      await shard.append({
        queueId: QUEUE,
        messages: [keyed(`hot${b * 2}`, "hot"), keyed(`o${b}`, `other${b}`), keyed(`hot${b * 2 + 1}`, "hot")],
      });
    }
    const first = (await shard.lease(req({ limit: 1 }))).messages;
    expect(first.map(text)).toEqual(["hot0"]);
    // The hot key is held: the scan passes its messages and takes every other key's.
    const others = (await shard.lease(req())).messages;
    expect(others.map(text)).toEqual(["o0", "o1", "o2"]);
    expect((await shard.lease(req())).messages).toEqual([]);
    await shard.settle(acks(first));
    // Let go: its next lease reads the hot key's messages from where the scan left them, in order.
    const rest = (await shard.lease(req())).messages;
    expect(rest.map(text)).toEqual(["hot1", "hot2", "hot3", "hot4", "hot5"]);
  });

  it("holds a key behind a delayed message until it is due, and delivers what came before it", async () => {
    const { shard, clock } = await shardAt("keyed-delay");
    await shard.append({ queueId: QUEUE, messages: [keyed("a1", "a"), keyed("a2", "a", 10_000), keyed("a3", "a")] });
    const now = (await shard.lease(req())).messages;
    expect(now.map(text)).toEqual(["a1"]);
    await shard.settle(acks(now));
    expect((await shard.lease(req())).messages).toEqual([]);
    clock.advance(10_000);
    expect((await shard.lease(req())).messages.map(text)).toEqual(["a2", "a3"]);
  });

  it("keeps a retried message at its key's head: the key waits for its delay, then it and those behind it come in order", async () => {
    const { shard, clock } = await shardAt("keyed-retry");
    await shard.append({ queueId: QUEUE, messages: [keyed("r1", "r"), keyed("r2", "r"), keyed("x1", "x")] });
    const [r1, r2, x1] = (await shard.lease(req())).messages;
    expect([r1, r2, x1].map((m) => text(m!))).toEqual(["r1", "r2", "x1"]);
    await shard.settle({
      queueId: QUEUE,
      acks: [{ id: x1!.id, leaseId: x1!.leaseId }],
      retries: [
        { id: r1!.id, leaseId: r1!.leaseId, delayMs: 5000 },
        { id: r2!.id, leaseId: r2!.leaseId, delayMs: 0 },
      ],
      deadLettered: [],
      dropped: [],
    });
    await shard.append({ queueId: QUEUE, messages: [keyed("r3", "r"), keyed("x2", "x")] });
    expect((await shard.lease(req())).messages.map(text)).toEqual(["x2"]);
    clock.advance(5000);
    const again = (await shard.lease(req())).messages;
    expect(again.map((m) => [text(m), m.attempts])).toEqual([
      ["r1", 2],
      ["r2", 2],
      ["r3", 1],
    ]);
  });

  it("converts ordered lanes of the earlier schema: order, a running lease and its lease ids kept", async () => {
    const { shard } = await shardAt("keyed-upgrade", Date.now());
    const leaseUntil = Date.now() + 600_000;
    await runInDurableObject(shard, (_o: StorageShard, state) => {
      const sql = state.storage.sql;
      // The lane tables as schema version 16 left them (lanes-schema.ts, handoff-schema.ts).
      sql.exec(`CREATE TABLE lane_messages (lseq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, id TEXT NOT NULL, content_type TEXT NOT NULL, checksum INTEGER NOT NULL,
        enqueued_at INTEGER NOT NULL, due_at INTEGER NOT NULL, attempts INTEGER NOT NULL, sent_at INTEGER NOT NULL, leased INTEGER NOT NULL DEFAULT 0, batch TEXT, gen INTEGER NOT NULL DEFAULT 0, body BLOB NOT NULL)`);
      sql.exec(
        "CREATE TABLE lanes (key TEXT PRIMARY KEY, ready_at INTEGER, lease TEXT, lease_until INTEGER, last_lease TEXT, reason TEXT, blocker TEXT, held_since INTEGER, upto INTEGER) WITHOUT ROWID",
      );
      sql.exec("CREATE TABLE lane_ids (id TEXT NOT NULL, lseq INTEGER NOT NULL, PRIMARY KEY (id, lseq)) WITHOUT ROWID");
      const row = (lseq: number, key: string, body: string, leased = 0, dueAt = 0, attempts = 0) => {
        const b = utf8.encode(body);
        sql.exec(
          "INSERT INTO lane_messages (lseq, key, id, content_type, checksum, enqueued_at, due_at, attempts, sent_at, leased, gen, body) VALUES (?, ?, ?, 'text', ?, ?, ?, ?, 0, ?, 0, ?)",
          lseq,
          key,
          `id-${body}`,
          crc32(b),
          Date.now() - 1000,
          dueAt,
          attempts,
          leased,
          b,
        );
      };
      row(11, "a", "a1", 1);
      row(12, "b", "b1");
      row(13, "a", "a2");
      row(14, "c", "c1", 0, Date.now() + 600_000, 1);
      row(15, "c", "c2");
      sql.exec(
        "INSERT INTO lanes (key, ready_at, lease, lease_until, reason, upto) VALUES ('a', NULL, 'abc123', ?, 'leased', 11), ('b', 0, NULL, NULL, NULL, NULL), ('c', ?, NULL, NULL, 'retry', NULL)",
        leaseUntil,
        Date.now() + 600_000,
      );
      convertLanesToSegments(sql);
      expect(
        sql.exec("SELECT name FROM sqlite_master WHERE name IN ('lane_messages', 'lanes', 'lane_ids')").toArray(),
      ).toEqual([]);
    });
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("restart after the upgrade")).catch(
      () => {},
    );
    const after = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("keyed-upgrade"));
    const live = req({ retentionMs: 1e15 });
    // a is leased (a1 under lease abc123), c waits on its retry: only b1 is deliverable.
    expect((await after.lease(live)).messages.map(text)).toEqual(["b1"]);
    // The consumer's ack under the lane lease id from before the upgrade lands, and lets a go on.
    expect(
      await after.settle({
        queueId: QUEUE,
        acks: [{ id: "id-a1", leaseId: "L11-abc123" }],
        retries: [],
        deadLettered: [],
        dropped: [],
      }),
    ).toMatchObject({ acked: 1 });
    expect((await after.lease(live)).messages.map(text)).toEqual(["a2"]);
    expect(await after.findMessage(QUEUE, "id-c2")).toMatchObject({ state: expect.stringMatching(/ready|delayed/) });
  });
});
