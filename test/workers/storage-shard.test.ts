import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { crc32 } from "../../src/kernel/checksum";
import { ManualClock } from "../../src/kernel/clock";
import type { EncodedMessage } from "../../src/kernel/protocol";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { decodeHeaders } from "../../storage-shard/segments/segment";
import { api, createQueue, peekShard, producer, queuePath, storedMessages } from "./helpers";

const utf8 = new TextEncoder();

function message(id: string, body: string, delayMs = 0): EncodedMessage {
  const bytes = utf8.encode(body);
  return { id: id.padStart(32, "0"), body: bytes, contentType: "text", delayMs, checksum: crc32(bytes) };
}

function shard(name: string) {
  return env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name));
}

async function activeShard(name: string, queueId = "q".padEnd(32, "0")) {
  const target = shard(name);
  await target.activate({ name, queueId, accountId: "local", region: "local" });
  return { target, queueId };
}

describe("storage shard", () => {
  it("stores each batch in one transaction with exact rows and counters", async () => {
    const { target, queueId } = await activeShard("rows");
    const clock = new ManualClock(1_000_000);
    await runInDurableObject(target, (obj: StorageShard) => {
      obj.clock = clock;
    });
    const batches = [
      [message("a1", "x"), message("a2", "yy", 5000)],
      [message("b1", "zzz")],
      Array.from({ length: 50 }, (_, i) => message(`c${i}`, "m".repeat(i + 1))),
    ];
    let expectedCount = 0;
    let expectedBytes = 0;
    for (const b of batches) {
      const r = await target.append({ queueId, messages: b });
      expect(r).toMatchObject({ ok: true, stored: b.length, duplicates: 0 });
      expectedCount += b.length;
      expectedBytes += b.reduce((n, m) => n + m.body.byteLength, 0);
      clock.advance(10);
    }
    const stats = await target.stats();
    expect(stats).toMatchObject({
      backlogCount: expectedCount,
      backlogBytes: expectedBytes,
      oldestEnqueuedAt: 1_000_000,
    });

    await runInDurableObject(target, (_obj: StorageShard, state) => {
      const rows = state.storage.sql
        .exec<{
          seg: number;
          enqueued_at: number;
          due_at: number | null;
          count: number;
          live: number;
          live_bytes: number;
          headers: string;
        }>("SELECT seg, enqueued_at, due_at, count, live, live_bytes, headers FROM segments ORDER BY seg")
        .toArray();
      // The delayed message of the first batch apart from the one ready at once; the third batch
      // goes into the open head the second opened (segment-writes.ts appendToHead): one row for both.
      expect(rows.map((r) => [r.count, r.due_at])).toEqual([
        [1, null],
        [1, 1_005_000],
        [51, null],
      ]);
      const a2 = decodeHeaders(rows[1]!.headers)[0]!;
      expect(a2).toMatchObject({
        id: "a2".padStart(32, "0"),
        size: 2,
        enqueuedAt: 1_000_000,
        dueAt: 1_005_000,
        attempts: 0,
        contentType: "text",
        indexed: true,
      });
      const sums = state.storage.sql
        .exec<{ n: number; b: number }>("SELECT SUM(live) AS n, SUM(live_bytes) AS b FROM segments")
        .one();
      expect(sums).toEqual({ n: expectedCount, b: expectedBytes });
    });
    const page = await peekShard(target, 1000);
    expect(page.corrupt).toEqual([]);
    expect(page.messages).toHaveLength(expectedCount);
  });

  it("drops a retried batch it already stored: same ids, stored once, counters unchanged", async () => {
    const { target, queueId } = await activeShard("dupes");
    const batch = [message("d1", "one"), message("d2", "two")];
    expect(await target.append({ queueId, messages: batch })).toMatchObject({ ok: true, stored: 2, duplicates: 0 });
    expect(
      await target.append({
        queueId,
        messages: [...batch, message("d3", "three"), message("d3", "three")],
        dedupe: true,
      }),
    ).toMatchObject({ ok: true, stored: 1, duplicates: 3 });
    expect(await target.stats()).toMatchObject({ backlogCount: 3, backlogBytes: 11 });
    // Without `dedupe` (a first try) nothing is looked up: ids are new by construction.
    expect(await target.append({ queueId, messages: [message("d4", "four")] })).toMatchObject({
      ok: true,
      stored: 1,
      duplicates: 0,
    });
  });

  it("refuses a batch whose body no longer matches its checksum, storing none of it", async () => {
    const { target, queueId } = await activeShard("corrupt-in");
    const bad = message("e2", "payload");
    bad.body = utf8.encode("pAyload");
    const r = await target.append({ queueId, messages: [message("e1", "fine"), bad] });
    expect(r).toMatchObject({ ok: false, refused: "corrupt" });
    expect((await target.stats()).backlogCount).toBe(0);
  });

  it("detects a stored body that was corrupted at rest and never returns it", async () => {
    const { target, queueId } = await activeShard("corrupt-at-rest");
    await target.append({ queueId, messages: [message("f1", "keep"), message("f2", "flip")] });
    await runInDurableObject(target, (_obj: StorageShard, state) => {
      // The second body of the segment's packed bodies ("keep" + "flip"): one byte of it flipped.
      state.storage.sql.exec("UPDATE segments SET bodies = ?", utf8.encode("keepflop").buffer);
    });
    const page = await peekShard(target, 10);
    expect(page.messages.map((m) => m.id)).toEqual(["f1".padStart(32, "0")]);
    expect(page.corrupt).toEqual(["f2".padStart(32, "0")]);
  });

  it("refuses sends while unknown, for another queue, draining or retired, storing nothing", async () => {
    const unknown = shard("never-activated");
    expect(await unknown.append({ queueId: "x", messages: [message("g1", "x")] })).toEqual({
      ok: false,
      refused: "unknown_shard",
    });
    const { target, queueId } = await activeShard("states");
    expect(await target.append({ queueId: "another".padEnd(32, "0"), messages: [message("g2", "x")] })).toEqual({
      ok: false,
      refused: "wrong_queue",
    });
    await target.setState("draining");
    expect(await target.append({ queueId, messages: [message("g3", "x")] })).toEqual({
      ok: false,
      refused: "draining",
    });
    await target.setState("retired");
    expect(await target.append({ queueId, messages: [message("g4", "x")] })).toEqual({ ok: false, refused: "retired" });
    expect((await target.stats()).backlogCount).toBe(0);
  });

  it("keeps messages, counters and state across a restart of the object", async () => {
    const { target, queueId } = await activeShard("restart");
    await target.append({ queueId, messages: [message("h1", "abc"), message("h2", "de")] });
    await target.setState("draining");
    // A fresh instance reads everything back from SQLite in its constructor.
    await runInDurableObject(target, async (_obj: StorageShard, state) => {
      const Fresh = (await import("../../storage-shard/storage-shard")).StorageShard;
      const again = new Fresh(state, env);
      expect(again.stats()).toMatchObject({ backlogCount: 2, backlogBytes: 5 });
      expect(again.append({ queueId, messages: [message("h3", "x")] })).toEqual({ ok: false, refused: "draining" });
    });
  });
});

