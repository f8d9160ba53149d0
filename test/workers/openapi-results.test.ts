/**
 * The OpenAPI description's answers are the real ones: each operation is called
 * as a client would, and its whole answer parsed with the schema the description gives it
 * (broker/openapi/*-results.ts, strict: a field renamed, added or dropped fails here).
 * Refusals are parsed with the error envelope, and their status must be one the description
 * lists for the operation. The last test fails when an operation was left out of this file.
 */
import { createExecutionContext, env, runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { router } from "../../broker/http/router";
import { buildOpenApiDocument } from "../../broker/openapi/document";
import type { Route } from "../../broker/http/route";
import { ROUTES } from "../../broker/http/route-table";
import { errorEnvelope, resultInfo, successEnvelope } from "../../broker/openapi/envelope-schemas";
import { consumer as consumerSchema } from "../../broker/openapi/queue-results";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { api, BASE, createQueue, queuePath, queuesPath } from "./helpers";
import { addConsumer, eventually, fakeConsumer } from "./helpers";

type Responses = Record<string, { $ref?: string }>;
const document = buildOpenApiDocument(ROUTES) as {
  paths: Record<string, Record<string, { responses: Responses }>>;
  components: { responses: Record<string, { headers?: Record<string, { required?: boolean }> }> };
};

/** Routes whose answers a test below parsed: the last test wants every one. */
const exercised = new Set<string>();

function operation(id: string): Route {
  const op = ROUTES.find((o) => o.operationId === id);
  if (!op) throw new Error(`no operation ${id} in broker/http/route-table.ts`);
  return op;
}

/** Asserts `path` is a path of the operation, its parameters filled in. */
function checkPath(op: Route, path: string): void {
  const pattern = new RegExp(`^${op.path.replace(/[.]/g, "\\.").replace(/\{\w+\}/g, "[^/]+")}$`);
  expect(pattern.test(path.split("?")[0]!), `${path} is not a path of ${op.operationId} (${op.path})`).toBe(true);
}

/** Calls an operation and parses its whole answer with the description's schema for its success; returns `result`. */
async function call(
  id: string,
  path: string,
  body?: unknown,
  opts: { headers?: Record<string, string> } = {},
): Promise<any> {
  const op = operation(id);
  checkPath(op, path);
  if (op.answer.kind !== "envelope") throw new Error(`${id} does not answer with the envelope`);
  const res = await api(op.method.toUpperCase(), path, body, opts);
  expect(res.status, `${id}: ${JSON.stringify(res.json)}`).toBe(op.answer.status);
  const parsed = successEnvelope(op.answer.result, op.answer.paged ? resultInfo : undefined).parse(res.json);
  exercised.add(id);
  return parsed.result;
}

/** The statuses the description lists for an operation. */
function listed(op: Route): string[] {
  return Object.keys(document.paths[op.path]![op.method.toLowerCase()]!.responses);
}

/** Calls an operation expecting a refusal: the error envelope, with a status the description lists for it. */
async function refusal(id: string, path: string, body: unknown, status: number, opts: Parameters<typeof api>[3] = {}) {
  const op = operation(id);
  checkPath(op, path);
  const res = await api(op.method.toUpperCase(), path, body, opts);
  expect(res.status, `${id}: ${JSON.stringify(res.json)}`).toBe(status);
  const parsed = errorEnvelope.parse(res.json);
  expect(listed(op), `${id} answered ${status}, which its description does not list`).toContain(String(status));
  return parsed.errors[0];
}

describe("answers as the OpenAPI description says", () => {
  it("queues and consumers: create, list, read, change, delete", async () => {
    const created = await call("createQueue", queuesPath(), { queue_name: "oa-crud", settings: { delivery_delay: 0 } });
    expect(created.queue_name).toBe("oa-crud");
    expect(
      (await call("listQueues", `${queuesPath()}?per_page=100`)).some(
        (q: { queue_id: string }) => q.queue_id === created.queue_id,
      ),
    ).toBe(true);
    expect((await call("getQueue", queuePath(created.queue_id))).queue_name).toBe("oa-crud");
    expect(
      (await call("updateQueue", queuePath("oa-crud"), { settings: { delivery_paused: true } })).settings
        .delivery_paused,
    ).toBe(true);
    // PUT replaces: what it leaves out goes back to its default.
    expect(
      (await call("replaceQueue", queuePath("oa-crud"), { settings: { delivery_delay: 2 } })).settings,
    ).toMatchObject({ delivery_delay: 2, delivery_paused: false });

    await createQueue("oa-crud-dead");
    const consumer = await call("createConsumer", `${queuePath("oa-crud")}/consumers`, {
      type: "http_pull",
      dead_letter_queue: "oa-crud-dead",
    });
    const one = `${queuePath("oa-crud")}/consumers/${consumer.consumer_id}`;
    expect(await call("listConsumers", `${queuePath("oa-crud")}/consumers`)).toHaveLength(1);
    expect((await call("getConsumer", one)).dead_letter_queue).toBe("oa-crud-dead");
    expect(
      (await call("updateConsumer", one, { settings: { batch_size: 7 }, dead_letter_queue: null })).settings.batch_size,
    ).toBe(7);
    expect(
      (await call("replaceConsumer", one, { type: "http_pull", settings: { max_retries: 2 } })).settings,
    ).toMatchObject({ batch_size: 10, max_retries: 2 });
    expect((await call("getQueue", queuePath("oa-crud"))).consumers).toHaveLength(1);
    expect(await call("deleteConsumer", one)).toBeNull();
    // PUT of a consumer the queue does not have adds it, under the id the path names (201).
    const putId = "0123456789abcdef0123456789abcdef";
    const put = await api("PUT", `${queuePath("oa-crud")}/consumers/${putId}`, { type: "http_pull" });
    expect(put.status).toBe(201);
    expect(listed(operation("replaceConsumer"))).toContain("201");
    expect(consumerSchema.parse(successEnvelope(consumerSchema).parse(put.json).result).consumer_id).toBe(putId);
    expect(await call("deleteQueue", queuePath("oa-crud"))).toBeNull();
  });

  it("sending, peeking, pulling, extending, settling, looking up, cancelling, redriving, purging", async () => {
    await createQueue("oa-flow");
    await createQueue("oa-flow-dead");
    const q = queuePath("oa-flow");
    await call("createConsumer", `${q}/consumers`, {
      type: "http_pull",
      settings: { max_retries: 0, visibility_timeout_ms: 60_000 },
      dead_letter_queue: "oa-flow-dead",
    });

    const first = await call(
      "sendMessage",
      `${q}/messages`,
      { body: { n: 1 } },
      { headers: { "idempotency-key": "oa-flow-1" } },
    );
    const again = await call(
      "sendMessage",
      `${q}/messages`,
      { body: { n: 1 } },
      { headers: { "idempotency-key": "oa-flow-1" } },
    );
    expect(again.message_id).toBe(first.message_id);
    const laned = await call("sendMessage", `${q}/messages`, {
      body: "in a lane",
      content_type: "text",
      ordering_key: "lane",
    });
    const batch = await call("sendBatch", `${q}/messages/batch`, {
      messages: [{ body: 3 }, { body: 4, delay_seconds: 0 }],
    });
    const doomed = await call("sendMessage", `${q}/messages`, { body: 5 });

    expect((await call("peekMessages", `${q}/messages?limit=10`)).messages.length).toBeGreaterThan(0);
    const peeked = await call("peekMessagesCloudflare", `${q}/messages/peek`, { batch_size: 10 });
    expect(peeked.messages.map((m: { id: string }) => m.id)).toContain(first.message_id);
    expect((await call("getMessage", `${q}/messages/${first.message_id}`)).state).toBe("ready");
    expect((await call("cancelMessage", `${q}/messages/${doomed.message_id}`)).cancelled).toBe(true);
    const spare = await call("sendMessage", `${q}/messages`, { body: 6 });
    const spareRef = (await call("peekMessagesCloudflare", `${q}/messages/peek`, {})).messages.find(
      (m: { id: string }) => m.id === spare.message_id,
    ).ref as string;
    expect(
      await call("purgePeekedMessages", `${q}/messages/purge`, { refs: [{ ref: spareRef }, { ref: "not-a-ref" }] }),
    ).toEqual({
      purged: 1,
      warnings: { "not-a-ref": expect.stringContaining("not a ref") },
    });

    const pulled = await call("pullMessages", `${q}/messages/pull`, { batch_size: 10 });
    const lease = (id: string) => pulled.messages.find((m: { id: string }) => m.id === id)!.lease_id as string;
    expect(pulled.messages.map((m: { id: string }) => m.id).sort()).toEqual(
      [first.message_id, laned.message_id, ...batch.message_ids].sort(),
    );
    expect(pulled.messages.find((m: { id: string }) => m.id === laned.message_id).ordering_key).toBe("lane");

    expect(await call("cancelPull", `${q}/messages/pull/cancel`, { wait_id: "no-such-wait-0000" })).toEqual({
      cancelled: false,
      reason: "not_waiting",
    });

    const extended = await call("extendLeases", `${q}/messages/extend`, {
      lease_ids: [lease(first.message_id), "not-a-lease"],
      visibility_timeout_ms: 60_000,
    });
    expect(extended.extended).toBe(1);
    expect(Object.keys(extended.warnings)).toEqual(["not-a-lease"]);
    // Out of retries at once (max_retries 0): the retried one goes to the dead-letter queue.
    const [third, fourth] = batch.message_ids as [string, string];
    const acked = await call("ackMessages", `${q}/messages/ack`, {
      acks: [first.message_id, laned.message_id, fourth].map((id) => ({ lease_id: lease(id) })),
      retries: [{ lease_id: lease(third) }],
    });
    expect(acked).toEqual({ ackCount: 3, retryCount: 1, warnings: {} });
    expect(await call("getMessage", `${q}/messages/${third}`)).toMatchObject({
      state: "dead_lettered",
      dead_letter_queue: "oa-flow-dead",
    });

    expect(await call("redriveQueue", `${queuePath("oa-flow-dead")}/redrive`, {})).toEqual({
      moved: 1,
      target_queue: "oa-flow",
      remaining_matching: 0,
    });
    expect(await call("purgeStatus", `${q}/purge`)).toEqual({});
    expect(await call("purgeQueue", `${q}/purge`, { delete_messages_permanently: true })).toMatchObject({
      queue_name: "oa-flow",
      purged: 1,
      completed: true,
    });
    expect(await call("purgeStatus", `${q}/purge`)).toEqual({ completed: "true", started_at: expect.any(String) });
  });

  it("ordered lanes: the keys held back, and the release of one", async () => {
    await createQueue("oa-lanes");
    await createQueue("oa-lanes-dead");
    const q = queuePath("oa-lanes");
    await call("createConsumer", `${q}/consumers`, { type: "http_pull", dead_letter_queue: "oa-lanes-dead" });
    const head = await call("sendMessage", `${q}/messages`, { body: "k1", ordering_key: "k" });
    await call("sendMessage", `${q}/messages`, { body: "k2", ordering_key: "k" });
    const [leased] = (await call("pullMessages", `${q}/messages/pull`, { batch_size: 1 })).messages;
    const held = await call("listHeldKeys", `${q}/ordering/held?limit=10`);
    expect(held.keys).toEqual([
      expect.objectContaining({ ordering_key: "k", reason: "leased", message_id: head.message_id }),
    ]);
    await call("ackMessages", `${q}/messages/ack`, { retries: [{ lease_id: leased.lease_id, delay_seconds: 3600 }] });
    expect(
      await call("releaseOrderingKey", `${q}/ordering/release`, { ordering_key: "k", message_id: head.message_id }),
    ).toEqual({ ordering_key: "k", message_id: head.message_id, moved_to: "oa-lanes-dead" });
  });

  it("figures: the backlog, the control plane with heartbeats, consumer shards and decisions, the last hour", async () => {
    const created = await createQueue("oa-figures");
    const q = queuePath("oa-figures");
    const deliveries = await fakeConsumer(created.queue_id, (batch) => batch.ackAll());
    await call("sendBatch", `${q}/messages/batch`, { messages: [{ body: 1 }, { body: 2 }] });
    await addConsumer("oa-figures", { settings: { max_wait_time_ms: 0 } });
    await eventually(
      async () => deliveries.length,
      (n) => n > 0,
    );
    await eventually(
      () => coordinatorFor(env, created.queue_id).consumerShards(),
      (c) => c.shards.length > 0,
    );
    await call("sendMessage", `${q}/messages`, { body: 3 });
    const map = (await coordinatorFor(env, created.queue_id).shardMap())!;
    for (const s of map.shards) await runDurableObjectAlarm(storageShardFor(env, s.name));
    await runDurableObjectAlarm(coordinatorFor(env, created.queue_id));

    const metrics = await call("getQueueMetrics", `${q}/metrics`);
    expect(metrics.shards.every((s: { heartbeat: unknown }) => s.heartbeat !== null)).toBe(true);
    const shards = await call("getShards", `${q}/shards`);
    expect(shards.shards.every((s: { heartbeat: unknown }) => s.heartbeat !== null)).toBe(true);
    expect(shards.consumer_shards.shards.length).toBeGreaterThan(0);
    expect(shards.decisions.length).toBeGreaterThan(0);
    expect(shards.published).not.toBeNull();
    expect((await call("getSeries", `${q}/series`)).points.length).toBeGreaterThan(0);
    expect(await call("health", "/healthz")).toEqual({ ok: true });
  });

  it("refusals: the error envelope, with a status the description lists for the operation", async () => {
    await createQueue("oa-refusals");
    const q = queuePath("oa-refusals");
    expect(await refusal("sendMessage", `${q}/messages`, { body: 1, delay_seconds: -1 }, 400)).toMatchObject({
      field: "delay_seconds",
    });
    expect(
      await refusal("sendMessage", `${q}/messages`, { body: "x".repeat(130_000), content_type: "text" }, 413),
    ).toMatchObject({ field: "body" });
    expect(
      await refusal("createQueue", queuesPath(), undefined, 415, {
        raw: "queue_name=x",
        headers: { "content-type": "text/plain" },
      }),
    ).toMatchObject({ field: "content-type" });
    expect(await refusal("createQueue", queuesPath(), { queue_name: "oa-refusals" }, 409)).toMatchObject({
      field: "queue_name",
    });
    expect(await refusal("getQueue", queuePath("oa-no-such-queue"), undefined, 404)).toMatchObject({ field: "queue" });
    expect(await refusal("getQueue", q, undefined, 401, { token: null })).toMatchObject({ field: "authorization" });
    expect(await refusal("getQueue", q, undefined, 403, { token: "send-only-token" })).toMatchObject({
      field: "authorization",
    });
    expect(await refusal("pullMessages", `${q}/messages/pull`, {}, 409)).toMatchObject({ field: "queue" });
    expect(await refusal("peekMessages", `${q}/messages?limit=0`, undefined, 400)).toMatchObject({ field: "limit" });
    // What shardq does not serve: a 501 the description lists.
    expect(
      await refusal("createEventSubscription", "/accounts/local/event_subscriptions/subscriptions", { name: "x" }, 501),
    ).toMatchObject({ code: 10011 });
    expect(
      await refusal(
        "getEventSubscription",
        `/accounts/local/event_subscriptions/subscriptions/${"0".repeat(32)}`,
        undefined,
        501,
      ),
    ).toMatchObject({ code: 10011 });
    // A method the path does not take: described once, for every path, in components.responses.
    const wrong = await api("POST", q, {});
    expect(wrong.status).toBe(405);
    errorEnvelope.parse(wrong.json);
    expect(document.components.responses.MethodNotAllowed).toBeDefined();
  });

  it("429: the error envelope with Retry-After, as the description says", async () => {
    const account = `oa-rl-${Math.random().toString(16).slice(2, 8)}`;
    const tokens = { AUTH_TOKENS: JSON.stringify({ [`${account}-token`]: { account } }) };
    const limited = (on: boolean) =>
      ({
        ...env,
        ...tokens,
        RATE_LIMITS: on ? "on" : "off",
        ACCOUNT_RATE_LIMITER: env.TEST_ACCOUNT_LIMITER,
        QUEUE_RATE_LIMITER: env.TEST_QUEUE_LIMITER,
      }) as Env;
    const fetch = (e: Env, method: string, path: string, body?: unknown) =>
      router.fetch(
        new Request(`${BASE}${path}`, {
          method,
          headers: { authorization: `Bearer ${account}-token`, "content-type": "application/json" },
          body: body === undefined ? undefined : JSON.stringify(body),
        }),
        e,
        createExecutionContext(),
      );
    expect((await fetch(limited(false), "POST", queuesPath(account), { queue_name: "busy" })).status).toBe(201);
    const op = operation("getQueueMetrics");
    let res: Response | undefined;
    // The test queue limiter allows 3 calls a minute: well within this many.
    for (let i = 0; i < 10 && res?.status !== 429; i++)
      res = await fetch(limited(true), "GET", `${queuePath("busy", account)}/metrics`);
    expect(res!.status).toBe(429);
    expect(Number(res!.headers.get("retry-after"))).toBeGreaterThan(0);
    errorEnvelope.parse(await res!.json());
    expect(listed(op)).toContain("429");
    expect(document.components.responses.TooManyRequests!.headers?.["Retry-After"]?.required).toBe(true);
  });

  it("left no operation answering in the envelope out of the tests above", () => {
    const envelope = ROUTES.filter((o) => o.answer.kind === "envelope").map((o) => o.operationId);
    expect(envelope.filter((id) => !exercised.has(id))).toEqual([]);
  });
});
