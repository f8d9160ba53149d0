/**
 * Pulling messages over HTTP (Cloudflare's pull consumers): the leased messages' shape, the
 * queue's figures, batch sizes, visibility timeouts, paused delivery, and the requests refused.
 * Acks, retries and lease extensions: pull-acks.test.ts.
 */
import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { router } from "../../broker/http/router";
import { coordinatorFor } from "../../src/kernel/addressing";
import { defaultConsumerSettings } from "../../src/kernel/consumer-settings";
import { ack, api, BASE, createQueue, producer, pull, queuePath, send, TOKEN } from "./helpers";
import { clockedPullQueue, ids, pullOne } from "./pull-helpers";

describe("pulling messages over HTTP", () => {
  it("leases messages in Cloudflare's shape: text raw, json and bytes base64, attempts from 1", async () => {
    const { clock } = await clockedPullQueue("pull-shape");
    const json = (await send("pull-shape", { order: 42, items: ["ü"] })).json.result.message_id;
    const text = (await send("pull-shape", "plain wörds", { content_type: "text" })).json.result.message_id;
    const bytes = (await producer("pull-shape").send(new Uint8Array([1, 2, 255]), { contentType: "bytes" })).messageId;

    const res = await pull("pull-shape", { batch_size: 10 });
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    expect(res.json.result.message_backlog_count).toBe(3);
    const byId = new Map<string, any>(res.json.result.messages.map((m: any) => [m.id, m]));
    expect(byId.size).toBe(3);
    expect(byId.get(text)).toMatchObject({
      body: "plain wörds",
      attempts: 1,
      timestamp_ms: clock.now(),
      metadata: { "CF-Content-Type": "text" },
    });
    const j = byId.get(json);
    expect(j).toMatchObject({ attempts: 1, metadata: { "CF-Content-Type": "json" } });
    expect(JSON.parse(new TextDecoder().decode(Uint8Array.from(atob(j.body), (c) => c.charCodeAt(0))))).toEqual({
      order: 42,
      items: ["ü"],
    });
    expect(byId.get(bytes)).toMatchObject({ body: "AQL/", metadata: { "CF-Content-Type": "bytes" } });
    for (const m of byId.values()) {
      expect(Object.keys(m).sort()).toEqual(["attempts", "body", "id", "lease_id", "metadata", "timestamp_ms"]);
      expect(m.lease_id).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    }
  });

  it("answers sends, batches and pulls with the queue's figures in metadata.metrics, as Cloudflare's REST API does", async () => {
    const { clock } = await clockedPullQueue("pull-metrics");
    const one = await send("pull-metrics", "12345", { content_type: "text" });
    // Under shardq's first spelling and under Cloudflare's current one (its SDK's types).
    const figures = (count: number, bytes: number, oldest: number) => ({
      metrics: {
        backlogCount: count,
        backlogBytes: bytes,
        oldestMessageTimestampMs: oldest,
        backlog_count: count,
        backlog_bytes: bytes,
        oldest_message_timestamp_ms: oldest,
      },
    });
    expect(one.json.result).toEqual({ message_id: expect.any(String), metadata: figures(1, 5, clock.now()) });
    const batch = await api("POST", `${queuePath("pull-metrics")}/messages/batch`, {
      messages: [{ body: "ab", content_type: "text" }],
    });
    expect(batch.json.result.metadata.metrics).toMatchObject({
      backlogCount: expect.any(Number),
      backlogBytes: expect.any(Number),
    });
    expect(batch.json.result.message_ids).toHaveLength(1);
    // A pull visits every shard it leases from: exact figures, leased messages still in the backlog.
    const pulled = await pull("pull-metrics", { batch_size: 10 });
    expect(pulled.json.result.metadata).toEqual(figures(2, 7, clock.now()));
    expect(pulled.json.result.message_backlog_count).toBe(2);
  });

  it("fills a batch from every shard, up to batch_size, and defaults to 5", async () => {
    await clockedPullQueue("pull-sizes");
    const sent: string[] = [];
    for (let i = 0; i < 12; i++) sent.push((await send("pull-sizes", i)).json.result.message_id);
    const first = await pull("pull-sizes", undefined);
    const second = await pull("pull-sizes", { batch_size: 100 });
    const third = await pull("pull-sizes", { batch_size: 100 });
    expect(first.json.result.messages).toHaveLength(5);
    expect(second.json.result.messages).toHaveLength(7);
    expect(third.json.result.messages).toHaveLength(0);
    expect([...ids(first), ...ids(second)].sort()).toEqual([...sent].sort());
    // Leased messages are still unacknowledged: they stay in the backlog.
    expect(third.json.result.message_backlog_count).toBe(12);
  });

  it("keeps a pulled message invisible until its visibility timeout passes, then leases it again with attempts 2", async () => {
    const { clock } = await clockedPullQueue("pull-visibility");
    const id = (await send("pull-visibility", "once")).json.result.message_id;
    const first = await pullOne("pull-visibility");
    expect(first).toMatchObject({ id, attempts: 1 });
    clock.advance(999);
    expect((await pull("pull-visibility")).json.result.messages).toEqual([]);
    clock.advance(1);
    const again = await pullOne("pull-visibility");
    expect(again).toMatchObject({ id, attempts: 2 });
    expect(again.lease_id).not.toBe(first.lease_id);
  });

  it("uses the pull's own visibility_timeout_ms over the consumer's", async () => {
    const { clock } = await clockedPullQueue("pull-own-timeout");
    await send("pull-own-timeout", 1);
    expect((await pull("pull-own-timeout", { visibility_timeout_ms: 60_000 })).json.result.messages).toHaveLength(1);
    clock.advance(59_999);
    expect((await pull("pull-own-timeout")).json.result.messages).toHaveLength(0);
    clock.advance(1);
    expect((await pull("pull-own-timeout")).json.result.messages).toHaveLength(1);
  });

  it("answers 409 while delivery is paused, and leases again once resumed", async () => {
    await clockedPullQueue("pull-paused");
    await send("pull-paused", 1);
    await api("PATCH", queuePath("pull-paused"), { settings: { delivery_paused: true } });
    const res = await pull("pull-paused");
    expect(res.status).toBe(409);
    expect(res.json.success).toBe(false);
    expect(res.json.errors[0].message).toContain("paused");
    await api("PATCH", queuePath("pull-paused"), { settings: { delivery_paused: false } });
    expect((await pull("pull-paused")).json.result.messages).toHaveLength(1);
  });

  it("answers 409 on a queue whose consumer is not http_pull, or that has none", async () => {
    await createQueue("pull-no-consumer");
    for (const res of [await pull("pull-no-consumer"), await ack("pull-no-consumer", { acks: [] })]) {
      expect(res.status).toBe(409);
      expect(res.json.errors[0].message).toMatch(/no consumer.*needs an http_pull consumer/);
    }
    // Paused, so the consumer shards never try to reach this Worker, which does not exist.
    const q = await createQueue("pull-worker-consumer", { delivery_paused: true });
    await coordinatorFor(env, q.queue_id).addConsumer({
      type: "worker",
      script_name: "some-worker",
      settings: defaultConsumerSettings("rpc"),
      dead_letter_queue: null,
    });
    const res = await pull("pull-worker-consumer");
    expect(res.status).toBe(409);
    expect(res.json.errors[0].message).toMatch(/worker consumer.*needs an http_pull consumer/);
  });

  it("answers 404 for a queue that does not exist and 405 for the wrong method", async () => {
    expect((await pull("pull-nowhere")).status).toBe(404);
    const wrong = await api("GET", `${queuePath("pull-nowhere")}/messages/pull`);
    expect(wrong.status).toBe(405);
    expect(wrong.json.errors[0].message).toContain("POST");
  });
});