describe("counters through the whole write path", () => {
  it("match the stored rows on every shard after mixed HTTP and binding batches of every content type", async () => {
    const q = await createQueue("mixed-counters");
    const p = producer("mixed-counters");
    let sent = 0;
    for (let round = 0; round < 5; round++) {
      await p.send({ round }, { contentType: "json" });
      await p.send(`text ${round}`, { contentType: "text" });
      await p.send(new Uint8Array(round + 1), { contentType: "bytes" });
      await p.send(new Map([[round, new Date(round)]]), { contentType: "v8" });
      await p.sendBatch(Array.from({ length: 7 }, (_, i) => ({ body: "b".repeat(i), contentType: "text" as const })));
      await api("POST", `${queuePath("mixed-counters")}/messages/batch`, {
        messages: Array.from({ length: 13 }, (_, i) => ({ body: { i } })),
      });
      await api("POST", `${queuePath("mixed-counters")}/messages`, {
        body: "single",
        content_type: "text",
        delay_seconds: round,
      });
      sent += 4 + 7 + 13 + 1;
    }
    const { messages, map } = await storedMessages("mixed-counters");
    expect(messages).toHaveLength(sent);
    let total = 0;
    for (const s of map.shards) {
      const rows = messages.filter((m) => m.shard === s.name);
      const stats = await env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(s.name)).stats();
      expect(stats.backlogCount).toBe(rows.length);
      expect(stats.backlogBytes).toBe(rows.reduce((n, m) => n + m.size, 0));
      expect(stats.oldestEnqueuedAt).toBe(rows.length ? Math.min(...rows.map((m) => m.enqueuedAt)) : null);
      total += stats.backlogCount;
    }
    expect(total).toBe(sent);
    expect((await api("GET", `${queuePath(q.queue_id)}/metrics`)).json.result.backlog_count).toBe(sent);
  });
});

