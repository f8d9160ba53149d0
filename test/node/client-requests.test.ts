// The client library's requests, against a fetch the test answers: what it sends, when it
// sends again (network errors, 429 after its Retry-After, 503; never a 4xx), how a batch is
// cut into requests, and the typed errors with the API's field names.
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  AbortedError,
  ApiError,
  createClient,
  InvalidRequestError,
  NetworkError,
  NotFoundError,
  PartialSendError,
  PayloadTooLargeError,
  RateLimitedError,
  UnavailableError,
  backoffMs,
  type FetchLike,
} from "../../src/client/index.ts";
import { sleep } from "../../src/kernel/sleep.ts";

interface Sent {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: any;
}

/** A fetch that records each request and answers with the next of `answers` (the last one repeats). */
function fakeService(answers: Array<(req: Sent) => Response | Promise<Response>>) {
  const sent: Sent[] = [];
  const fetch: FetchLike = async (url, init) => {
    const req: Sent = {
      url,
      method: String(init.method),
      headers: init.headers as Record<string, string>,
      body: init.body ? JSON.parse(String(init.body)) : undefined,
    };
    sent.push(req);
    return answers[Math.min(sent.length - 1, answers.length - 1)]!(req);
  };
  return { sent, fetch };
}

const ok = (result: unknown) => () => Response.json({ success: true, errors: [], messages: [], result });
const fail =
  (
    status: number,
    errors: Array<{ code?: number; message: string; field?: string }>,
    headers: Record<string, string> = {},
  ) =>
  () =>
    Response.json({ success: false, errors, messages: [], result: null }, { status, headers });
const refused = () => {
  throw new TypeError("fetch failed", { cause: { code: "ECONNREFUSED" } });
};
/** Answers a batch with one id per message, numbered from `from`. */
const batchIds = (from: { n: number }) => (req: Sent) =>
  ok({ message_ids: req.body.messages.map(() => `id${from.n++}`) })();

const client = (fetch: FetchLike, opts: Record<string, unknown> = {}) =>
  createClient({
    url: "http://shardq.test/",
    token: "t0ken",
    fetch,
    retry: { attempts: 4, baseDelayMs: 1, maxDelayMs: 2 },
    ...opts,
  });

afterEach(() => {
  vi.useRealTimers();
});

