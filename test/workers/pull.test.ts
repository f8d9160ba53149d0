import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { router } from "../../broker/http/router";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { defaultConsumerSettings } from "../../src/kernel/consumer-settings";
import {
  ack,
  api,
  backlog,
  BASE,
  createQueue,
  OTHER_TOKEN,
  producer,
  pull,
  pullQueue,
  queuePath,
  queuesPath,
  send,
  shardsOnFakeClock,
  storedMessages,
  TOKEN,
} from "./helpers";

const extend = (q: string, body: unknown) => api("POST", `${queuePath(q)}/messages/extend`, body);

/**
 * A queue with an http_pull consumer whose storage shards all run on one fake clock,
 * so visibility timeouts and retry delays pass without waiting.
 */
async function clockedPullQueue(name: string, consumer: Record<string, unknown> = {}) {
  const q = await pullQueue(name, { settings: { visibility_timeout_ms: 1000, max_retries: 1 }, ...consumer });
  return { ...q, ...(await shardsOnFakeClock(q.queue_id)) };
}

async function pullOne(q: string) {
  const res = await pull(q, { batch_size: 1 });
  expect(res.status).toBe(200);
  expect(res.json.result.messages).toHaveLength(1);
  return res.json.result.messages[0];
}

const ids = (res: { json: { result: { messages: Array<{ id: string }> } } }) =>
  res.json.result.messages.map((m) => m.id).sort();

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

