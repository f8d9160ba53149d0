/**
 * Cloudflare's REST API as its real clients call it, at the HTTP level: the
 * /client/v4 base path, JSON bodies sent as text/plain (wrangler's way) on the routes Cloudflare
 * serves and only there, Cloudflare's peek and its purge of peeked messages, purge answering the
 * queue and purge status, both spellings of a send's figures, and event subscriptions refused in
 * words a user can act on. Queues and consumers replaced by PUT and described whole:
 * cloudflare-rest-queues.test.ts. test/e2e/cloudflare-sdk.test.ts and wrangler-queues.test.ts
 * drive the real clients.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { api, BASE, createQueue, queuePath, queuesPath, TOKEN } from "./helpers";

const V4 = "/client/v4";

/** A request as wrangler sends its bodies: a JSON string, which fetch labels text/plain;charset=UTF-8. */
async function asWrangler(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await SELF.fetch(`${BASE}${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

describe("Cloudflare's base path, /client/v4", () => {
  it("answers every route under it as at the root", async () => {
    const created = await api("POST", `${V4}${queuesPath()}`, { queue_name: "cf-base" });
    expect(created.status).toBe(201);
    const root = await api("GET", queuePath("cf-base"));
    const v4 = await api("GET", `${V4}${queuePath(created.json.result.queue_id)}`);
    expect(v4.status).toBe(200);
    expect(v4.json.result).toEqual(root.json.result);
    expect((await api("POST", `${V4}${queuePath("cf-base")}/messages`, { body: "hello" })).status).toBe(200);
    expect((await api("GET", `${V4}${queuePath("cf-base")}/metrics`)).json.result.backlog_count).toBe(1);
    const listed = await api("GET", `${V4}${queuesPath()}?name=cf-base`);
    expect(listed.json.result.map((q: { queue_name: string }) => q.queue_name)).toEqual(["cf-base"]);
    expect((await SELF.fetch(`${BASE}${V4}/healthz`)).status).toBe(200);
    expect((await SELF.fetch(`${BASE}${V4}/openapi.json`)).status).toBe(200);
  });

  it("keeps its checks there: a token first, the table's scopes, 404 and 405 naming the path asked", async () => {
    expect((await api("GET", `${V4}${queuesPath()}`, undefined, { token: null })).status).toBe(401);
    expect(
      (await api("POST", `${V4}${queuesPath()}`, { queue_name: "cf-base-send" }, { token: "send-only-token" })).status,
    ).toBe(403);
    const other = await api("GET", `${V4}${queuesPath("other")}`);
    expect(other.status).toBe(404);
    expect(other.json.errors[0].field).toBe("account_id");
    const wrong = await api("POST", `${V4}${queuePath("cf-base")}/metrics`, {});
    expect(wrong.status).toBe(405);
    expect(wrong.json.errors[0].message).toContain(`${V4}${queuePath("cf-base")}/metrics`);
    const none = await api("GET", `${V4}/accounts/local/no-such-thing`);
    expect(none.status).toBe(404);
    expect(none.json.errors[0].message).toContain(`${V4}/accounts/local/no-such-thing`);
    // Only the base itself: a path that merely starts like it is no route.
    expect((await api("GET", `/client/v4x${queuesPath()}`)).status).toBe(404);
    expect((await api("GET", `/client/v3${queuesPath()}`)).status).toBe(404);
  });
});

describe("JSON bodies whatever their content type, on Cloudflare's routes", () => {
  it("reads wrangler's text/plain JSON on the routes Cloudflare serves", async () => {
    expect((await asWrangler("POST", `${V4}${queuesPath()}`, { queue_name: "cf-plain" })).status).toBe(201);
    expect(
      (
        await asWrangler("PATCH", `${V4}${queuePath("cf-plain")}`, {
          queue_name: "cf-plain",
          settings: { delivery_paused: true },
        })
      ).json.result.settings.delivery_paused,
    ).toBe(true);
    expect(
      (await asWrangler("PUT", `${V4}${queuePath("cf-plain")}`, { settings: { delivery_delay: 1 } })).json.result
        .settings,
    ).toMatchObject({ delivery_delay: 1, delivery_paused: false });
    const consumer = await asWrangler("POST", `${V4}${queuePath("cf-plain")}/consumers`, {
      type: "http_pull",
      settings: { batch_size: 2 },
    });
    expect(consumer.status).toBe(201);
    const id = consumer.json.result.consumer_id as string;
    expect(
      (
        await asWrangler("PUT", `${V4}${queuePath("cf-plain")}/consumers/${id}`, {
          type: "http_pull",
          settings: { batch_size: 3 },
        })
      ).status,
    ).toBe(200);
    expect((await asWrangler("POST", `${queuePath("cf-plain")}/messages`, { body: { n: 1 } })).status).toBe(200);
    expect(
      (await asWrangler("POST", `${queuePath("cf-plain")}/messages/batch`, { messages: [{ body: 2 }] })).status,
    ).toBe(200);
    expect(
      (await asWrangler("POST", `${queuePath("cf-plain")}/messages/peek`, { batch_size: 5 })).json.result.messages,
    ).toHaveLength(2);
    const pulled = await asWrangler("POST", `${queuePath("cf-plain")}/messages/pull`, {
      batch_size: 1,
      visibility_timeout_ms: 60_000,
    });
    expect(pulled.json.result.messages).toHaveLength(1);
    expect(
      (
        await asWrangler("POST", `${queuePath("cf-plain")}/messages/ack`, {
          acks: [{ lease_id: pulled.json.result.messages[0].lease_id }],
        })
      ).json.result.ackCount,
    ).toBe(1);
    expect(
      (await asWrangler("POST", `${V4}${queuePath("cf-plain")}/purge`, { delete_messages_permanently: true })).json
        .result.purged,
    ).toBe(1);
  });

  it("still asks for application/json on shardq's own routes, and for a body that is not JSON anywhere", async () => {
    await createQueue("cf-plain-own");
    await createQueue("cf-plain-own-dlq");
    const consumer = await api("POST", `${queuePath("cf-plain-own")}/consumers`, {
      type: "http_pull",
      dead_letter_queue: "cf-plain-own-dlq",
    });
    for (const [method, path, body] of [
      ["POST", `${queuePath("cf-plain-own-dlq")}/redrive`, {}],
      ["POST", `${queuePath("cf-plain-own")}/messages/extend`, { lease_ids: ["x"], visibility_timeout_ms: 5000 }],
      ["POST", `${queuePath("cf-plain-own")}/messages/pull/cancel`, { wait_id: "cf-plain-wait-0001" }],
      [
        "PATCH",
        `${queuePath("cf-plain-own")}/consumers/${consumer.json.result.consumer_id}`,
        { settings: { batch_size: 4 } },
      ],
      ["POST", `${queuePath("cf-plain-own")}/ordering/release`, { ordering_key: "k", message_id: "0".repeat(32) }],
    ] as const) {
      const res = await asWrangler(method, `${V4}${path}`, body);
      expect(res.status, `${method} ${path}`).toBe(415);
      expect(res.json.errors[0].field).toBe("content-type");
    }
    // Declared as a form, and not JSON: 415 on Cloudflare's routes too (the content type is what to fix).
    const form = await api("POST", queuesPath(), undefined, {
      raw: "queue_name=cf-form",
      headers: { "content-type": "application/x-www-form-urlencoded" },
    });
    expect(form.status).toBe(415);
    expect(form.json.errors[0].field).toBe("content-type");
    // Declared as JSON and not JSON: the body is what to fix.
    const broken = await api("POST", queuesPath(), undefined, {
      raw: "{",
      headers: { "content-type": "application/json" },
    });
    expect(broken.status).toBe(400);
    expect(broken.json.errors[0].field).toBe("body");
    // A charset JSON cannot be in is refused whatever the route.
    const latin1 = await api("POST", queuesPath(), undefined, {
      raw: JSON.stringify({ queue_name: "cf-latin1" }),
      headers: { "content-type": "text/plain; charset=iso-8859-1" },
    });
    expect(latin1.status).toBe(415);
    expect((await api("GET", queuePath("cf-form"))).status).toBe(404);
    expect((await api("GET", queuePath("cf-latin1"))).status).toBe(404);
  });
});

describe("Cloudflare's peek, and its purge of peeked messages", () => {
  it("peeks in Cloudflare's shape, leasing nothing, and purges what the refs name, wherever it stands", async () => {
    await createQueue("cf-peek");
    await api("POST", `${queuePath("cf-peek")}/consumers`, { type: "http_pull" });
    const a = (await api("POST", `${queuePath("cf-peek")}/messages`, { body: "a", content_type: "text" })).json.result
      .message_id;
    const b = (await api("POST", `${queuePath("cf-peek")}/messages`, { body: { b: 1 }, ordering_key: "k" })).json.result
      .message_id;
    const c = (await api("POST", `${queuePath("cf-peek")}/messages`, { body: "c", content_type: "text" })).json.result
      .message_id;
    const peek = await api("POST", `${queuePath("cf-peek")}/messages/peek`, { batch_size: 2 });
    expect(peek.status).toBe(200);
    expect(peek.json.result.messages.map((m: { id: string }) => m.id)).toEqual([a, b]);
    expect(peek.json.result.messages[0]).toMatchObject({
      id: a,
      body: "a",
      attempts: 0,
      metadata: { "CF-Content-Type": "text" },
      ref: expect.any(String),
    });
    expect(peek.json.result.messages[1].ordering_key).toBe("k");
    // No body at all: the default batch.
    const all = await SELF.fetch(`${BASE}${queuePath("cf-peek")}/messages/peek`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(((await all.json()) as any).result.messages).toHaveLength(3);
    // A peek leased nothing: a pull gets all three.
    const pulled = (await api("POST", `${queuePath("cf-peek")}/messages/pull`, { batch_size: 3 })).json.result.messages;
    expect(pulled).toHaveLength(3);
    // Purged by ref while leased; a ref twice counts once; a made-up one and one of a message gone are warnings.
    const refs = peek.json.result.messages.map((m: { ref: string }) => ({ ref: m.ref }));
    const purged = await api("POST", `${queuePath("cf-peek")}/messages/purge`, {
      refs: [...refs, refs[0], { ref: "junk" }],
    });
    expect(purged.status).toBe(200);
    expect(purged.json.result).toEqual({ purged: 2, warnings: { junk: expect.stringContaining("not a ref") } });
    const again = await api("POST", `${queuePath("cf-peek")}/messages/purge`, { refs: [refs[0]] });
    expect(again.json.result).toEqual({ purged: 0, warnings: { [refs[0].ref]: expect.stringContaining("is gone") } });
    expect((await api("GET", `${queuePath("cf-peek")}/messages/${c}`)).json.result.state).toBe("leased");
    expect((await api("GET", `${queuePath("cf-peek")}/messages/${a}`)).status).toBe(404);
    // The leases on the purged messages are gone: their acks are warned about, the other one counts.
    const lease = (id: string) => pulled.find((m: { id: string }) => m.id === id).lease_id as string;
    const acked = await api("POST", `${queuePath("cf-peek")}/messages/ack`, {
      acks: [a, b, c].map((id) => ({ lease_id: lease(id) })),
    });
    expect(acked.json.result.ackCount).toBe(1);
    expect(Object.keys(acked.json.result.warnings).sort()).toEqual([lease(a), lease(b)].sort());
    // Bounds.
    expect((await api("POST", `${queuePath("cf-peek")}/messages/peek`, { batch_size: 101 })).json.errors[0].field).toBe(
      "batch_size",
    );
    expect((await api("POST", `${queuePath("cf-peek")}/messages/purge`, { refs: [] })).json.errors[0].field).toBe(
      "refs",
    );
    expect((await api("GET", `${queuePath("cf-peek")}/messages/peek`)).status).toBe(405);
  });
});

describe("purge: the queue as Cloudflare answers it, and its status", () => {
  it("answers the queue with the counts beside it, and GET .../purge says when the last one started and that it completed", async () => {
    const q = await createQueue("cf-purge");
    expect((await api("GET", `${queuePath("cf-purge")}/purge`)).json.result).toEqual({});
    await api("POST", `${queuePath("cf-purge")}/messages/batch`, { messages: [{ body: 1 }, { body: 2 }] });
    const before = Date.now();
    const purge = await api("POST", `${queuePath("cf-purge")}/purge`, { delete_messages_permanently: true });
    expect(purge.status).toBe(200);
    const info = (await api("GET", queuePath("cf-purge"))).json.result;
    expect(purge.json.result).toEqual({ ...info, purged: 2, completed: true });
    expect(purge.json.result.queue_id).toBe(q.queue_id);
    const status = await api("GET", `${queuePath("cf-purge")}/purge`);
    expect(status.json.result.completed).toBe("true");
    expect(Date.parse(status.json.result.started_at)).toBeGreaterThanOrEqual(before - 1000);
    // With return_ids, the ids too.
    const id = (await api("POST", `${queuePath("cf-purge")}/messages`, { body: 3 })).json.result.message_id;
    expect(
      (await api("POST", `${queuePath("cf-purge")}/purge`, { delete_messages_permanently: true, return_ids: true }))
        .json.result,
    ).toMatchObject({ purged: 1, completed: true, ids: [id] });
    expect((await api("GET", `${queuePath("ghost-cf-purge")}/purge`)).status).toBe(404);
  });
});

describe("a send's and a pull's figures, under both spellings", () => {
  it("carries backlogCount and backlog_count alike", async () => {
    await createQueue("cf-figures");
    await api("POST", `${queuePath("cf-figures")}/consumers`, { type: "http_pull" });
    const sent = (await api("POST", `${queuePath("cf-figures")}/messages`, { body: "x", content_type: "text" })).json
      .result.metadata.metrics;
    expect(sent).toEqual({
      backlogCount: 1,
      backlogBytes: sent.backlogBytes,
      oldestMessageTimestampMs: sent.oldestMessageTimestampMs,
      backlog_count: 1,
      backlog_bytes: sent.backlogBytes,
      oldest_message_timestamp_ms: sent.oldestMessageTimestampMs,
    });
    const pulled = (await api("POST", `${queuePath("cf-figures")}/messages/pull`, {})).json.result.metadata.metrics;
    expect(pulled.backlog_count).toBe(pulled.backlogCount);
    expect(pulled.oldest_message_timestamp_ms).toBe(pulled.oldestMessageTimestampMs);
  });
});

describe("event subscriptions: not served, said so", () => {
  it("answers every call 501 with what to do instead, after the token and account checks", async () => {
    for (const [method, path] of [
      ["GET", "/accounts/local/event_subscriptions/subscriptions?queue_id=x"],
      ["POST", "/accounts/local/event_subscriptions/subscriptions"],
      ["GET", `/accounts/local/event_subscriptions/subscriptions/${"a".repeat(32)}`],
      ["PATCH", `${V4}/accounts/local/event_subscriptions/subscriptions/${"a".repeat(32)}`],
      ["DELETE", `${V4}/accounts/local/event_subscriptions/subscriptions/${"a".repeat(32)}`],
    ] as const) {
      const res = await asWrangler(
        method,
        path,
        method === "POST" || method === "PATCH" ? { enabled: true } : undefined,
      );
      expect(res.status, `${method} ${path}`).toBe(501);
      expect(res.json.errors[0].message).toContain("shardq does not serve event subscriptions");
      expect(res.json.errors[0].message).toContain("producer binding");
    }
    expect(
      (await api("GET", "/accounts/local/event_subscriptions/subscriptions", undefined, { token: null })).status,
    ).toBe(401);
    expect((await api("GET", "/accounts/other/event_subscriptions/subscriptions")).status).toBe(404);
    expect((await api("PUT", "/accounts/local/event_subscriptions/subscriptions")).status).toBe(405);
  });
});