describe("refusing bad requests", () => {
  const many = (n: number) => Array.from({ length: n }, () => ({ lease_id: "x" }));
  it.each(
    (
      [
        ["pull", { batch_size: 0 }, "batch_size", "at least 1"],
        ["pull", { batch_size: 101 }, "batch_size", "at most 100"],
        ["pull", { batch_size: 1.5 }, "batch_size", "whole number"],
        ["pull", { batch_size: "5" }, "batch_size", "must be a number"],
        ["pull", { visibility_timeout_ms: 999 }, "visibility_timeout_ms", "at least 1000"],
        ["pull", { visibility_timeout_ms: 43_200_001 }, "visibility_timeout_ms", "at most 43200000"],
        ["pull", { batch_size: 5, wait: true }, "wait", "not a known field"],
        ["pull", [1], "body", ""],
        ["ack", { acks: "all" }, "acks", "must be an array"],
        ["ack", { acks: [{}] }, "acks[0].lease_id", "is required"],
        [
          "ack",
          { acks: [{ lease_id: "a" }, { lease_id: "b" }, { lease_id: 7 }] },
          "acks[2].lease_id",
          "must be a string",
        ],
        ["ack", { acks: [{ lease_id: "" }] }, "acks[0].lease_id", "must not be empty"],
        ["ack", { acks: [{ lease_id: "a", delay_seconds: 1 }] }, "acks[0].delay_seconds", "not a known field"],
        ["ack", { acks: many(101) }, "acks", "at most 100"],
        ["ack", { retries: [{ lease_id: "a", delay_seconds: -1 }] }, "retries[0].delay_seconds", "at least 0"],
        ["ack", { retries: [{ lease_id: "a", delay_seconds: 86_401 }] }, "retries[0].delay_seconds", "at most 86400"],
        ["ack", { retries: [{ lease_id: "a", delay_seconds: "1" }] }, "retries[0].delay_seconds", "must be a number"],
        ["ack", { ack: [] }, "ack", "not a known field"],
        ["extend", { visibility_timeout_ms: 5000 }, "lease_ids", "is required"],
        ["extend", { lease_ids: [], visibility_timeout_ms: 5000 }, "lease_ids", "at least one"],
        ["extend", { lease_ids: Array(101).fill("x"), visibility_timeout_ms: 5000 }, "lease_ids", "at most 100"],
        ["extend", { lease_ids: ["x", 1], visibility_timeout_ms: 5000 }, "lease_ids[1]", "must be a string"],
        ["extend", { lease_ids: ["x"] }, "visibility_timeout_ms", "is required"],
        ["extend", { lease_ids: ["x"], visibility_timeout_ms: 500 }, "visibility_timeout_ms", "at least 1000"],
      ] as const
    ).map(([verb, body, field, text]) => [verb, field, text, body] as const),
  )("%s: a bad %s (%s) answers 400 naming it, leasing and settling nothing", async (verb, field, text, body) => {
    const q = `bad-pull-${Math.random().toString(16).slice(2, 10)}`;
    await clockedPullQueue(q);
    await send(q, "untouched");
    const res = await api("POST", `${queuePath(q)}/messages/${verb}`, body);
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
    expect(res.json.errors[0].field).toBe(field);
    expect(res.json.errors[0].message).toContain(text);
    expect(await pullOne(q)).toMatchObject({ attempts: 1 });
  });

  it("refuses malformed JSON and a non-JSON body, but takes a pull with no body at all", async () => {
    await clockedPullQueue("pull-malformed");
    await send("pull-malformed", 1);
    for (const verb of ["pull", "ack", "extend"]) {
      const broken = await api("POST", `${queuePath("pull-malformed")}/messages/${verb}`, undefined, {
        raw: "{",
        headers: { "content-type": "application/json" },
      });
      expect(broken.status).toBe(400);
      expect(broken.json.errors[0].field).toBe("body");
      const xml = await api("POST", `${queuePath("pull-malformed")}/messages/${verb}`, undefined, {
        raw: "<x/>",
        headers: { "content-type": "application/xml" },
      });
      expect(xml.status).toBe(415);
    }
    const bare = await api("POST", `${queuePath("pull-malformed")}/messages/pull`);
    expect(bare.status).toBe(200);
    expect(bare.json.result.messages).toHaveLength(1);
  });

  it("answers 503 when LEASE_SIGNING_KEY is not set, rather than sign with an empty key", async () => {
    await clockedPullQueue("pull-unsigned");
    await send("pull-unsigned", 1);
    for (const key of [undefined, ""]) {
      for (const verb of ["pull", "ack", "extend"]) {
        const request = new Request(`${BASE}${queuePath("pull-unsigned")}/messages/${verb}`, {
          method: "POST",
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          body: JSON.stringify(verb === "extend" ? { lease_ids: ["x"], visibility_timeout_ms: 5000 } : {}),
        });
        const res = await router.fetch(request, { ...env, LEASE_SIGNING_KEY: key }, createExecutionContext());
        expect(res.status).toBe(503);
        const json = (await res.json()) as { errors: Array<{ message: string }> };
        expect(json.errors[0]!.message).toContain("LEASE_SIGNING_KEY");
      }
    }
    expect(await pullOne("pull-unsigned")).toMatchObject({ attempts: 1 });
  });
});
