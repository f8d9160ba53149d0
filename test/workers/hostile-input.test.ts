/**
 * Hostile input. Every malformed, oversized, mistyped or out-of-range request
 * is answered with the right 4xx and a JSON error naming the field at fault, never a
 * 5xx, and leaves nothing behind: the queue's backlog, settings and consumers, and the
 * account's queues, are as they were before it.
 */
import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { DISCARD_LIMIT_BYTES, MAX_JSON_DEPTH } from "../../broker/http/read-json";
import { router } from "../../broker/http/router";
import { api, BASE, createQueue, queuePath, queuesPath, TOKEN } from "./helpers";

const Q = "hostile";
let ready: Promise<void> | undefined;
/** One queue with a pull consumer, so every route of the API has something to refuse. */
function hostileQueue(): Promise<void> {
  ready ??= (async () => {
    await createQueue(Q);
    const res = await api("POST", `${queuePath(Q)}/consumers`, { type: "http_pull" });
    expect(res.status).toBe(201);
  })();
  return ready;
}

/** What a refused request must not change. */
async function snapshot() {
  const [metrics, info, consumers] = await Promise.all([
    api("GET", `${queuePath(Q)}/metrics`),
    api("GET", queuePath(Q)),
    api("GET", `${queuePath(Q)}/consumers`),
  ]);
  return {
    backlog: metrics.json.result.backlog_count,
    settings: info.json.result.settings,
    consumers: consumers.json.result,
  };
}

const P = queuePath(Q);
const JSON_TYPE = { "content-type": "application/json" };
const nest = (depth: number, inner: string = "1") => "[".repeat(depth) + inner + "]".repeat(depth);
const big = (n: number) => "x".repeat(n);
const hex = "0123456789abcdef0123456789abcdef";

type Case = {
  method: string;
  path: string;
  body?: unknown;
  raw?: BodyInit;
  headers?: Record<string, string>;
  status: number;
  field: string;
};

