import { SELF, env, runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { api, BASE, createQueue, OTHER_TOKEN, producer, queuePath, queuesPath, TOKEN } from "./helpers";
import { parseExposition, valueOf, type Family } from "./exposition";

async function scrape(token: string | null = TOKEN, opts: { method?: string; path?: string } = {}) {
  const headers: Record<string, string> = token === null ? {} : { authorization: `Bearer ${token}` };
  const res = await SELF.fetch(`${BASE}${opts.path ?? "/metrics"}`, { method: opts.method ?? "GET", headers });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** Scrapes and parses; the parser throws on anything that is not valid exposition text. */
async function metrics(token = TOKEN): Promise<Map<string, Family>> {
  const res = await scrape(token);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  return parseExposition(res.text);
}

/**
 * Every storage shard of the queue that changed since its last report reports now (counters
 * come from heartbeats); one that did not is asleep, its last report still true.
 */
async function heartbeatAll(queueId: string): Promise<void> {
  const map = (await coordinatorFor(env, queueId).shardMap())!;
  for (const s of map.shards) await runDurableObjectAlarm(storageShardFor(env, s.name));
}

const queuesIn = (m: Map<string, Family>) =>
  new Set(m.get("shardq_queue_backlog_messages")!.samples.map((s) => s.labels.queue));
const sendCount = (m: Map<string, Family>, labels: Record<string, string>) =>
  valueOf(m, "shardq_send_latency_seconds", labels, "shardq_send_latency_seconds_count");

const FAMILIES = [
  "shardq_queue_scrape_ok",
  "shardq_queue_backlog_messages",
  "shardq_queue_backlog_bytes",
  "shardq_queue_oldest_message_age_seconds",
  "shardq_leased_messages",
  "shardq_consumer_concurrency",
  "shardq_ordering_lanes",
  "shardq_ordering_held_keys",
  "shardq_ordering_oldest_held_seconds",
  "shardq_storage_shards",
  "shardq_messages_in_total",
  "shardq_messages_delivered_total",
  "shardq_messages_acked_total",
  "shardq_messages_retried_total",
  "shardq_messages_dead_lettered_total",
  "shardq_messages_dropped_total",
  "shardq_messages_expired_total",
  "shardq_messages_quarantined_total",
  "shardq_messages_purged_total",
  "shardq_messages_cancelled_total",
  "shardq_send_latency_seconds",
];

describe("GET /metrics (Prometheus)", () => {
  it("needs a valid bearer token and answers other methods with 405, both as JSON errors", async () => {
    for (const token of [null, "not-a-token"]) {
      const res = await scrape(token);
      expect(res.status).toBe(401);
      expect(JSON.parse(res.text)).toMatchObject({
        success: false,
        result: null,
        errors: [{ code: 10001, field: "authorization" }],
      });
    }
    const post = await scrape(TOKEN, { method: "POST" });
    expect(post.status).toBe(405);
    expect(JSON.parse(post.text).errors[0].message).toBe("POST is not allowed on /metrics; use GET");
    expect((await scrape(TOKEN, { path: "/metrics/" })).status).toBe(200);
    expect((await scrape(TOKEN, { path: "/metricsx" })).status).toBe(404);
  });

  it("shows the token's own account's queues and no other account's", async () => {
    await createQueue("prom-mine");
    expect((await api("POST", queuesPath("other"), { queue_name: "prom-theirs" }, { token: OTHER_TOKEN })).status).toBe(
      201,
    );
    await producer("prom-theirs", "other").send("secret");

    const mine = await scrape();
    expect(mine.status).toBe(200);
    expect(mine.text).not.toContain("prom-theirs");
    const m = parseExposition(mine.text);
    expect([...m.keys()]).toEqual(FAMILIES);
    expect(queuesIn(m).has("prom-mine")).toBe(true);

    const theirs = await metrics(OTHER_TOKEN);
    expect([...queuesIn(theirs)]).toEqual(["prom-theirs"]);
    expect(valueOf(theirs, "shardq_queue_scrape_ok", { queue: "prom-theirs" })).toBe(1);
    expect(sendCount(theirs, { queue: "prom-theirs" })).toBe(1);
  });

  it("counts messages in, deliveries, acks and retries, leases and shards, and the latency of every send", async () => {
    const q = await createQueue("prom-flow");
    const L = { queue: "prom-flow", queue_id: q.queue_id };
    expect(
      (
        await api("POST", `${queuePath("prom-flow")}/consumers`, {
          type: "http_pull",
          settings: { visibility_timeout_ms: 60_000 },
        })
      ).status,
    ).toBe(201);
    const before = await metrics();
    expect(valueOf(before, "shardq_queue_backlog_messages", L)).toBe(0);
    expect(sendCount(before, L)).toBe(0);

    // Five sends of ten messages, over both transports.
    for (const body of ["a", "b"])
      expect((await api("POST", `${queuePath("prom-flow")}/messages`, { body, content_type: "text" })).status).toBe(
        200,
      );
    const batch = { messages: ["cc", "dd", "ee"].map((body) => ({ body, content_type: "text" })) };
    expect((await api("POST", `${queuePath("prom-flow")}/messages/batch`, batch)).status).toBe(200);
    await producer("prom-flow").send("x");
    await producer("prom-flow").sendBatch([1, 2, 3, 4].map((body) => ({ body })));
    // A refused send stores nothing and is not a send.
    expect((await api("POST", `${queuePath("prom-flow")}/messages`, { body: "z", content_type: "nope" })).status).toBe(
      400,
    );

    await heartbeatAll(q.queue_id);
    let m = await metrics();
    const json = (await api("GET", `${queuePath("prom-flow")}/metrics`)).json.result;
    expect(valueOf(m, "shardq_queue_scrape_ok", L)).toBe(1);
    expect(valueOf(m, "shardq_queue_backlog_messages", L)).toBe(10);
    expect(valueOf(m, "shardq_queue_backlog_bytes", L)).toBe(json.backlog_bytes);
    expect(json.backlog_bytes).toBeGreaterThan(0);
    expect(valueOf(m, "shardq_queue_oldest_message_age_seconds", L)).toBeGreaterThanOrEqual(0);
    expect(valueOf(m, "shardq_messages_in_total", L)).toBe(10);
    expect(valueOf(m, "shardq_messages_delivered_total", L)).toBe(0);
    expect(valueOf(m, "shardq_messages_acked_total", L)).toBe(0);
    expect(valueOf(m, "shardq_leased_messages", L)).toBe(0);
    expect(valueOf(m, "shardq_consumer_concurrency", L)).toBe(0);
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    expect(valueOf(m, "shardq_storage_shards", { ...L, region: "local", state: "active" })).toBe(shards.length);
    expect(valueOf(m, "shardq_storage_shards", { ...L, region: "local", state: "draining" })).toBe(0);
    expect(valueOf(m, "shardq_storage_shards", { ...L, region: "local", state: "retired" })).toBe(0);
    expect(sendCount(m, L)).toBe(5);
    expect(valueOf(m, "shardq_send_latency_seconds", { ...L, le: "+Inf" }, "shardq_send_latency_seconds_bucket")).toBe(
      5,
    );
    expect(valueOf(m, "shardq_send_latency_seconds", L, "shardq_send_latency_seconds_sum")).toBeGreaterThanOrEqual(0);

    // Pull three: leased and delivered.
    const pulled = (await api("POST", `${queuePath("prom-flow")}/messages/pull`, { batch_size: 3 })).json.result
      .messages as Array<{ lease_id: string }>;
    expect(pulled).toHaveLength(3);
    await heartbeatAll(q.queue_id);
    m = await metrics();
    expect(valueOf(m, "shardq_leased_messages", L)).toBe(3);
    expect(valueOf(m, "shardq_messages_delivered_total", L)).toBe(3);
    expect(valueOf(m, "shardq_messages_acked_total", L)).toBe(0);

    // Ack two, retry one.
    const settled = await api("POST", `${queuePath("prom-flow")}/messages/ack`, {
      acks: pulled.slice(0, 2).map((p) => ({ lease_id: p.lease_id })),
      retries: [{ lease_id: pulled[2]!.lease_id }],
    });
    expect(settled.status).toBe(200);
    await heartbeatAll(q.queue_id);
    m = await metrics();
    expect(valueOf(m, "shardq_messages_acked_total", L)).toBe(2);
    expect(valueOf(m, "shardq_messages_retried_total", L)).toBe(1);
    expect(valueOf(m, "shardq_leased_messages", L)).toBe(0);
    expect(valueOf(m, "shardq_queue_backlog_messages", L)).toBe(8);
    expect(valueOf(m, "shardq_messages_in_total", L)).toBe(10);
    expect(valueOf(m, "shardq_messages_dead_lettered_total", L)).toBe(0);
    // Pulls and acks are not sends.
    expect(sendCount(m, L)).toBe(5);
  });

  it("counts every send of a burst, however many the broker coalesced into one write, once", async () => {
    const q = await createQueue("prom-burst");
    const L = { queue: "prom-burst", queue_id: q.queue_id };
    await Promise.all(Array.from({ length: 40 }, (_, i) => producer("prom-burst").send({ i })));
    const first = await metrics();
    expect(sendCount(first, L)).toBe(40);
    // A second scrape adds nothing: the counts were flushed once.
    expect(sendCount(await metrics(), L)).toBe(40);
    await api("POST", `${queuePath("prom-burst")}/messages`, { body: 1 });
    expect(sendCount(await metrics(), L)).toBe(41);
  });
});
