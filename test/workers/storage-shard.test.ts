import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { crc32 } from "../../src/kernel/checksum";
import { ManualClock } from "../../src/kernel/clock";
import type { EncodedMessage } from "../../src/kernel/protocol";
import type { StorageShard } from "../../storage-shard/storage-shard";
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
    expect(stats).toMatchObject({ backlogCount: expectedCount, backlogBytes: expectedBytes, oldestEnqueuedAt: 1_000_000 });

    await runInDurableObject(target, (_obj: StorageShard, state) => {
      const rows = state.storage.sql
        .exec<{ id: string; size: number; enqueued_at: number; due_at: number | null; attempts: number; lease_id: string | null; content_type: string; checksum: number; body: ArrayBuffer }>(
          "SELECT * FROM messages ORDER BY seq",
        )
        .toArray();
      expect(rows).toHaveLength(expectedCount);
      const a2 = rows.find((r) => r.id.endsWith("a2"))!;
      // A delayed message is scheduled (due_at set, in the partial index); the others are fresh.
      expect(a2).toMatchObject({ size: 2, enqueued_at: 1_000_000, due_at: 1_005_000, attempts: 0, lease_id: null, content_type: "text" });
      expect(rows.filter((r) => r.due_at === null)).toHaveLength(expectedCount - 1);
      for (const r of rows) expect(crc32(new Uint8Array(r.body))).toBe(r.checksum);
      const sums = state.storage.sql.exec<{ n: number; b: number }>("SELECT COUNT(*) AS n, SUM(size) AS b FROM messages").one();
      expect(sums).toEqual({ n: expectedCount, b: expectedBytes });
    });
  });

  it("drops a retried batch it already stored: same ids, stored once, counters unchanged", async () => {
    const { target, queueId } = await activeShard("dupes");
    const batch = [message("d1", "one"), message("d2", "two")];
    expect(await target.append({ queueId, messages: batch })).toMatchObject({ ok: true, stored: 2, duplicates: 0 });
    expect(await target.append({ queueId, messages: [...batch, message("d3", "three"), message("d3", "three")], dedupe: true })).toMatchObject({ ok: true, stored: 1, duplicates: 3 });
    expect(await target.stats()).toMatchObject({ backlogCount: 3, backlogBytes: 11 });
    // Without `dedupe` (a first try) nothing is looked up: ids are new by construction.
    expect(await target.append({ queueId, messages: [message("d4", "four")] })).toMatchObject({ ok: true, stored: 1, duplicates: 0 });
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
      state.storage.sql.exec("UPDATE messages SET body = ? WHERE id = ?", utf8.encode("flop").buffer, "f2".padStart(32, "0"));
    });
    const page = await peekShard(target, 10);
    expect(page.messages.map((m) => m.id)).toEqual(["f1".padStart(32, "0")]);
    expect(page.corrupt).toEqual(["f2".padStart(32, "0")]);
  });

  it("refuses sends while unknown, for another queue, draining or retired, storing nothing", async () => {
    const unknown = shard("never-activated");
    expect(await unknown.append({ queueId: "x", messages: [message("g1", "x")] })).toEqual({ ok: false, refused: "unknown_shard" });
    const { target, queueId } = await activeShard("states");
    expect(await target.append({ queueId: "another".padEnd(32, "0"), messages: [message("g2", "x")] })).toEqual({ ok: false, refused: "wrong_queue" });
    await target.setState("draining");
    expect(await target.append({ queueId, messages: [message("g3", "x")] })).toEqual({ ok: false, refused: "draining" });
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
      await api("POST", `${queuePath("mixed-counters")}/messages/batch`, { messages: Array.from({ length: 13 }, (_, i) => ({ body: { i } })) });
      await api("POST", `${queuePath("mixed-counters")}/messages`, { body: "single", content_type: "text", delay_seconds: round });
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

describe("schema version 4", () => {
  it("moves a version 3 table over: fresh rows stay fresh, delayed and leased ones become scheduled, nothing is lost", async () => {
    const { target, queueId } = await activeShard("migrate-v3");
    await runInDurableObject(target, async (_obj: StorageShard, state) => {
      const sql = state.storage.sql;
      const { MIGRATIONS } = await import("../../storage-shard/schema");
      const { runMigrations } = await import("../../src/kernel/sqlite-migrations");
      // Back to version 3, as a shard written before this change has it.
      const meta = sql.exec("SELECT key, value FROM meta").toArray();
      for (const t of ["messages", "counters", "meta", "quarantine", "schema_version"]) sql.exec(`DROP TABLE ${t}`);
      runMigrations(sql, MIGRATIONS.slice(0, 3));
      for (const m of meta) sql.exec("INSERT INTO meta (key, value) VALUES (?, ?)", m.key, m.value);
      const row = (id: string, body: string, visibleAt: number, leaseId: string | null, attempts: number) => {
        const b = utf8.encode(body);
        sql.exec(
          "INSERT INTO messages (id, body, content_type, size, enqueued_at, visible_at, attempts, lease_id, checksum) VALUES (?, ?, 'text', ?, 1000, ?, ?, ?, ?)",
          id.padStart(32, "0"), b.buffer, b.byteLength, visibleAt, attempts, leaseId, crc32(b),
        );
      };
      row("m1", "fresh", 1000, null, 0);
      row("m2", "delayed", 9000, null, 0);
      row("m3", "leased", 31_000, "abc", 1);
      sql.exec("UPDATE counters SET acked = 7");
      runMigrations(sql, MIGRATIONS);
      const rows = sql.exec("SELECT id, due_at, attempts, lease_id FROM messages ORDER BY seq").toArray();
      expect(rows).toEqual([
        { id: "m1".padStart(32, "0"), due_at: null, attempts: 0, lease_id: null },
        { id: "m2".padStart(32, "0"), due_at: 9000, attempts: 0, lease_id: null },
        { id: "m3".padStart(32, "0"), due_at: 31_000, attempts: 1, lease_id: "abc" },
      ]);
      // Only partial indexes, which a fresh row (no due time, no lease) stays out of: inserting it writes one row.
      const indexes = sql.exec<{ name: string; sql: string }>("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages' ORDER BY name").toArray();
      expect(indexes.map((i) => i.name)).toEqual(["messages_due", "messages_leased"]);
      expect(indexes.map((i) => /WHERE (due_at|lease_id) IS NOT NULL/.test(i.sql))).toEqual([true, true]);
      const Fresh = (await import("../../storage-shard/storage-shard")).StorageShard;
      const again = new Fresh(state, env);
      expect(again.stats()).toMatchObject({ backlogCount: 3, backlogBytes: 18, totals: { acked: 7 } });
      // The stored lease is still good for its ack: seq 3, lease abc.
      expect(again.settle({ queueId, acks: [{ id: "m3".padStart(32, "0"), leaseId: "3-abc" }], retries: [], deadLettered: [], dropped: [] }).acked).toBe(1);
    });
  });
});