/** [what, request, expected status, field]: grouped as the issue lists them. */
const CASES: Record<string, Array<[string, Case]>> = {
  "oversized bodies and batches": [
    [
      "a body over 1 MiB, its length declared",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: `{"body":"${big(1_100_000)}"}`,
        headers: JSON_TYPE,
        status: 413,
        field: "body",
      },
    ],
    [
      "a batch body over 1 MiB",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        raw: `{"messages":[{"body":"${big(1_100_000)}"}]}`,
        headers: JSON_TYPE,
        status: 413,
        field: "body",
      },
    ],
    [
      "a message over 128 KB",
      { method: "POST", path: `${P}/messages`, body: { body: big(128_000) }, status: 413, field: "body" },
    ],
    [
      "a batch of 101 messages",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: Array.from({ length: 101 }, (_, i) => ({ body: i })) },
        status: 413,
        field: "messages",
      },
    ],
    [
      "a batch over 256 KB",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [1, 2, 3].map(() => ({ body: big(90_000) })) },
        status: 413,
        field: "messages",
      },
    ],
    [
      "one message of a batch over 128 KB",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [{ body: 1 }, { body: big(128_001) }] },
        status: 413,
        field: "messages[1].body",
      },
    ],
    [
      "a queue create over 1 MiB",
      {
        method: "POST",
        path: queuesPath(),
        raw: `{"queue_name":"${big(1_100_000)}"}`,
        headers: JSON_TYPE,
        status: 413,
        field: "body",
      },
    ],
  ],
  "deeply nested JSON": [
    [
      "a message body nested 1,000 deep",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: `{"body":${nest(1000)}}`,
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
    [
      "a message body nested 200,000 deep",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: `{"body":${nest(200_000)}}`,
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
    [
      "objects nested in a batch",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        raw: `{"messages":[{"body":${'{"a":'.repeat(500)}1${"}".repeat(500)}}]}`,
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
    [
      "nesting in queue settings",
      {
        method: "PATCH",
        path: P,
        raw: `{"settings":${nest(5000, "{}")}}`,
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
    [
      "nesting in a pull",
      { method: "POST", path: `${P}/messages/pull`, raw: nest(10_000), headers: JSON_TYPE, status: 400, field: "body" },
    ],
  ],
  "invalid UTF-8": [
    [
      "a stray 0xFF byte",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: new Uint8Array([...new TextEncoder().encode('{"body":"a'), 0xff, ...new TextEncoder().encode('"}')]),
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
    [
      "an overlong encoding of '/'",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: new Uint8Array([...new TextEncoder().encode('{"body":"'), 0xc0, 0xaf, ...new TextEncoder().encode('"}')]),
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
    [
      "a truncated sequence",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        raw: new Uint8Array([
          ...new TextEncoder().encode('{"messages":[{"body":"'),
          0xe2,
          0x82,
          ...new TextEncoder().encode('"}]}'),
        ]),
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
    [
      "an encoded surrogate",
      {
        method: "POST",
        path: queuesPath(),
        raw: new Uint8Array([
          ...new TextEncoder().encode('{"queue_name":"'),
          0xed,
          0xa0,
          0x80,
          ...new TextEncoder().encode('"}'),
        ]),
        headers: JSON_TYPE,
        status: 400,
        field: "body",
      },
    ],
  ],
  "malformed JSON and the wrong shape": [
    [
      "truncated JSON",
      { method: "POST", path: `${P}/messages`, raw: '{"body": ', headers: JSON_TYPE, status: 400, field: "body" },
    ],
    [
      "trailing garbage",
      { method: "POST", path: `${P}/messages`, raw: '{"body": 1} x', headers: JSON_TYPE, status: 400, field: "body" },
    ],
    [
      "NaN",
      { method: "POST", path: `${P}/messages`, raw: '{"body": NaN}', headers: JSON_TYPE, status: 400, field: "body" },
    ],
    [
      "single quotes",
      { method: "POST", path: `${P}/messages`, raw: "{'body': 1}", headers: JSON_TYPE, status: 400, field: "body" },
    ],
    [
      "an empty body",
      { method: "POST", path: `${P}/messages`, raw: "", headers: JSON_TYPE, status: 400, field: "body" },
    ],
    [
      "a body of spaces",
      { method: "POST", path: `${P}/messages/batch`, raw: "   \n ", headers: JSON_TYPE, status: 400, field: "body" },
    ],
    ["an array", { method: "POST", path: `${P}/messages`, body: [1, 2], status: 400, field: "body" }],
    ["a string", { method: "POST", path: `${P}/messages/batch`, body: "messages", status: 400, field: "body" }],
    ["null", { method: "POST", path: queuesPath(), body: null, status: 400, field: "body" }],
    ["a missing body field", { method: "POST", path: `${P}/messages`, body: {}, status: 400, field: "body" }],
    [
      "an unknown field",
      { method: "POST", path: `${P}/messages`, body: { body: 1, priority: 9 }, status: 400, field: "priority" },
    ],
    [
      "a __proto__ key",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: '{"body":1,"__proto__":{"delay_seconds":5}}',
        headers: JSON_TYPE,
        status: 400,
        field: "__proto__",
      },
    ],
    [
      "a constructor key in settings",
      {
        method: "PATCH",
        path: P,
        raw: '{"settings":{"constructor":{"prototype":{}}}}',
        headers: JSON_TYPE,
        status: 400,
        field: "settings.constructor",
      },
    ],
    [
      "an unknown batch field",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [{ body: 1 }], ordered: true },
        status: 400,
        field: "ordered",
      },
    ],
    [
      "messages that is not an array",
      { method: "POST", path: `${P}/messages/batch`, body: { messages: { body: 1 } }, status: 400, field: "messages" },
    ],
    [
      "an empty batch",
      { method: "POST", path: `${P}/messages/batch`, body: { messages: [] }, status: 400, field: "messages" },
    ],
    [
      "a batch entry that is not an object",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [{ body: 1 }, "two"] },
        status: 400,
        field: "messages[1]",
      },
    ],
    [
      "text with a non-string body",
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: { a: 1 }, content_type: "text" },
        status: 400,
        field: "body",
      },
    ],
  ],
  "wrong content types": [
    // On the routes Cloudflare serves, JSON is read as JSON whatever its content type (wrangler
    // sends text/plain; test/workers/cloudflare-rest.test.ts): a body that is not JSON either is the 415.
    [
      "text/plain, not JSON, on a send",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: "body=1",
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "a form (curl -d) on a batch",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        raw: "messages=1",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "multipart on a send",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: "--x\r\n\r\n1\r\n--x--",
        headers: { "content-type": "multipart/form-data; boundary=x" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "XML on a queue create",
      {
        method: "POST",
        path: queuesPath(),
        raw: "<queue/>",
        headers: { "content-type": "application/xml" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "JSON in UTF-16",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: '{"body":1}',
        headers: { "content-type": "application/json; charset=utf-16" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "JSON in Latin-1",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        raw: '{"messages":[{"body":1}]}',
        headers: { "content-type": "application/json;charset=iso-8859-1" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "text/plain, not JSON, on a pull",
      {
        method: "POST",
        path: `${P}/messages/pull`,
        raw: "batch_size=1",
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "text/plain, not JSON, on an ack",
      {
        method: "POST",
        path: `${P}/messages/ack`,
        raw: "acks=x",
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "text/plain, not JSON, on settings",
      {
        method: "PATCH",
        path: P,
        raw: "delivery_paused=true",
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "text/plain, not JSON, on a consumer",
      {
        method: "POST",
        path: `${P}/consumers`,
        raw: "type=http_pull",
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "text/plain, not JSON, on a purge",
      {
        method: "POST",
        path: `${P}/purge`,
        raw: "delete_messages_permanently=true",
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
    // shardq's own routes keep asking for application/json, JSON or not.
    [
      "text/plain JSON on a redrive",
      {
        method: "POST",
        path: `${P}/redrive`,
        raw: "{}",
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
    [
      "text/plain JSON on an extend",
      {
        method: "POST",
        path: `${P}/messages/extend`,
        raw: '{"lease_ids":["x"],"visibility_timeout_ms":5000}',
        headers: { "content-type": "text/plain" },
        status: 415,
        field: "content-type",
      },
    ],
  ],
  "CR, LF and other characters in names and headers": [
    [
      "a queue name with CRLF",
      { method: "POST", path: queuesPath(), body: { queue_name: "a\r\nb" }, status: 400, field: "queue_name" },
    ],
    [
      "a queue path with CRLF",
      { method: "POST", path: `${queuePath("a%0D%0Ab")}/messages`, body: { body: 1 }, status: 404, field: "queue" },
    ],
    [
      "a queue path with a bad escape",
      { method: "POST", path: `${queuePath("a%E0%A4%A")}/messages`, body: { body: 1 }, status: 400, field: "queue" },
    ],
    ["a queue path that climbs", { method: "GET", path: queuePath("..%2F..%2Fmetrics"), status: 404, field: "queue" }],
    [
      "a queue path of 5,000 characters",
      { method: "POST", path: `${queuePath(big(5000))}/messages`, body: { body: 1 }, status: 404, field: "queue" },
    ],
    [
      "a consumer script name with CRLF",
      {
        method: "POST",
        path: `${P}/consumers`,
        body: { type: "worker", script_name: "shardq\r\nexample\r\nconsumer" },
        status: 400,
        field: "script_name",
      },
    ],
    [
      "a script name that folds onto a binding",
      {
        method: "POST",
        path: `${P}/consumers`,
        body: { type: "worker", script_name: "shardq.example.consumer" },
        status: 400,
        field: "script_name",
      },
    ],
    [
      "a dead-letter queue name with CRLF",
      {
        method: "POST",
        path: `${P}/consumers`,
        body: { type: "http_pull", dead_letter_queue: "dlq\r\n" },
        status: 400,
        field: "dead_letter_queue",
      },
    ],
    [
      "a message id with CRLF",
      { method: "GET", path: `${P}/messages/${hex.slice(2)}%0D%0A`, status: 400, field: "message_id" },
    ],
    [
      "an Idempotency-Key with a space",
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: 1 },
        headers: { "idempotency-key": "a b" },
        status: 400,
        field: "idempotency-key",
      },
    ],
    [
      "an Idempotency-Key with a tab",
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: 1 },
        headers: { "idempotency-key": "a\tb" },
        status: 400,
        field: "idempotency-key",
      },
    ],
    [
      "an Idempotency-Key of Latin-1",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [{ body: 1 }] },
        headers: { "idempotency-key": "cl\u00e9" },
        status: 400,
        field: "idempotency-key",
      },
    ],
    [
      "an empty Idempotency-Key",
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: 1 },
        headers: { "idempotency-key": "" },
        status: 400,
        field: "idempotency-key",
      },
    ],
    [
      "an Idempotency-Key of 256 characters",
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: 1 },
        headers: { "idempotency-key": big(256) },
        status: 400,
        field: "idempotency-key",
      },
    ],
  ],
  "queue names outside the pattern": [
    ...(
      [
        ["upper case", "Orders"],
        ["a leading dash", "-orders"],
        ["a trailing dash", "orders-"],
        ["64 characters", "q".repeat(64)],
        ["nothing", ""],
        ["a non-ASCII letter", "caf\u00e9"],
        ["a space", "my queue"],
        ["a slash", "a/b"],
        ["an underscore", "my_queue"],
        ["the form of a queue id", hex],
        ["a number", 123],
        ["null", null],
      ] as Array<[string, unknown]>
    ).map(([what, name]): [string, Case] => [
      `a queue name with ${what}`,
      { method: "POST", path: queuesPath(), body: { queue_name: name }, status: 400, field: "queue_name" },
    ]),
    ["no queue name", { method: "POST", path: queuesPath(), body: { settings: {} }, status: 400, field: "queue_name" }],
  ],
  "numeric fields out of range or of the wrong type": [
    ...(
      [
        ["negative", -1],
        ["over 24 h", 86_401],
        ["fractional", 1.5],
        ["a string", "10"],
        ["a boolean", true],
        ["null", null],
        ["an object", { s: 1 }],
      ] as Array<[string, unknown]>
    ).map(([what, v]): [string, Case] => [
      `delay_seconds ${what}`,
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: 1, delay_seconds: v },
        status: 400,
        field: "delay_seconds",
      },
    ]),
    [
      "delay_seconds past the float range",
      {
        method: "POST",
        path: `${P}/messages`,
        raw: '{"body":1,"delay_seconds":1e400}',
        headers: JSON_TYPE,
        status: 400,
        field: "delay_seconds",
      },
    ],
    [
      "a batch's delay_seconds",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [{ body: 1 }], delay_seconds: -5 },
        status: 400,
        field: "delay_seconds",
      },
    ],
    [
      "a batch message's delay_seconds",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [{ body: 1 }, { body: 2, delay_seconds: "x" }] },
        status: 400,
        field: "messages[1].delay_seconds",
      },
    ],
    [
      "content_type bytes over HTTP",
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: "x", content_type: "bytes" },
        status: 400,
        field: "content_type",
      },
    ],
    [
      "content_type as a number",
      {
        method: "POST",
        path: `${P}/messages`,
        body: { body: "x", content_type: 5 },
        status: 400,
        field: "content_type",
      },
    ],
    [
      "a message id that is not hex",
      { method: "POST", path: `${P}/messages`, body: { body: 1, id: "XYZ" }, status: 400, field: "id" },
    ],
    [
      "a message id in upper case",
      { method: "POST", path: `${P}/messages`, body: { body: 1, id: hex.toUpperCase() }, status: 400, field: "id" },
    ],
    [
      "a message id of 31 characters",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: { messages: [{ body: 1, id: hex.slice(1) }] },
        status: 400,
        field: "messages[0].id",
      },
    ],
    [
      "a message id as a number",
      { method: "POST", path: `${P}/messages`, body: { body: 1, id: 5 }, status: 400, field: "id" },
    ],
    [
      "one message id twice in a batch",
      {
        method: "POST",
        path: `${P}/messages/batch`,
        body: {
          messages: [
            { body: 1, id: hex },
            { body: 2, id: hex },
          ],
        },
        status: 400,
        field: "messages[1].id",
      },
    ],
    [
      "batch_size 0",
      { method: "POST", path: `${P}/messages/pull`, body: { batch_size: 0 }, status: 400, field: "batch_size" },
    ],
    [
      "batch_size 101",
      { method: "POST", path: `${P}/messages/pull`, body: { batch_size: 101 }, status: 400, field: "batch_size" },
    ],
    [
      "batch_size as a string",
      { method: "POST", path: `${P}/messages/pull`, body: { batch_size: "5" }, status: 400, field: "batch_size" },
    ],
    [
      "visibility_timeout_ms under 1 s",
      {
        method: "POST",
        path: `${P}/messages/pull`,
        body: { visibility_timeout_ms: 999 },
        status: 400,
        field: "visibility_timeout_ms",
      },
    ],
    [
      "visibility_timeout_ms over 12 h",
      {
        method: "POST",
        path: `${P}/messages/pull`,
        body: { visibility_timeout_ms: 43_200_001 },
        status: 400,
        field: "visibility_timeout_ms",
      },
    ],
    [
      "acks that is not an array",
      { method: "POST", path: `${P}/messages/ack`, body: { acks: "all" }, status: 400, field: "acks" },
    ],
    [
      "a lease id as a number",
      {
        method: "POST",
        path: `${P}/messages/ack`,
        body: { acks: [{ lease_id: 5 }] },
        status: 400,
        field: "acks[0].lease_id",
      },
    ],
    [
      "101 acks",
      {
        method: "POST",
        path: `${P}/messages/ack`,
        body: { acks: Array.from({ length: 101 }, () => ({ lease_id: "x" })) },
        status: 400,
        field: "acks",
      },
    ],
    [
      "a retry delay over 24 h",
      {
        method: "POST",
        path: `${P}/messages/ack`,
        body: { retries: [{ lease_id: "x", delay_seconds: 86_401 }] },
        status: 400,
        field: "retries[0].delay_seconds",
      },
    ],
    [
      "an extend with no lease ids",
      {
        method: "POST",
        path: `${P}/messages/extend`,
        body: { lease_ids: [], visibility_timeout_ms: 5000 },
        status: 400,
        field: "lease_ids",
      },
    ],
    [
      "an extend with no timeout",
      {
        method: "POST",
        path: `${P}/messages/extend`,
        body: { lease_ids: ["x"] },
        status: 400,
        field: "visibility_timeout_ms",
      },
    ],
    [
      "delivery_delay as a string",
      {
        method: "PATCH",
        path: P,
        body: { settings: { delivery_delay: "0" } },
        status: 400,
        field: "settings.delivery_delay",
      },
    ],
    [
      "delivery_paused as a string",
      {
        method: "PATCH",
        path: P,
        body: { settings: { delivery_paused: "yes" } },
        status: 400,
        field: "settings.delivery_paused",
      },
    ],
    [
      "a retention under 60 s",
      {
        method: "PATCH",
        path: P,
        body: { settings: { message_retention_period: 59 } },
        status: 400,
        field: "settings.message_retention_period",
      },
    ],
    [
      "a retention over 14 days",
      {
        method: "PATCH",
        path: P,
        body: { settings: { message_retention_period: 1_209_601 } },
        status: 400,
        field: "settings.message_retention_period",
      },
    ],
    [
      "max_retries 101",
      {
        method: "POST",
        path: `${P}/consumers`,
        body: { type: "http_pull", settings: { max_retries: 101 } },
        status: 400,
        field: "settings.max_retries",
      },
    ],
    [
      "max_concurrency 0",
      {
        method: "POST",
        path: `${P}/consumers`,
        body: { type: "http_pull", settings: { max_concurrency: 0 } },
        status: 400,
        field: "settings.max_concurrency",
      },
    ],
    [
      "max_wait_time_ms as a string",
      {
        method: "POST",
        path: `${P}/consumers`,
        body: { type: "http_pull", settings: { max_wait_time_ms: "100" } },
        status: 400,
        field: "settings.max_wait_time_ms",
      },
    ],
    ["per_page 0", { method: "GET", path: `${queuesPath()}?per_page=0`, status: 400, field: "query.per_page" }],
    ["per_page 101", { method: "GET", path: `${queuesPath()}?per_page=101`, status: 400, field: "query.per_page" }],
    [
      "per_page as a word",
      { method: "GET", path: `${queuesPath()}?per_page=many`, status: 400, field: "query.per_page" },
    ],
    ["page 0", { method: "GET", path: `${queuesPath()}?page=0`, status: 400, field: "query.page" }],
    ["page 1.5", { method: "GET", path: `${queuesPath()}?page=1.5`, status: 400, field: "query.page" }],
    ...["0", "101", "1.5", "-1", "ten", "1e2"].map((v): [string, Case] => [
      `a peek limit of ${v}`,
      { method: "GET", path: `${P}/messages?limit=${v}`, status: 400, field: "limit" },
    ]),
    ["a redrive limit of 0", { method: "POST", path: `${P}/redrive`, body: { limit: 0 }, status: 400, field: "limit" }],
    [
      "a redrive rate over 5,000/s",
      {
        method: "POST",
        path: `${P}/redrive`,
        body: { messages_per_second: 5001 },
        status: 400,
        field: "messages_per_second",
      },
    ],
    [
      "a negative redrive filter",
      {
        method: "POST",
        path: `${P}/redrive`,
        body: { filter: { min_attempts: -1 } },
        status: 400,
        field: "filter.min_attempts",
      },
    ],
    [
      "a purge not asked for in so many words",
      {
        method: "POST",
        path: `${P}/purge`,
        body: { delete_messages_permanently: "true" },
        status: 400,
        field: "delete_messages_permanently",
      },
    ],
  ],
};

