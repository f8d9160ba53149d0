import { env, runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import { readSeries, recordPoint, SERIES_SPAN_MS, SERIES_STEP_MS } from "../../coordinator/time-series";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage } from "../../src/kernel/protocol";
import type { ShardHeartbeat } from "../../src/kernel/heartbeat";
import { DeliveryState } from "../../storage-shard/segments/delivery-state";
import { peekReady } from "../../storage-shard/segments/segment-operations";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { api, BASE, createQueue, OTHER_TOKEN, producer, queuePath } from "./helpers";

const beat = (over: Partial<ShardHeartbeat>): ShardHeartbeat => ({
  name: "s",
  state: "active",
  backlog_count: 0,
  backlog_bytes: 0,
  oldest_at: null,
  messages_in: 0,
  messages_out: 0,
  refusals: 0,
  leased_now: 0,
  period_ms: 5000,
  received_at: 0,
  totals: {} as ShardHeartbeat["totals"],
  cost: { rpcs: 0, rowsWritten: 0 },
  sleeping: false,
  healthy: true,
  ...over,
});

describe("a queue's last hour", () => {
  it("keeps a point a step from the shards' reports, sums healthy shards' rates, and forgets what is older than an hour", async () => {
    const q = await createQueue("series-unit");
    await runInDurableObject(coordinatorFor(env, q.queue_id), (_: Coordinator, state) => {
      const sql = state.storage.sql;
      const t0 = 1_000_000_000_000;
      const beats = [
        beat({ name: "a", backlog_count: 10, backlog_bytes: 100, messages_in: 50, messages_out: 25 }),
        beat({ name: "b", backlog_count: 5, backlog_bytes: 50, messages_in: 500, healthy: false }),
      ];
      expect(recordPoint(sql, t0, beats, 4, 2)).toBe(true);
      // Within a step of the last point: nothing new.
      expect(recordPoint(sql, t0 + SERIES_STEP_MS - 1, beats, 4, 2)).toBe(false);
      expect(readSeries(sql, t0)).toEqual([
        // Backlog counts every shard; rates only the healthy one's report (50 and 25 per 5 s).
        {
          at_ms: t0,
          backlog_count: 15,
          backlog_bytes: 150,
          messages_in_per_second: 10,
          messages_out_per_second: 5,
          active_shards: 4,
          consumer_shards_running: 2,
        },
      ]);
      expect(recordPoint(sql, t0 + SERIES_SPAN_MS + SERIES_STEP_MS, beats, 5, 0)).toBe(true);
      const kept = readSeries(sql, t0 + SERIES_SPAN_MS + SERIES_STEP_MS);
      expect(kept.map((p) => p.at_ms)).toEqual([t0 + SERIES_SPAN_MS + SERIES_STEP_MS]);
    });
  });

  it("serves the Coordinator's points at GET .../series after its control loop runs", async () => {
    const q = await createQueue("series-api");
    await producer("series-api").sendBatch([{ body: 1 }, { body: 2 }, { body: 3 }]);
    await runDurableObjectAlarm(coordinatorFor(env, q.queue_id));
    const res = await api("GET", `${queuePath("series-api")}/series`);
    expect(res.status).toBe(200);
    expect(res.json.result.step_ms).toBe(SERIES_STEP_MS);
    expect(res.json.result.points.length).toBeGreaterThanOrEqual(1);
    expect(res.json.result.points.at(-1)).toMatchObject({ active_shards: 4 });
    expect(
      (await api("GET", `${queuePath("series-api", "other")}/series`, undefined, { token: OTHER_TOKEN })).status,
    ).toBe(404);
    expect((await api("POST", `${queuePath("series-api")}/series`, {})).status).toBe(405);
  });
});