describe("client requests", () => {
  it("sends a message with the token, the API's field names and an idempotency key kept across retries", async () => {
    const svc = fakeService([
      refused,
      fail(503, [{ code: 10008, message: "no shard answered" }], { "retry-after": "0" }),
      ok({ message_id: "m1" }),
    ]);
    const r = await client(svc.fetch).queue("orders").send({ n: 1 }, { delaySeconds: 5, orderingKey: "k1" });
    expect(r).toEqual({ messageId: "m1" });
    expect(svc.sent).toHaveLength(3);
    const [first] = svc.sent;
    expect(first!.url).toBe("http://shardq.test/accounts/local/queues/orders/messages");
    expect(first!.method).toBe("POST");
    expect(first!.headers.authorization).toBe("Bearer t0ken");
    expect(first!.body).toEqual({ body: { n: 1 }, delay_seconds: 5, ordering_key: "k1" });
    // One key for the request, the same on every try.
    const keys = new Set(svc.sent.map((s) => s.headers["idempotency-key"]));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(/^[\x21-\x7e]{1,255}$/);
    // Another send is another request: another key.
    await client(svc.fetch).queue("orders").send({ n: 2 });
    expect(svc.sent.at(-1)!.headers["idempotency-key"]).not.toBe([...keys][0]);
  });

  it("sends no key of its own when idempotentSends is false, and the caller's key when given", async () => {
    const svc = fakeService([ok({ message_id: "m1" })]);
    await client(svc.fetch, { idempotentSends: false }).queue("q").send("x", { contentType: "text" });
    expect(svc.sent[0]!.headers["idempotency-key"]).toBeUndefined();
    expect(svc.sent[0]!.body).toEqual({ body: "x", content_type: "text" });
    await client(svc.fetch, { idempotentSends: false }).queue("q").send("x", { idempotencyKey: "order-42" });
    expect(svc.sent[1]!.headers["idempotency-key"]).toBe("order-42");
  });

  it("never sends a 4xx again, and throws the class of its status with the API's field", async () => {
    const svc = fakeService([
      fail(400, [{ code: 10001, message: "wait_time_ms: must be at most 20000 ms", field: "wait_time_ms" }]),
    ]);
    const err = await client(svc.fetch)
      .queue("q")
      .pull({ waitTimeMs: 20_000 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(InvalidRequestError);
    expect(err).toBeInstanceOf(ApiError);
    expect(err.status).toBe(400);
    expect(err.field).toBe("wait_time_ms");
    expect(err.code).toBe(10001);
    expect(svc.sent).toHaveLength(1);

    const gone = fakeService([fail(404, [{ code: 10004, message: 'queue "q" not found', field: "queue" }])]);
    await expect(client(gone.fetch).queue("q").send(1)).rejects.toBeInstanceOf(NotFoundError);
    expect(gone.sent).toHaveLength(1);
  });

  it("refuses what the API would refuse before sending anything, naming the field as the API does", async () => {
    const svc = fakeService([ok({})]);
    const q = client(svc.fetch).queue("q");
    const cases: Array<[Promise<unknown>, string, typeof ApiError]> = [
      [q.send(1, { delaySeconds: 86_401 }), "delay_seconds", InvalidRequestError],
      [q.send("x".repeat(128_001), { contentType: "text" }), "body", PayloadTooLargeError],
      [q.send(1, { orderingKey: "" }), "ordering_key", InvalidRequestError],
      [q.send(1, { idempotencyKey: "has space" }), "idempotency-key", InvalidRequestError],
      [
        q.sendBatch([{ body: 1 }, { body: 2, contentType: "bytes" as never }]),
        "messages[1].content_type",
        InvalidRequestError,
      ],
      [q.sendBatch([{ body: 1 }, { body: 2, id: "NOT-HEX" }]), "messages[1].id", InvalidRequestError],
      [q.sendBatch([]), "messages", InvalidRequestError],
      [q.pull({ waitTimeMs: 20_001 }), "wait_time_ms", InvalidRequestError],
      [q.pull({ waitTimeMs: 1.5 }), "wait_time_ms", InvalidRequestError],
      [q.pull({ batchSize: 101 }), "batch_size", InvalidRequestError],
    ];
    for (const [promise, field, Class] of cases) {
      const err = (await promise.catch((e) => e)) as ApiError;
      expect(err, field).toBeInstanceOf(Class);
      expect(err.field).toBe(field);
      expect(err.sent).toBe(false);
    }
    expect(svc.sent).toHaveLength(0);
  });

  it("cuts a batch at 100 messages and at 256 KB of bodies, sends the parts in order, and answers every id in order", async () => {
    const counter = { n: 0 };
    const svc = fakeService([batchIds(counter)]);
    const q = client(svc.fetch).queue("q");
    const many = await q.sendBatch(
      Array.from({ length: 250 }, (_, i) => ({ body: { i }, orderingKey: `k${i % 3}` })),
      { delaySeconds: 2 },
    );
    expect(svc.sent.map((s) => s.body.messages.length)).toEqual([100, 100, 50]);
    expect(svc.sent.every((s) => s.body.delay_seconds === 2)).toBe(true);
    expect(svc.sent.flatMap((s) => s.body.messages.map((m: { body: { i: number } }) => m.body.i))).toEqual(
      Array.from({ length: 250 }, (_, i) => i),
    );
    expect(many).toEqual({ messageIds: Array.from({ length: 250 }, (_, i) => `id${i}`), requests: 3 });

    // 100,000-byte text bodies: two fit under 256,000 bytes, a third does not.
    svc.sent.length = 0;
    const big = "y".repeat(100_000);
    const r = await q.sendBatch(Array.from({ length: 5 }, () => ({ body: big, contentType: "text" as const })));
    expect(svc.sent.map((s) => s.body.messages.length)).toEqual([2, 2, 1]);
    expect(r.requests).toBe(3);

    // Bodies that escape to six times their size on the wire stay under the broker's 1 MiB request limit.
    svc.sent.length = 0;
    const controls = "\u0001".repeat(100_000);
    await q.sendBatch(Array.from({ length: 3 }, () => ({ body: controls, contentType: "text" as const })));
    for (const s of svc.sent) expect(JSON.stringify(s.body).length).toBeLessThanOrEqual(1_048_576);
    expect(svc.sent.length).toBeGreaterThan(1);
  });

  it("gives each part of a split batch its own key, derived from the caller's so that sending the batch again repeats them", async () => {
    const counter = { n: 0 };
    const svc = fakeService([batchIds(counter)]);
    const q = client(svc.fetch).queue("q");
    const batch = Array.from({ length: 201 }, (_, i) => ({ body: i }));
    await q.sendBatch(batch, { idempotencyKey: "import-7" });
    await q.sendBatch(batch, { idempotencyKey: "import-7" });
    expect(svc.sent.map((s) => s.headers["idempotency-key"])).toEqual([
      "import-7",
      "import-7.1",
      "import-7.2",
      "import-7",
      "import-7.1",
      "import-7.2",
    ]);
  });

  it("reports a part that failed after others were stored, with the stored ids and the failed message's place in the whole batch", async () => {
    const counter = { n: 0 };
    const svc = fakeService([
      batchIds(counter),
      fail(413, [{ code: 10006, message: "messages[7].body: is 130000 bytes", field: "messages[7].body" }]),
    ]);
    const err = await client(svc.fetch)
      .queue("q")
      .sendBatch(Array.from({ length: 150 }, (_, i) => ({ body: i })))
      .catch((e) => e);
    expect(err).toBeInstanceOf(PartialSendError);
    expect(err.acceptedIds).toHaveLength(100);
    expect(err.cause).toBeInstanceOf(PayloadTooLargeError);
    expect(err.cause.field).toBe("messages[107].body");
    expect(err.cause.message).toBe("messages[107].body: is 130000 bytes");
  });

  it("waits out a 429's Retry-After before sending again", async () => {
    vi.useFakeTimers();
    const svc = fakeService([
      fail(429, [{ code: 10010, message: "rate limited" }], { "retry-after": "2" }),
      ok({ message_id: "m" }),
    ]);
    const done = client(svc.fetch).queue("q").send(1);
    await vi.advanceTimersByTimeAsync(1_999);
    expect(svc.sent).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(10);
    expect(svc.sent).toHaveLength(2);
    await expect(done).resolves.toEqual({ messageId: "m" });
  });

  it("gives up after its attempts with the last error, typed", async () => {
    const down = fakeService([refused]);
    const err = await client(down.fetch)
      .queue("q")
      .send(1)
      .catch((e) => e);
    expect(err).toBeInstanceOf(NetworkError);
    expect(err.code).toBe("ECONNREFUSED");
    expect(err.message).toBe("cannot reach http://shardq.test: connection refused");
    expect(down.sent).toHaveLength(4);

    const busy = fakeService([fail(429, [{ message: "slow down" }])]);
    const limited = await client(busy.fetch)
      .queue("q")
      .send(1)
      .catch((e) => e);
    expect(limited).toBeInstanceOf(RateLimitedError);
    expect(busy.sent).toHaveLength(4);

    const unavailable = fakeService([fail(503, [{ message: "try again" }])]);
    await expect(
      client(unavailable.fetch, { retry: { attempts: 1 } })
        .queue("q")
        .send(1),
    ).rejects.toBeInstanceOf(UnavailableError);
    expect(unavailable.sent).toHaveLength(1);
  });

  it("backs off with full jitter under a cap that doubles per retry", () => {
    const policy = { attempts: 10, baseDelayMs: 100, maxDelayMs: 1000 };
    const at = (retry: number, r: number) => backoffMs(retry, { ...policy, random: () => r });
    expect([1, 2, 3, 4, 5].map((n) => at(n, 0.999_999))).toEqual([100, 200, 400, 800, 1000].map((n) => n * 0.999_999));
    expect(at(3, 0)).toBe(0);
    expect(at(3, 0.5)).toBe(200);
  });

  it("decodes pulled bodies as they were sent, and sends acks and retries in the API's shape", async () => {
    const b64 = (s: string) => btoa(String.fromCharCode(...new TextEncoder().encode(s)));
    const svc = fakeService([
      ok({
        message_backlog_count: 3,
        messages: [
          {
            id: "a",
            body: b64(JSON.stringify({ é: 1 })),
            timestamp_ms: 1_700_000_000_000,
            attempts: 1,
            lease_id: "L1",
            metadata: { "CF-Content-Type": "json" },
          },
          {
            id: "b",
            body: "plain",
            timestamp_ms: 1_700_000_000_001,
            attempts: 2,
            lease_id: "L2",
            metadata: { "CF-Content-Type": "text" },
            ordering_key: "k",
          },
          {
            id: "c",
            body: b64("\u0000\u0001"),
            timestamp_ms: 1_700_000_000_002,
            attempts: 1,
            lease_id: "L3",
            metadata: { "CF-Content-Type": "bytes" },
          },
        ],
      }),
      ok({ ackCount: 1, retryCount: 1, warnings: {} }),
    ]);
    const q = client(svc.fetch).queue("q");
    const pulled = await q.pull({ batchSize: 3, waitTimeMs: 1000, visibilityTimeoutMs: 5000 });
    expect(svc.sent[0]!.body).toEqual({ batch_size: 3, wait_time_ms: 1000, visibility_timeout_ms: 5000 });
    expect(pulled.backlogCount).toBe(3);
    expect(pulled.messages.map((m) => m.body)).toEqual([{ é: 1 }, "plain", new Uint8Array([0, 1])]);
    expect(pulled.messages[1]).toMatchObject({
      id: "b",
      attempts: 2,
      orderingKey: "k",
      leaseId: "L2",
      contentType: "text",
      timestamp: new Date(1_700_000_000_001),
    });
    await q.ack({ acks: ["L1"], retries: [{ leaseId: "L2", delaySeconds: 30 }] });
    expect(svc.sent[1]!.body).toEqual({ acks: [{ lease_id: "L1" }], retries: [{ lease_id: "L2", delay_seconds: 30 }] });
  });

  it("reaches any other route with the same token and typed errors", async () => {
    const svc = fakeService([
      ok([{ queue_name: "a" }]),
      fail(409, [{ code: 10005, message: "taken", field: "queue_name" }]),
    ]);
    const c = client(svc.fetch);
    expect(await c.request("GET", "/queues", { query: { page: 2, name: undefined } })).toEqual([{ queue_name: "a" }]);
    expect(svc.sent[0]!.url).toBe("http://shardq.test/accounts/local/queues?page=2");
    const err = (await c.request("POST", "/queues", { body: { queue_name: "a" } }).catch((e) => e)) as ApiError;
    expect(err.name).toBe("ConflictError");
    expect(err.field).toBe("queue_name");
  });

  it("ends an aborted long poll with AbortedError, after telling the service its wait_id went away", async () => {
    const gone = new AbortController();
    const svc = fakeService([
      (req) =>
        new Promise<Response>((_, reject) => {
          expect(req.body.wait_id).toMatch(/^[A-Za-z0-9_-]{16,64}$/);
          gone.signal.addEventListener("abort", () => reject(gone.signal.reason));
        }),
      ok({ cancelled: true }),
    ]);
    const pending = client(svc.fetch).queue("q").pull({ waitTimeMs: 20_000, signal: gone.signal });
    await sleep(10);
    gone.abort();
    const err = await pending.catch((e) => e);
    expect(err).toBeInstanceOf(AbortedError);
    expect(svc.sent.map((s) => s.url)).toEqual([
      "http://shardq.test/accounts/local/queues/q/messages/pull",
      "http://shardq.test/accounts/local/queues/q/messages/pull/cancel",
    ]);
    expect(svc.sent[1]!.body).toEqual({ wait_id: svc.sent[0]!.body.wait_id });
    // A long poll nobody can abort is not named.
    const plain = fakeService([ok({ messages: [], message_backlog_count: 0 })]);
    await client(plain.fetch).queue("q").pull({ waitTimeMs: 1000 });
    expect(plain.sent[0]!.body).toEqual({ wait_time_ms: 1000 });
  });
});
