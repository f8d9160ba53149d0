/**
 * Hostile input (hostile-input-helpers.ts): numeric fields and query parameters out of range or
 * of the wrong type.
 */
import { describe, it } from "vitest";
import { queuesPath } from "./helpers";
import { type Case, hex, JSON_TYPE, P, refused } from "./hostile-input-helpers";

const CASES: Record<string, Array<[string, Case]>> = {
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
      it.each(cases)("%s", async (_what, c) => refused(c));
    });
  }
});
