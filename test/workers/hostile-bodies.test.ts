/**
 * Hostile input (hostile-input-helpers.ts): bodies that are too large, nested too deep, not
 * UTF-8, not JSON, or JSON of the wrong shape.
 */
import { describe, it } from "vitest";
import { queuesPath } from "./helpers";
import { big, type Case, JSON_TYPE, nest, P, refused } from "./hostile-input-helpers";

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
};

describe("hostile input: the right 4xx, a JSON error naming the field, nothing stored", () => {
  for (const [group, cases] of Object.entries(CASES)) {
    describe(group, () => {
      it.each(cases)("%s", async (_what, c) => refused(c));
    });
  }
});
