/**
 * Hostile input (hostile-input-helpers.ts): CR, LF and other characters in names, paths, ids
 * and headers, and queue names outside the pattern.
 */
import { describe, it } from "vitest";
import { queuePath, queuesPath } from "./helpers";
import { big, type Case, hex, P, refused } from "./hostile-input-helpers";

const CASES: Record<string, Array<[string, Case]>> = {
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
};

describe("hostile input: the right 4xx, a JSON error naming the field, nothing stored", () => {
  for (const [group, cases] of Object.entries(CASES)) {
    describe(group, () => {
      it.each(cases)("%s", async (_what, c) => refused(c));
    });
  }
});