describe("hostile input: the right 4xx, a JSON error naming the field, nothing stored", () => {
  for (const [group, cases] of Object.entries(CASES)) {
    describe(group, () => {
      it.each(cases)("%s", async (_what, c) => {
        await hostileQueue();
        const before = await snapshot();
        const res = await api(c.method, c.path, c.body, { raw: c.raw, headers: c.headers });
        expect(res.status).toBe(c.status);
        expect(res.json).toMatchObject({ success: false, messages: [], result: null });
        expect(res.json.errors[0].field).toBe(c.field);
        expect(res.json.errors[0].message).toBeTruthy();
        expect(await snapshot()).toEqual(before);
        // A refused create leaves no queue behind by that name.
        const name = (c.body as { queue_name?: unknown } | undefined)?.queue_name;
        if (typeof name === "string" && /^[a-z0-9-]{1,63}$/.test(name))
          expect((await api("GET", queuePath(name))).status).toBe(404);
      });
    });
  }
});

describe("hostile input: bodies read with care", () => {
  /** A body sent chunked, with no length: `chunks` of `size` bytes, counting how many were read. */
  function chunked(prefix: string, chunks: number, size: number) {
    const pulled = { chunks: 0, cancelled: false };
    const filler = new TextEncoder().encode(big(size));
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(prefix));
      },
      pull(controller) {
        if (pulled.chunks === chunks) return controller.close();
        pulled.chunks++;
        controller.enqueue(filler);
      },
      cancel() {
        pulled.cancelled = true;
      },
    });
    return { body, pulled };
  }
  const post = (path: string, body: ReadableStream) =>
    router.fetch(
      new Request(`${BASE}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}`, ...JSON_TYPE },
        body,
      }),
      env,
      createExecutionContext(),
    );

  it("refuses a chunked body with no length once it passes 1 MiB, discards at most 32 MiB of it, and stores nothing", async () => {
    await hostileQueue();
    const before = await snapshot();
    // 64 MiB offered in 64 KiB chunks: refused after about 16 of them. The rest is read on,
    // kept nowhere, up to DISCARD_LIMIT_BYTES (so that the client gets the 413 rather than a
    // reset connection), then cancelled: never the whole 64 MiB.
    const { body, pulled } = chunked('{"body":"', 1024, 65_536);
    const res = await post(`${P}/messages`, body);
    expect(res.status).toBe(413);
    const json = (await res.json()) as { errors: Array<{ field: string }> };
    expect(json.errors[0]!.field).toBe("body");
    // 32 MiB is 512 chunks; the runtime may read a little ahead.
    expect(DISCARD_LIMIT_BYTES).toBe(32 * 1_048_576);
    expect(pulled.chunks).toBeLessThan(512 + 64);
    expect(pulled.cancelled).toBe(true);
    expect(await snapshot()).toEqual(before);
  });

  /** A body that fails after `bytes` bytes, as a body does when the client goes away mid-way. */
  function failing(bytes: number) {
    let sent = 0;
    return new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"body":"'));
      },
      pull(controller) {
        if (sent >= bytes)
          return controller.error(new Error("Network connection lost. (at file:///work/node_modules/x.ts:1:1)"));
        sent += 65_536;
        controller.enqueue(new TextEncoder().encode(big(65_536)));
      },
    });
  }

  it.each([
    ["before the limit: a 400", 100_000, 400],
    ["after the limit: the 413 all the same", 2_000_000, 413],
  ])(
    "answers a body whose stream fails mid-way %s naming body, with none of the error's internals, and stores nothing",
    async (_what, bytes, status) => {
      await hostileQueue();
      const before = await snapshot();
      const res = await post(`${P}/messages`, failing(bytes));
      const text = await res.text();
      expect(res.status, text).toBe(status);
      const json = JSON.parse(text) as { success: boolean; errors: Array<{ field: string; message: string }> };
      expect(json.success).toBe(false);
      expect(json.errors[0]!.field).toBe("body");
      for (const internal of ["file://", "node_modules", ".ts", "Network connection lost"])
        expect(text).not.toContain(internal);
      expect(await snapshot()).toEqual(before);
    },
  );

  it("accepts a chunked body with no length under the limit", async () => {
    await createQueue("hostile-chunked");
    const parts = ['{"body":', '"stream', 'ed"}'].map((t) => new TextEncoder().encode(t));
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = parts.shift();
        if (next) controller.enqueue(next);
        else controller.close();
      },
    });
    const res = await post(`${queuePath("hostile-chunked")}/messages`, body);
    expect(res.status).toBe(200);
    expect((await api("GET", `${queuePath("hostile-chunked")}/metrics`)).json.result.backlog_count).toBe(1);
  });

  it("takes the largest valid requests: 128 KB messages, 100 per batch, 256 KB batches, JSON nested to the limit", async () => {
    await createQueue("hostile-edges");
    const path = `${queuePath("hostile-edges")}/messages`;
    expect((await api("POST", path, { body: big(128_000 - 2) })).status).toBe(200);
    expect(
      (await api("POST", `${path}/batch`, { messages: Array.from({ length: 100 }, (_, i) => ({ body: i })) })).status,
    ).toBe(200);
    expect(
      (await api("POST", `${path}/batch`, { messages: [big(127_998), big(127_998)].map((b) => ({ body: b })) })).status,
    ).toBe(200);
    // {"body": ...} is one level: the body may nest MAX_JSON_DEPTH - 1 more.
    expect(
      (await api("POST", path, undefined, { raw: `{"body":${nest(MAX_JSON_DEPTH - 1)}}`, headers: JSON_TYPE })).status,
    ).toBe(200);
    expect(
      (await api("POST", path, undefined, { raw: `{"body":${nest(MAX_JSON_DEPTH)}}`, headers: JSON_TYPE })).status,
    ).toBe(400);
    // Charsets that are UTF-8 by another name, and JSON's structured suffix.
    for (const type of [
      "application/json; charset=UTF-8",
      "application/json;charset=utf8",
      "application/vnd.api+json",
    ]) {
      expect(
        (await api("POST", path, undefined, { raw: '{"body":"typed"}', headers: { "content-type": type } })).status,
      ).toBe(200);
    }
    expect((await api("GET", `${queuePath("hostile-edges")}/metrics`)).json.result.backlog_count).toBe(
      1 + 100 + 2 + 1 + 3,
    );
  });

  it("never lets a CR or LF inside a header value reach the service: the fetch API refuses it", () => {
    for (const value of ["a\r\nb", "a\nb", "a\rb", "a\0b"]) {
      expect(() => new Headers({ "idempotency-key": value })).toThrow(TypeError);
      expect(() => new Headers({ authorization: `Bearer ${value}` })).toThrow(TypeError);
    }
  });

  it("answers 500 mangled requests with a 4xx and a JSON error naming a field, never a 5xx", async () => {
    await hostileQueue();
    const before = await snapshot();
    // A fixed seed: the same mangled requests every run.
    let seed = 0x5eed;
    const rand = (n: number) => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) % n;
    const valid = [
      [`${P}/messages`, '{"body":{"order":42,"items":["a","b"]},"content_type":"json","delay_seconds":0}'],
      [
        `${P}/messages/batch`,
        '{"messages":[{"body":"x","content_type":"text"},{"body":[1,2],"delay_seconds":5}],"delay_seconds":1}',
      ],
      [`${P}/messages/pull`, '{"batch_size":5,"visibility_timeout_ms":30000}'],
      [`${P}/messages/ack`, '{"acks":[{"lease_id":"x"}],"retries":[{"lease_id":"y","delay_seconds":5}]}'],
      [P, '{"settings":{"delivery_delay":0,"message_retention_period":345600}}'],
    ] as const;
    const junk = [
      '"',
      "{",
      "}",
      "[",
      "]",
      ",",
      ":",
      "\\",
      "\u0000",
      "\ud800",
      "-",
      "1e999",
      "null",
      "\u00ff",
      "\n",
      "9999999",
    ];
    let stored = 0;
    for (let i = 0; i < 500; i++) {
      const [path, text] = valid[rand(valid.length)]!;
      const chars = [...text];
      for (let k = 1 + rand(4); k > 0; k--) {
        const at = rand(chars.length);
        if (rand(2) === 0) chars.splice(at, 1);
        else chars.splice(at, 0, junk[rand(junk.length)]!);
      }
      const raw = chars.join("");
      const res = await api(path === P ? "PATCH" : "POST", path, undefined, { raw, headers: JSON_TYPE });
      expect(res.status, `${path} ${raw}`).toBeLessThan(500);
      if (res.status >= 400) {
        expect(res.json.success, raw).toBe(false);
        expect(res.json.errors[0].field, raw).toBeTruthy();
      } else if (path.endsWith("/messages")) stored += 1;
      else if (path.endsWith("/batch")) stored += res.json.result.message_ids.length;
      if (path === P && res.status === 200) await api("PATCH", P, { settings: before.settings });
    }
    // Mangled sends that still parsed and validated were stored, and only those.
    const after = await snapshot();
    expect(after.backlog - before.backlog).toBe(stored);
    expect(after.settings).toEqual(before.settings);
    expect(after.consumers).toEqual(before.consumers);
  });
});
