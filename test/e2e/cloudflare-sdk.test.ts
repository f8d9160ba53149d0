// Cloudflare's own TypeScript SDK (the `cloudflare` package, a devDependency) pointed at shardq
// as a user of Cloudflare Queues would point it: a base URL of the `/client/v4` form, a token,
// the account id `local`. Every queue, consumer, message and purge call the SDK has
// drives a queue through its whole life, and each answer is read through the SDK's types. The
// requests the SDK sent are recorded, so the test also shows which method and path each call
// took, and that none went anywhere but /client/v4. Event subscriptions, which shardq cannot
// serve, fail with a 501 that says so, once (the SDK is told not to retry).
import Cloudflare from "cloudflare";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startDevService, type DevService } from "./dev-service.mjs";
import { TOKEN } from "./helpers.ts";

const account_id = "local";

describe("the cloudflare SDK against shardq", () => {
  let service: DevService | undefined;
  let cf: Cloudflare;
  /** Every request the SDK sent: method and path. */
  const sent: Array<{ method: string; path: string }> = [];

  beforeAll(async () => {
    service = await startDevService("cloudflare-sdk");
    const recording: typeof fetch = (input, init) => {
      const url = new URL(input instanceof Request ? input.url : String(input));
      sent.push({ method: init?.method ?? (input instanceof Request ? input.method : "GET"), path: url.pathname });
      return fetch(input, init);
    };
    cf = new Cloudflare({ apiToken: TOKEN, baseURL: `${service.base}/client/v4`, fetch: recording });
  });

  afterAll(async () => {
    await service?.stop();
  });

  /** The calls sent since `from`, as "METHOD path" with the account's queue path shortened to `Q`. */
  const callsSince = (from: number, queueId: string) =>
    sent.slice(from).map((s) => `${s.method} ${s.path.replace(`/client/v4/accounts/local/queues/${queueId}`, "Q")}`);

  it("takes a queue through its whole life: create, get, list, update, edit, consumers, messages, metrics, purge, delete", async () => {
    const from = sent.length;
    // Queues: create, get, list.
    const created = await cf.queues.create({ account_id, queue_name: "sdk-life" });
    const queueId = created.queue_id!;
    expect(queueId).toMatch(/^[0-9a-f]{32}$/);
    expect(created).toMatchObject({
      queue_name: "sdk-life",
      consumers_total_count: 0,
      producers_total_count: 0,
      settings: { delivery_paused: false },
    });
    expect(Date.parse(created.created_on!)).not.toBeNaN();
    const got = await cf.queues.get(queueId, { account_id });
    expect(got.queue_name).toBe("sdk-life");
    const listed: Cloudflare.Queues.Queue[] = [];
    for await (const q of cf.queues.list({ account_id })) listed.push(q);
    expect(listed.map((q) => q.queue_id)).toContain(queueId);

    // update (PUT) replaces the settings: what it leaves out is back to its default.
    await cf.queues.edit(queueId, { account_id, settings: { delivery_delay: 30, message_retention_period: 3600 } });
    const updated = await cf.queues.update(queueId, {
      account_id,
      queue_name: "sdk-life",
      settings: { message_retention_period: 7200 },
    });
    expect(updated.settings).toEqual({ delivery_delay: 0, delivery_paused: false, message_retention_period: 7200 });
    // edit (PATCH) changes only what it names.
    const edited = await cf.queues.edit(queueId, { account_id, settings: { delivery_paused: true } });
    expect(edited.settings).toEqual({ delivery_delay: 0, delivery_paused: true, message_retention_period: 7200 });
    await cf.queues.edit(queueId, { account_id, settings: { delivery_paused: false } });

    // Consumers: create, list, get, update (PUT), and the queue showing it whole.
    const consumer = (await cf.queues.consumers.create(queueId, {
      account_id,
      type: "http_pull",
      settings: { batch_size: 5, max_retries: 2, visibility_timeout_ms: 60_000 },
    })) as Cloudflare.Queues.Consumer.MqHTTPConsumerResponse;
    const consumerId = consumer.consumer_id!;
    expect(consumer).toMatchObject({
      type: "http_pull",
      queue_name: "sdk-life",
      settings: { batch_size: 5, max_retries: 2, visibility_timeout_ms: 60_000 },
    });
    const consumers: Cloudflare.Queues.Consumer[] = [];
    for await (const c of cf.queues.consumers.list(queueId, { account_id })) consumers.push(c);
    expect(consumers.map((c) => c.consumer_id)).toEqual([consumerId]);
    expect((await cf.queues.consumers.get(consumerId, { account_id, queue_id: queueId })).consumer_id).toBe(consumerId);
    const replaced = (await cf.queues.consumers.update(consumerId, {
      account_id,
      queue_id: queueId,
      type: "http_pull",
      settings: { batch_size: 10, visibility_timeout_ms: 60_000 },
    })) as Cloudflare.Queues.Consumer.MqHTTPConsumerResponse;
    // Replaced: max_retries, left out, is back to its default.
    expect(replaced.settings).toMatchObject({ batch_size: 10, max_retries: 3, visibility_timeout_ms: 60_000 });
    const whole = (await cf.queues.get(queueId, { account_id }))
      .consumers![0] as Cloudflare.Queues.Consumer.MqHTTPConsumerResponse;
    expect(whole).toMatchObject({ consumer_id: consumerId, type: "http_pull", settings: { batch_size: 10 } });

    // Messages: push, bulkPush, with the queue's figures as the SDK types them.
    const pushed = await cf.queues.messages.push(queueId, { account_id, body: "hello", content_type: "text" });
    expect(pushed.metadata?.metrics).toMatchObject({
      backlog_count: 1,
      backlog_bytes: expect.any(Number),
      oldest_message_timestamp_ms: expect.any(Number),
    });
    const bulk = await cf.queues.messages.bulkPush(queueId, {
      account_id,
      messages: [
        { body: { n: 1 }, content_type: "json" },
        { body: "two", content_type: "text" },
        { body: { n: 3 }, content_type: "json" },
      ],
    });
    expect(bulk.metadata?.metrics?.backlog_count).toBe(4);

    // peek leases nothing, and gives refs that messages.purge deletes by.
    const peeked = await cf.queues.messages.peek(queueId, { account_id, batch_size: 10 });
    expect(peeked.messages).toHaveLength(4);
    expect(peeked.messages![0]).toMatchObject({
      body: "hello",
      attempts: 0,
      metadata: { "CF-Content-Type": "text" },
      ref: expect.any(String),
      timestamp_ms: expect.any(Number),
    });
    // A JSON body comes base64-encoded, as a pull gives it (CF-Content-Type says so).
    const json = (m: { body?: string; metadata?: unknown }) =>
      (m.metadata as Record<string, string>)["CF-Content-Type"] === "json"
        ? JSON.parse(Buffer.from(m.body!, "base64").toString("utf8"))
        : undefined;
    const doomed = peeked.messages!.find((m) => json(m)?.n === 3)!;
    const purgedRefs = await cf.queues.messages.purge(queueId, { account_id, refs: [{ ref: doomed.ref! }] });
    expect(purgedRefs.warnings).toEqual({});
    expect((await cf.queues.messages.peek(queueId, { account_id })).messages).toHaveLength(3);

    // pull, then ack one and retry another.
    const pulled = await cf.queues.messages.pull(queueId, {
      account_id,
      batch_size: 10,
      visibility_timeout_ms: 60_000,
    });
    expect(pulled.messages).toHaveLength(3);
    expect(pulled.message_backlog_count).toBe(3);
    expect(pulled.metadata?.metrics?.backlog_count).toBe(3);
    const [first, second, third] = pulled.messages!;
    expect(first).toMatchObject({ id: expect.any(String), lease_id: expect.any(String), attempts: 1, body: "hello" });
    const acked = await cf.queues.messages.ack(queueId, {
      account_id,
      acks: [{ lease_id: first!.lease_id! }, { lease_id: second!.lease_id! }],
      retries: [{ lease_id: third!.lease_id!, delay_seconds: 0 }],
    });
    expect(acked).toEqual({ ackCount: 2, retryCount: 1, warnings: {} });

    // metrics.
    const metrics = await cf.queues.getMetrics(queueId, { account_id });
    expect(metrics.backlog_count).toBe(1);
    expect(metrics.backlog_bytes).toBeGreaterThan(0);

    // purge start answers the queue; status says when it started and that it completed.
    const before = Date.now();
    const purge = await cf.queues.purge.start(queueId, { account_id, delete_messages_permanently: true });
    expect(purge.queue_id).toBe(queueId);
    expect(purge.queue_name).toBe("sdk-life");
    expect(purge).toMatchObject({ purged: 1, completed: true });
    const status = await cf.queues.purge.status(queueId, { account_id });
    expect(status.completed).toBe("true");
    expect(Date.parse(status.started_at!)).toBeGreaterThanOrEqual(before - 5000);
    expect((await cf.queues.getMetrics(queueId, { account_id })).backlog_count).toBe(0);

    // consumers delete, queues delete: the whole envelope, as the SDK types them.
    expect(await cf.queues.consumers.delete(consumerId, { account_id, queue_id: queueId })).toMatchObject({
      success: true,
      errors: [],
    });
    expect(await cf.queues.delete(queueId, { account_id })).toMatchObject({ success: true, errors: [] });
    await expect(cf.queues.get(queueId, { account_id })).rejects.toBeInstanceOf(Cloudflare.NotFoundError);

    expect(callsSince(from, queueId)).toEqual([
      "POST /client/v4/accounts/local/queues",
      "GET Q",
      "GET /client/v4/accounts/local/queues",
      "PATCH Q",
      "PUT Q",
      "PATCH Q",
      "PATCH Q",
      "POST Q/consumers",
      "GET Q/consumers",
      `GET Q/consumers/${consumerId}`,
      `PUT Q/consumers/${consumerId}`,
      "GET Q",
      "POST Q/messages",
      "POST Q/messages/batch",
      "POST Q/messages/peek",
      "POST Q/messages/purge",
      "POST Q/messages/peek",
      "POST Q/messages/pull",
      "POST Q/messages/ack",
      "GET Q/metrics",
      "POST Q/purge",
      "GET Q/purge",
      "GET Q/metrics",
      `DELETE Q/consumers/${consumerId}`,
      "DELETE Q",
      "GET Q",
    ]);
  });

  it("manages a Worker consumer: create with settings and a dead-letter queue, get, replace, and adds one by PUT", async () => {
    const queue = await cf.queues.create({ account_id, queue_name: "sdk-worker" });
    const dlq = await cf.queues.create({ account_id, queue_name: "sdk-worker-dlq" });
    const queueId = queue.queue_id!;
    const consumer = (await cf.queues.consumers.create(queueId, {
      account_id,
      type: "worker",
      script_name: "shardq-example-consumer",
      dead_letter_queue: "sdk-worker-dlq",
      settings: { batch_size: 20, max_retries: 5, max_wait_time_ms: 1000, retry_delay: 2 },
    })) as Cloudflare.Queues.Consumer.MqWorkerConsumerResponse;
    expect(consumer).toMatchObject({
      type: "worker",
      script_name: "shardq-example-consumer",
      dead_letter_queue: "sdk-worker-dlq",
      settings: { batch_size: 20, max_retries: 5, max_wait_time_ms: 1000, retry_delay: 2 },
    });
    const replaced = (await cf.queues.consumers.update(consumer.consumer_id!, {
      account_id,
      queue_id: queueId,
      type: "worker",
      script_name: "shardq-example-consumer",
      settings: { batch_size: 30, max_concurrency: 2 },
    })) as Cloudflare.Queues.Consumer.MqWorkerConsumerResponse;
    expect(replaced).toMatchObject({
      consumer_id: consumer.consumer_id,
      settings: { batch_size: 30, max_concurrency: 2, max_retries: 3, retry_delay: 0 },
    });
    // No dead_letter_queue in a replacement: none.
    expect(replaced.dead_letter_queue ?? "").toBe("");
    const got = (await cf.queues.consumers.get(consumer.consumer_id!, {
      account_id,
      queue_id: queueId,
    })) as Cloudflare.Queues.Consumer.MqWorkerConsumerResponse;
    expect(got.settings?.batch_size).toBe(30);
    await cf.queues.consumers.delete(consumer.consumer_id!, { account_id, queue_id: queueId });

    // update of a consumer the queue lacks adds it, under the id asked for.
    const id = "00000000000000000000000000c0ffee";
    const added = await cf.queues.consumers.update(id, {
      account_id,
      queue_id: queueId,
      type: "worker",
      script_name: "shardq-example-consumer",
    });
    expect(added.consumer_id).toBe(id);
    // A second consumer is refused: a queue has one.
    const other = await cf.queues.consumers
      .create(queueId, { account_id, type: "http_pull" }, { maxRetries: 0 })
      .catch((e: unknown) => e);
    expect(other).toBeInstanceOf(Cloudflare.ConflictError);
    await cf.queues.delete(queueId, { account_id });
    await cf.queues.delete(dlq.queue_id!, { account_id });
  });

  it("refuses event subscriptions with a 501 that says why, without the SDK retrying", async () => {
    const from = sent.length;
    const err = await cf.queues.subscriptions
      .create({ account_id, name: "r2-events", source: { type: "r2" }, events: ["object-create"] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Cloudflare.APIError);
    expect((err as InstanceType<typeof Cloudflare.APIError>).status).toBe(501);
    expect((err as Error).message).toContain("shardq does not serve event subscriptions");
    const listErr = await (async () => {
      for await (const _ of cf.queues.subscriptions.list({ account_id })) return null;
      return null;
    })().catch((e: unknown) => e);
    expect((listErr as InstanceType<typeof Cloudflare.APIError>).status).toBe(501);
    // One request each: x-should-retry: false kept the SDK from asking again.
    expect(sent.slice(from).map((s) => `${s.method} ${s.path}`)).toEqual([
      "POST /client/v4/accounts/local/event_subscriptions/subscriptions",
      "GET /client/v4/accounts/local/event_subscriptions/subscriptions",
    ]);
  });

  it("is refused as Cloudflare would refuse it: a wrong token, a change of jurisdiction", async () => {
    const wrong = new Cloudflare({ apiToken: "not-a-token", baseURL: `${service!.base}/client/v4`, maxRetries: 0 });
    await expect(wrong.queues.get("whatever", { account_id })).rejects.toBeInstanceOf(Cloudflare.AuthenticationError);
    // A jurisdiction is chosen at creation (docs/jurisdictions.md), shown as the SDK types it, and kept.
    const eu = await cf.queues.create({ account_id, queue_name: "sdk-eu", jurisdiction: "eu" });
    expect(eu.jurisdiction).toBe("eu");
    expect((await cf.queues.get(eu.queue_id!, { account_id })).jurisdiction).toBe("eu");
    const moved = await cf.queues.edit(eu.queue_id!, { account_id, jurisdiction: "us" }).catch((e: unknown) => e);
    expect(moved).toBeInstanceOf(Cloudflare.BadRequestError);
    expect((moved as Error).message).toContain("jurisdiction");
    expect(
      (await cf.queues.edit(eu.queue_id!, { account_id, jurisdiction: "eu", settings: { delivery_delay: 2 } })).settings
        ?.delivery_delay,
    ).toBe(2);
    await cf.queues.delete(eu.queue_id!, { account_id });
  });
});