describe("peeking at ready messages", () => {
  it("shows ready messages oldest first with their bodies, skipping leased and delayed ones, and leases nothing", async () => {
    await createQueue("peek");
    await api("POST", `${queuePath("peek")}/consumers`, { type: "http_pull" });
    const q = producer("peek");
    const first = (await q.send("first", { contentType: "text" })).messageId;
    await q.send({ later: true }, { delaySeconds: 60 });
    const pulled = await api("POST", `${queuePath("peek")}/messages/pull`, {
      batch_size: 1,
      visibility_timeout_ms: 60_000,
    });
    expect(pulled.json.result.messages.map((m: { id: string }) => m.id)).toEqual([first]);
    const second = (await q.send("second", { contentType: "text" })).messageId;
    const third = (await q.send({ n: 3 })).messageId;

    const peek = await api("GET", `${queuePath("peek")}/messages?limit=10`);
    expect(peek.status).toBe(200);
    expect(peek.json.result.incomplete).toBe(false);
    const messages = peek.json.result.messages as Array<{
      id: string;
      body: string;
      content_type: string;
      attempts: number;
    }>;
    expect(messages.map((m) => m.id)).toEqual([second, third]);
    expect(messages[0]).toMatchObject({ body: "second", content_type: "text", attempts: 0 });
    expect(messages[1]!.content_type).toBe("json");
    // Nothing was leased by looking: a pull still gets both.
    const after = await api("POST", `${queuePath("peek")}/messages/pull`, { batch_size: 10 });
    expect(after.json.result.messages.map((m: { id: string }) => m.id).sort()).toEqual([second, third].sort());
  });

  it("reads the bodies of the messages it shows, not those of every row it looks at", async () => {
    // The large-backlog run (test/faults/backlog.mjs): a peek of 10 over bodies up to 128 KB
    // was as slow as one of 100, each shard reading the bodies of the 1,000 rows it scans.
    const q = await createQueue("peek-bodies");
    const shard = (await coordinatorFor(env, q.queue_id).shardMap())!.shards[0]!.name;
    const body = new TextEncoder().encode(JSON.stringify("x".repeat(20_000)));
    const messages: EncodedMessage[] = Array.from({ length: 50 }, (_, i) => ({
      id: (0xbee00000 + i).toString(16).padStart(32, "0"),
      body,
      contentType: "json",
      delayMs: 0,
      checksum: crc32(body),
    }));
    expect(await storageShardFor(env, shard).append({ queueId: q.queue_id, messages })).toMatchObject({
      ok: true,
      stored: 50,
    });
    await runInDurableObject(storageShardFor(env, shard), (_: StorageShard, state) => {
      const read = { bodies: 0, bytes: 0 };
      const shown = peekReady(
        countingBlobs(state.storage.sql, read),
        new DeliveryState(state.storage.sql),
        Date.now(),
        2,
      );
      expect(shown.map((m) => m.id)).toEqual(messages.slice(0, 2).map((m) => m.id));
      expect(shown[1]!.body).toEqual(body);
      expect(read).toEqual({ bodies: 2, bytes: 2 * body.byteLength });
    });
  });

  it("refuses a limit that is not a whole number from 1 to 100, naming it, and hides other accounts' queues", async () => {
    await createQueue("peek-bad");
    for (const limit of ["0", "101", "abc", "1.5", "-1"]) {
      const res = await api("GET", `${queuePath("peek-bad")}/messages?limit=${limit}`);
      expect(res.status).toBe(400);
      expect(res.json.errors[0].field).toBe("limit");
    }
    expect(
      (await api("GET", `${queuePath("peek-bad", "other")}/messages`, undefined, { token: OTHER_TOKEN })).status,
    ).toBe(404);
    expect((await api("GET", `${queuePath("peek-bad")}/messages`, undefined, { token: null })).status).toBe(401);
  });
});

/** The same SqlStorage, counting the message bodies (BLOB columns `body` and `bodies`) its statements hand back. */
function countingBlobs(sql: SqlStorage, read: { bodies: number; bytes: number }): SqlStorage {
  const count = <T>(row: T): T => {
    for (const [k, v] of Object.entries(row as object)) {
      if (v instanceof ArrayBuffer && (k === "body" || k === "bodies")) {
        read.bodies++;
        read.bytes += v.byteLength;
      }
    }
    return row;
  };
  return new Proxy(sql, {
    get(target, prop) {
      if (prop === "exec") {
        return (query: string, ...bindings: SqlStorageValue[]) => {
          const cursor = target.exec(query, ...bindings);
          return {
            toArray: () => cursor.toArray().map(count),
            one: () => count(cursor.one()),
            *[Symbol.iterator]() {
              for (const row of cursor) yield count(row);
            },
          };
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

describe("the dashboard's files", () => {
  it("redirects /dashboard to /dashboard/ and serves the page without a token, locked to its own origin", async () => {
    const redirect = await SELF.fetch(`${BASE}/dashboard`, { redirect: "manual" });
    expect(redirect.status).toBe(301);
    expect(redirect.headers.get("location")).toBe(`${BASE}/dashboard/`);
    const page = await SELF.fetch(`${BASE}/dashboard/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    expect(page.headers.get("content-security-policy")).toContain("connect-src 'self'");
    expect(await page.text()).toContain("<title>shardq dashboard</title>");
    const script = await SELF.fetch(`${BASE}/dashboard/app.js`);
    expect(script.headers.get("content-type")).toMatch(/javascript/);
    await script.arrayBuffer();
    const missing = await SELF.fetch(`${BASE}/dashboard/nope.js`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { success: boolean }).success).toBe(false);
    const post = await SELF.fetch(`${BASE}/dashboard/`, { method: "POST" });
    expect(post.status).toBe(405);
    await post.arrayBuffer();
  });
});