describe("acknowledging pulled messages", () => {
  it("deletes exactly the acked messages; the rest come back after the timeout", async () => {
    const { clock } = await clockedPullQueue("ack-some");
    for (let i = 0; i < 5; i++) await send("ack-some", i);
    const batch = (await pull("ack-some", { batch_size: 5 })).json.result.messages as Array<{
      id: string;
      lease_id: string;
    }>;
    const acked = batch.slice(0, 3);
    // A lease id listed twice counts once.
    const res = await ack("ack-some", { acks: [...acked, acked[0]!].map((m) => ({ lease_id: m.lease_id })) });
    expect(res.status).toBe(200);
    expect(res.json.result).toEqual({ ackCount: 3, retryCount: 0, warnings: {} });
    expect(await backlog("ack-some")).toBe(2);
    const left = batch
      .slice(3)
      .map((m) => m.id)
      .sort();
    expect((await storedMessages("ack-some")).messages.map((m) => m.id).sort()).toEqual(left);
    clock.advance(1000);
    const again = await pull("ack-some", { batch_size: 10 });
    expect(ids(again)).toEqual(left);
    expect(again.json.result.messages.every((m: { attempts: number }) => m.attempts === 2)).toBe(true);
  });

  it("refuses a lease id both in acks and in retries with a 400 naming retries[i].lease_id, settling nothing of the request", async () => {
    const { clock } = await clockedPullQueue("ack-and-retry");
    for (let i = 0; i < 2; i++) await send("ack-and-retry", i);
    const [a, b] = (await pull("ack-and-retry", { batch_size: 2 })).json.result.messages as Array<{
      id: string;
      lease_id: string;
    }>;
    const res = await ack("ack-and-retry", {
      acks: [{ lease_id: a!.lease_id }, { lease_id: b!.lease_id }],
      retries: [{ lease_id: b!.lease_id, delay_seconds: 5 }],
    });
    expect(res.status).toBe(400);
    expect(res.json.errors[0].field).toBe("retries[0].lease_id");
    expect(res.json.errors[0].message).toContain("acks[1]");
    // Refused whole: both messages are still stored and come back when their leases end.
    expect(await backlog("ack-and-retry")).toBe(2);
    clock.advance(1000);
    expect(ids(await pull("ack-and-retry", { batch_size: 10 }))).toEqual([a!.id, b!.id].sort());
  });

  it("brings a retried message back after its delay_seconds, or the consumer's retry_delay", async () => {
    const { clock } = await clockedPullQueue("ack-retry", {
      settings: { visibility_timeout_ms: 1000, retry_delay: 30 },
    });
    await send("ack-retry", "own delay");
    await send("ack-retry", "consumer delay");
    const [a, b] = (await pull("ack-retry", { batch_size: 2 })).json.result.messages;
    const res = await ack("ack-retry", {
      retries: [{ lease_id: a.lease_id, delay_seconds: 60 }, { lease_id: b.lease_id }],
    });
    expect(res.json.result).toEqual({ ackCount: 0, retryCount: 2, warnings: {} });
    expect(await backlog("ack-retry")).toBe(2);
    clock.advance(29_999);
    expect((await pull("ack-retry", { batch_size: 10 })).json.result.messages).toEqual([]);
    clock.advance(1);
    const back = (await pull("ack-retry", { batch_size: 10 })).json.result.messages;
    expect(back).toMatchObject([{ id: b.id, attempts: 2 }]);
    await ack("ack-retry", { acks: [{ lease_id: back[0].lease_id }] });
    clock.advance(29_999);
    expect((await pull("ack-retry", { batch_size: 10 })).json.result.messages).toEqual([]);
    clock.advance(1);
    expect((await pull("ack-retry", { batch_size: 10 })).json.result.messages).toMatchObject([
      { id: a.id, attempts: 2 },
    ]);
  });

  it("refuses a late ack after another pull took the message over, with a warning, changing nothing", async () => {
    const { clock } = await clockedPullQueue("ack-late");
    await send("ack-late", "contested");
    const first = await pullOne("ack-late");
    clock.advance(1000);
    const second = await pullOne("ack-late");
    const late = await ack("ack-late", { acks: [{ lease_id: first.lease_id }] });
    expect(late.status).toBe(200);
    expect(late.json.result).toMatchObject({ ackCount: 0, retryCount: 0 });
    expect(late.json.result.warnings[first.lease_id]).toContain("pulled again");
    expect(await backlog("ack-late")).toBe(1);
    // The current holder's lease is untouched: the message is still invisible, and its ack counts.
    expect((await pull("ack-late")).json.result.messages).toEqual([]);
    expect((await ack("ack-late", { acks: [{ lease_id: second.lease_id }] })).json.result).toEqual({
      ackCount: 1,
      retryCount: 0,
      warnings: {},
    });
    expect(await backlog("ack-late")).toBe(0);
  });

  it("accepts an ack after the timeout when no one else pulled the message (as Cloudflare does)", async () => {
    const { clock } = await clockedPullQueue("ack-after-timeout");
    await send("ack-after-timeout", 1);
    const m = await pullOne("ack-after-timeout");
    clock.advance(10_000);
    expect((await ack("ack-after-timeout", { acks: [{ lease_id: m.lease_id }] })).json.result.ackCount).toBe(1);
    expect(await backlog("ack-after-timeout")).toBe(0);
  });

  it("gives forged, tampered, other queues' and other accounts' lease ids a warning, never a 5xx, changing nothing", async () => {
    await clockedPullQueue("ack-forged");
    await send("ack-forged", "mine");
    const mine = await pullOne("ack-forged");
    const [payload, signature] = mine.lease_id.split(".");
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
    const reencoded = btoa(atob(payload.replace(/-/g, "+").replace(/_/g, "/")).replace(/,1\]$/, ",0]"))
      .replace(/\+/g, "-")
      .replace(/\//g, "_")
      .replace(/=+$/, "");

    await clockedPullQueue("ack-forged-sibling");
    await send("ack-forged-sibling", "sibling");
    const sibling = await pullOne("ack-forged-sibling");

    // The other account has a queue of the same name, with a pull consumer of its own.
    const other = { token: OTHER_TOKEN };
    expect((await api("POST", queuesPath("other"), { queue_name: "ack-forged" }, other)).status).toBe(201);
    expect(
      (await api("POST", `${queuePath("ack-forged", "other")}/consumers`, { type: "http_pull" }, other)).status,
    ).toBe(201);
    await api("POST", `${queuePath("ack-forged", "other")}/messages`, { body: "theirs" }, other);
    const theirs = (await pull("ack-forged", {}, { token: OTHER_TOKEN, account: "other" })).json.result.messages[0];

    const bad = {
      "not-a-lease": "not a lease id",
      "a.b.c": "not a lease id",
      [`${payload}.${flip(signature, 3)}`]: "invalid signature",
      [`${flip(payload, 10)}.${signature}`]: "invalid signature",
      [`${reencoded}.${signature}`]: "invalid signature",
      [`${payload}.`]: "not a lease id",
      [sibling.lease_id]: "another queue",
      [theirs.lease_id]: "another queue",
      ["x".repeat(5000)]: "not a lease id",
    };
    const tokens = Object.keys(bad);
    // As acks, then as retries (one lease id in both lists of a request is refused whole).
    for (const list of ["acks", "retries"]) {
      const acked = await ack("ack-forged", { [list]: tokens.map((t) => ({ lease_id: t })) });
      expect(acked.status).toBe(200);
      expect(acked.json.result.ackCount).toBe(0);
      expect(acked.json.result.retryCount).toBe(0);
      for (const [token, why] of Object.entries(bad)) expect(acked.json.result.warnings[token]).toContain(why);
    }
    const extended = await extend("ack-forged", { lease_ids: tokens, visibility_timeout_ms: 60_000 });
    expect(extended.status).toBe(200);
    expect(extended.json.result.extended).toBe(0);
    expect(Object.keys(extended.json.result.warnings).sort()).toEqual([...tokens].sort());
    // Our lease id is just as useless on the other account's queue of the same name.
    const cross = await ack(
      "ack-forged",
      { acks: [{ lease_id: mine.lease_id }] },
      { token: OTHER_TOKEN, account: "other" },
    );
    expect(cross.json.result.ackCount).toBe(0);
    expect(cross.json.result.warnings[mine.lease_id]).toContain("another queue");

    // Nothing moved: every message is still stored and leased, and the real lease ids still work.
    expect(await backlog("ack-forged")).toBe(1);
    expect(await backlog("ack-forged-sibling")).toBe(1);
    expect((await pull("ack-forged")).json.result.messages).toEqual([]);
    expect((await ack("ack-forged", { acks: [{ lease_id: mine.lease_id }] })).json.result.ackCount).toBe(1);
    expect((await ack("ack-forged-sibling", { acks: [{ lease_id: sibling.lease_id }] })).json.result.ackCount).toBe(1);
    expect(
      (await ack("ack-forged", { acks: [{ lease_id: theirs.lease_id }] }, { token: OTHER_TOKEN, account: "other" }))
        .json.result.ackCount,
    ).toBe(1);
  });

  it("sends a retry that used up max_retries to the dead-letter queue: body, id and timestamp intact, attempts from 1 again", async () => {
    await createQueue("ack-dlq-dead");
    expect((await api("POST", `${queuePath("ack-dlq-dead")}/consumers`, { type: "http_pull" })).status).toBe(201);
    const { clock } = await clockedPullQueue("ack-dlq", { dead_letter_queue: "ack-dlq-dead" });
    const id = (await send("ack-dlq", "doomed", { content_type: "text" })).json.result.message_id;
    const sentAt = clock.now();
    clock.advance(60_000);
    const first = await pullOne("ack-dlq");
    // attempts 1 <= max_retries 1: an ordinary retry.
    expect((await ack("ack-dlq", { retries: [{ lease_id: first.lease_id }] })).json.result).toEqual({
      ackCount: 0,
      retryCount: 1,
      warnings: {},
    });
    const second = await pullOne("ack-dlq");
    expect(second).toMatchObject({ id, attempts: 2 });
    expect((await ack("ack-dlq", { retries: [{ lease_id: second.lease_id, delay_seconds: 5 }] })).json.result).toEqual({
      ackCount: 0,
      retryCount: 1,
      warnings: {},
    });
    expect(await backlog("ack-dlq")).toBe(0);
    const dead = (await storedMessages("ack-dlq-dead")).messages;
    expect(dead).toHaveLength(1);
    // As Cloudflare's: the dead-letter queue's own max_retries counts from its first delivery there.
    expect(dead[0]).toMatchObject({ id, contentType: "text", attempts: 0, enqueuedAt: sentAt });
    expect(new TextDecoder().decode(dead[0]!.body)).toBe("doomed");
    const there = (await pull("ack-dlq-dead", { batch_size: 10 })).json.result.messages;
    expect(there).toEqual([expect.objectContaining({ id, body: "doomed", attempts: 1, timestamp_ms: sentAt })]);
  });

  it("drops a retry that used up max_retries when there is no dead-letter queue", async () => {
    const { shards } = await clockedPullQueue("ack-drop", {
      settings: { visibility_timeout_ms: 1000, max_retries: 0 },
    });
    await send("ack-drop", "gone");
    const m = await pullOne("ack-drop");
    expect((await ack("ack-drop", { retries: [{ lease_id: m.lease_id }] })).json.result).toEqual({
      ackCount: 0,
      retryCount: 1,
      warnings: {},
    });
    expect(await backlog("ack-drop")).toBe(0);
    let dropped = 0;
    for (const s of shards) dropped += (await storageShardFor(env, s).stats()).totals.dropped;
    expect(dropped).toBe(1);
  });
});

describe("extending leases", () => {
  it("keeps a message invisible past its original timeout, and refuses a lease that was taken over", async () => {
    const { clock } = await clockedPullQueue("extend-lease");
    const id = (await send("extend-lease", "slow work")).json.result.message_id;
    const m = await pullOne("extend-lease");
    clock.advance(900);
    const res = await extend("extend-lease", { lease_ids: [m.lease_id], visibility_timeout_ms: 5000 });
    expect(res.status).toBe(200);
    expect(res.json.result).toEqual({ extended: 1, warnings: {} });
    clock.advance(1000); // past the original 1000 ms
    expect((await pull("extend-lease")).json.result.messages).toEqual([]);
    clock.advance(4000); // 900 + 5000 ms
    const again = await pullOne("extend-lease");
    expect(again).toMatchObject({ id, attempts: 2 });
    const stale = await extend("extend-lease", { lease_ids: [m.lease_id], visibility_timeout_ms: 5000 });
    expect(stale.json.result.extended).toBe(0);
    expect(stale.json.result.warnings[m.lease_id]).toContain("pulled again");
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
