/**
 * Hostile input (hostile-input-helpers.ts): bodies whose content type is not JSON, on every
 * route that takes a body.
 */
import { describe, it } from "vitest";
import { queuesPath } from "./helpers";
import { type Case, P, refused } from "./hostile-input-helpers";

const CASES: Record<string, Array<[string, Case]>> = {
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
};

describe("hostile input: the right 4xx, a JSON error naming the field, nothing stored", () => {
  for (const [group, cases] of Object.entries(CASES)) {
    describe(group, () => {
      it.each(cases)("%s", async (_what, c) => refused(c));
    });
  }
});
