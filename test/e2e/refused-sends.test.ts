// A refused send is the caller's error, not shardq's crash: through the producer binding
// (send() and sendBatch(), from a user's Worker in its own `wrangler dev` under `shardq dev`,
// as in real use) and over HTTP (POST .../messages and .../messages/batch), each refusal
// rejects the caller's call with the message Cloudflare's own binding or API would give (a
// chosen id used for another message: the message of shardq's HTTP API), and
// nothing in the log of any process says a Worker crashed or hung. Before the fix shardq's
// log showed, for every refused binding call, `✘ [ERROR] Uncaught TypeError: body: must be a
// string...` with its stack, then "The Workers runtime canceled this request because it
// detected that your Worker's code had hung" (broker/producer/refusal.ts says why).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOneProducer, type OneProducerSession } from "./one-producer-session.ts";
import { sleep } from "../../src/kernel/sleep.ts";

const QUEUE = "refused-jobs";
/** What a log must not say after a refusal, in any process's output. */
const CRASH = /Uncaught|had hung|canceled this request|\[ERROR\]|✘/;

describe("refused sends", () => {
  let dev: OneProducerSession | undefined;

  beforeAll(async () => {
    dev = await startOneProducer(
      "refused-sends-producer",
      `[[queues.producers]]\nbinding = "JOBS"\nqueue = "${QUEUE}"\n`,
    );
  });

  afterAll(async () => {
    await dev?.stop();
  });

  it("reject the caller's call with its error and leave no uncaught error or hung request in any log", async () => {
    const d = dev!;
    const from = d.log().length;

    const binding: Array<[string, Parameters<OneProducerSession["call"]>[0], string, string]> = [
      [
        "send: text that is not a string",
        { op: "send", body: 5, options: { contentType: "text" } },
        "TypeError",
        'body: must be a string when content type is "text"',
      ],
      [
        "send: an unknown content type",
        { op: "send", body: "x", options: { contentType: "yaml" } },
        "TypeError",
        "options.contentType: must be one of json, text, bytes, v8",
      ],
      [
        "send: a message over 128 KB",
        { op: "send", body: "x".repeat(200_000), options: { contentType: "text" } },
        "RangeError",
        "body: is 200000 bytes; a message holds at most 128000 bytes",
      ],
      [
        "send: a delay over 24 h",
        { op: "send", body: 1, options: { delaySeconds: 86_401 } },
        "TypeError",
        "options.delaySeconds: must be at most 86400 (24 hours)",
      ],
      [
        "sendBatch: a bad message",
        { op: "sendBatch", messages: [{ body: 1 }, { body: 5, contentType: "text" }] },
        "TypeError",
        'messages[1].body: must be a string when content type is "text"',
      ],
      [
        "sendBatch: more than 100 messages",
        { op: "sendBatch", messages: Array.from({ length: 101 }, (_, i) => ({ body: i })) },
        "RangeError",
        "messages: holds 101 messages; a batch holds at most 100",
      ],
      [
        "sendBatch: an unknown option",
        { op: "sendBatch", messages: [{ body: 1 }], options: { delay: 5 } },
        "TypeError",
        "options.delay: is not a known field",
      ],
    ];
    for (const [what, call, name, message] of binding) {
      expect(await d.call(call), what).toEqual({ ok: false, name, message });
    }

    // A chosen id sent again with another message: shardq's own refusal (a 409 over HTTP).
    const id = "0000000000000000000000000000c0de";
    expect((await d.call({ op: "send", body: "first", options: { id } })).ok).toBe(true);
    const reused: Array<[string, Parameters<OneProducerSession["call"]>[0], string, string]> = [
      [
        "send: a bad id",
        { op: "send", body: 1, options: { id: "c0de" } },
        "TypeError",
        "id: must be 32 lowercase hex characters",
      ],
      [
        "send: an id sent with another body",
        { op: "send", body: "second", options: { id } },
        "Error",
        "id: was already sent to this queue with a different body, content type or delay in the last 24 hours",
      ],
      [
        "sendBatch: an id sent with another body",
        { op: "sendBatch", messages: [{ body: "second", id }] },
        "Error",
        "messages[0].id: was already sent to this queue with a different body, content type or delay in the last 24 hours",
      ],
    ];
    for (const [what, call, name, message] of reused) {
      expect(await d.call(call), what).toEqual({ ok: false, name, message });
    }

    const http: Array<[string, string, unknown, number, string]> = [
      [
        "HTTP send: text that is not a string",
        `/${QUEUE}/messages`,
        { body: 5, content_type: "text" },
        400,
        'body: must be a string when content type is "text"',
      ],
      [
        "HTTP send: a message over 128 KB",
        `/${QUEUE}/messages`,
        { body: "x".repeat(200_000), content_type: "text" },
        413,
        "body: is 200000 bytes; a message holds at most 128000 bytes",
      ],
      [
        "HTTP batch: a bad message",
        `/${QUEUE}/messages/batch`,
        { messages: [{ body: 1 }, { body: 5, content_type: "text" }] },
        400,
        'messages[1].body: must be a string when content type is "text"',
      ],
      [
        "HTTP batch: no messages",
        `/${QUEUE}/messages/batch`,
        { messages: [] },
        400,
        "messages: must hold at least one message",
      ],
    ];
    for (const [what, path, body, status, message] of http) {
      const r = await d.api("POST", path, body);
      expect(r.status, what).toBe(status);
      expect(r.json.errors[0].message, what).toBe(message);
    }

    // Nothing was stored but the id's first message, and both ways still send.
    const sent = await d.call({ op: "send", body: { ok: true } });
    expect(sent.ok, JSON.stringify(sent)).toBe(true);
    expect((await d.api("POST", `/${QUEUE}/messages`, { body: { ok: true } })).status).toBe(200);
    expect((await d.api("GET", `/${QUEUE}/metrics`)).json.result.backlog_count).toBe(3);

    // workerd's "hung" verdict came a moment after the call; give it time to show.
    await sleep(3000);
    const log = d.log().slice(from);
    // The log read is the right one: it has the refused requests in it.
    expect(log).toMatch(/\[shardq\] .*POST \/accounts\/local\/queues\/refused-jobs\/messages 400/);
    expect(log).toMatch(/\[refused-sends-producer\] .*POST \/ 200/);
    expect(log.split("\n").filter((line) => CRASH.test(line))).toEqual([]);
  });
});