describe("schema version 11: segments", () => {
  it("converts the one-row-per-message table: every message kept once, ready, delayed and leased alike", async () => {
    const { target, queueId } = await activeShard("migrate-v3");
    await runInDurableObject(target, async (_obj: StorageShard, state) => {
      const sql = state.storage.sql;
      const { MIGRATIONS } = await import("../../storage-shard/schema");
      const { runMigrations } = await import("../../src/kernel/sqlite-migrations");
      // Back to version 3, as a shard written long ago has it, then every step since.
      const meta = sql.exec("SELECT key, value FROM meta").toArray();
      for (const t of [
        "segments",
        "message_ids",
        "legacy_rows",
        "remembered_ids",
        "remembered_moves",
        "counters",
        "meta",
        "quarantine",
        "epoch",
        "bridges",
        "registrations",
        "releases",
        "schema_version",
      ])
        sql.exec(`DROP TABLE ${t}`);
      runMigrations(sql, MIGRATIONS.slice(0, 3));
      for (const m of meta) sql.exec("INSERT INTO meta (key, value) VALUES (?, ?)", m.key, m.value);
      const row = (id: string, body: string, visibleAt: number, leaseId: string | null, attempts: number) => {
        const b = utf8.encode(body);
        sql.exec(
          "INSERT INTO messages (id, body, content_type, size, enqueued_at, visible_at, attempts, lease_id, checksum) VALUES (?, ?, 'text', ?, 1000, ?, ?, ?, ?)",
          id.padStart(32, "0"),
          b.buffer,
          b.byteLength,
          visibleAt,
          attempts,
          leaseId,
          crc32(b),
        );
      };
      row("m1", "fresh", 1000, null, 0);
      row("m2", "delayed", 9000, null, 0);
      row("m3", "leased", 31_000, "abc", 1);
      sql.exec("UPDATE counters SET acked = 7");
      runMigrations(sql, MIGRATIONS);
      expect(sql.exec("SELECT name FROM sqlite_master WHERE name = 'messages'").toArray()).toEqual([]);
      const rows = sql
        .exec<{ due_at: number | null; headers: string }>("SELECT due_at, headers FROM segments ORDER BY seg")
        .toArray();
      // The ready message in a segment the cursor reads; the delayed one and the one under a stored lease due when their rows were.
      expect(
        rows.map((r) => [
          r.due_at,
          decodeHeaders(r.headers).map((h) => [h.id.replace(/^0+/, ""), h.dueAt, h.attempts, h.copy, h.indexed]),
        ]),
      ).toEqual([
        [null, [["m1", 0, 0, "1.0", true]]],
        [
          9000,
          [
            ["m2", 9000, 0, "2.0", true],
            ["m3", 31_000, 1, "3.0", true],
          ],
        ],
      ]);
      expect(sql.exec("SELECT COUNT(*) AS n FROM message_ids").one().n).toBe(3);
      const Fresh = (await import("../../storage-shard/storage-shard")).StorageShard;
      const again = new Fresh(state, env);
      const clock = new ManualClock(10_000);
      again.clock = clock;
      expect(again.stats()).toMatchObject({ backlogCount: 3, backlogBytes: 18, totals: { acked: 7 } });
      // Found by id (the index: these ids do not say where they live now).
      expect(again.findMessage(queueId, "m2".padStart(32, "0"))).toMatchObject({ state: "ready", attempts: 0 });
      expect(again.findMessage(queueId, "m3".padStart(32, "0"))).toMatchObject({
        state: "delayed",
        visibleAt: 31_000,
        attempts: 1,
      });
      // Lease ids of the old schema: m1's memory lease (any: its row was never scheduled) still acks it; a made-up one on m2 does not.
      const settled = again.settle({
        queueId,
        acks: [
          { id: "m1".padStart(32, "0"), leaseId: "1-abcdef" },
          { id: "m2".padStart(32, "0"), leaseId: "2-abcdef" },
        ],
        retries: [],
        deadLettered: [],
        dropped: [],
      });
      expect(settled).toMatchObject({ acked: 1, stale: ["m2".padStart(32, "0")] });
      const lease = { queueId, limit: 10, maxWaitMs: 0, leaseMs: 30_000, retentionMs: 1e12 };
      expect(again.lease(lease).messages.map((m) => [m.id.replace(/^0+/, ""), m.attempts])).toEqual([["m2", 1]]);
      // The lease taken before the upgrade is over: its message comes back when it would have run out.
      clock.set(31_000);
      expect(again.lease(lease).messages.map((m) => [m.id.replace(/^0+/, ""), m.attempts])).toEqual([["m3", 2]]);
    });
  });
});
