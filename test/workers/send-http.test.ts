import { describe, expect, it } from "vitest";
import { decodeBody } from "../../src/kernel/encoding";
import { api, backlog, createQueue, queuePath, storedMessages } from "./helpers";

const msgs = (q: string) => `${queuePath(q)}/messages`;
const batch = (q: string) => `${queuePath(q)}/messages/batch`;

describe("sending over HTTP", () => {
  it("stores a JSON message and a text message and returns their ids", async () => {
    await createQueue("http-basic");
    const a = await api("POST", msgs("http-basic"), { body: { order: 1, items: ["x"] } });
    const b = await api("POST", msgs("http-basic"), { body: "plain words", content_type: "text" });
    expect(a.status).toBe(200);
    expect(a.json.result.message_id).toMatch(/^[0-9a-f]{32}$/);
    const { messages } = await storedMessages("http-basic");
    const byId = new Map(messages.map((m) => [m.id, m]));
    const ma = byId.get(a.json.result.message_id)!;
    const mb = byId.get(b.json.result.message_id)!;
    expect(ma.contentType).toBe("json");
    expect(decodeBody(ma.body, "json")).toEqual({ order: 1, items: ["x"] });
    expect(mb.contentType).toBe("text");
    expect(decodeBody(mb.body, "text")).toBe("plain words");
    expect(ma.attempts).toBe(0);
  });

  it("stores a batch with per-message and batch delays, and the queue's delivery_delay as fallback", async () => {
    await createQueue("http-delays", { delivery_delay: 7 });
    const res = await api("POST", batch("http-delays"), {
      delay_seconds: 60,
      messages: [{ body: 1 }, { body: 2, delay_seconds: 5 }, { body: "t", content_type: "text", delay_seconds: 0 }],
    });
    expect(res.status).toBe(200);
    const ids: string[] = res.json.result.message_ids;
    expect(ids).toHaveLength(3);
    const single = await api("POST", msgs("http-delays"), { body: "queue default" });
    const { messages } = await storedMessages("http-delays");
    const delay = (id: string) => {
      const m = messages.find((x) => x.id === id)!;
      return m.visibleAt - m.enqueuedAt;
    };
    expect(ids.map(delay)).toEqual([60_000, 5_000, 0]);
    expect(delay(single.json.result.message_id)).toBe(7_000);
  });

  it.each([
    ["missing body", {}, "body", "is required"],
    ["unknown content type", { body: "x", content_type: "xml" }, "content_type", '"json" or "text"'],
    ["bytes over HTTP", { body: "x", content_type: "bytes" }, "content_type", '"json" or "text"'],
    ["text with a non-string body", { body: { a: 1 }, content_type: "text" }, "body", "must be a string"],
    ["negative delay", { body: 1, delay_seconds: -1 }, "delay_seconds", "at least 0"],
    ["delay over 24 h", { body: 1, delay_seconds: 86_401 }, "delay_seconds", "at most 86400"],
    ["fractional delay", { body: 1, delay_seconds: 1.5 }, "delay_seconds", "whole number"],
    ["delay as a string", { body: 1, delay_seconds: "10" }, "delay_seconds", "number"],
    ["an unknown field", { body: 1, priority: 9 }, "priority", "not a known field"],
    ["a body that is not an object", [1, 2], "body", ""],
  ])("refuses %s with a 400 naming the field, storing nothing", async (_what, body, field, text) => {
    await createQueue(`bad-${field.replace(/_/g, "-")}-${Math.random().toString(16).slice(2, 8)}`).then(async (q) => {
      const res = await api("POST", msgs(q.queue_name), body);
      expect(res.status).toBe(400);
      expect(res.json.success).toBe(false);
      expect(res.json.errors[0].field).toBe(field);
      expect(res.json.errors[0].message).toContain(text);
      expect(await backlog(q.queue_name)).toBe(0);
    });
  });

  it("refuses malformed JSON, a non-JSON content type and an empty body", async () => {
    await createQueue("http-malformed");
    const broken = await api("POST", msgs("http-malformed"), undefined, {
      raw: '{"body": ',
      headers: { "content-type": "application/json" },
    });
    expect(broken.status).toBe(400);
    expect(broken.json.errors[0].message).toContain("malformed JSON");
    const xml = await api("POST", msgs("http-malformed"), undefined, {
      raw: "<m/>",
      headers: { "content-type": "application/xml" },
    });
    expect(xml.status).toBe(415);
    expect(xml.json.errors[0].field).toBe("content-type");
    const empty = await api("POST", msgs("http-malformed"), undefined, {
      raw: "",
      headers: { "content-type": "application/json" },
    });
    expect(empty.status).toBe(400);
    const badUtf8 = await api("POST", msgs("http-malformed"), undefined, {
      raw: new Uint8Array([0x7b, 0xff, 0xfe, 0x7d]),
      headers: { "content-type": "application/json" },
    });
    expect(badUtf8.status).toBe(400);
    expect(badUtf8.json.errors[0].message).toContain("UTF-8");
    expect(await backlog("http-malformed")).toBe(0);
  });

  it("enforces 128 KB per message, 100 messages and 256 KB per batch with 413", async () => {
    await createQueue("http-limits");
    const exactly = "x".repeat(128_000 - 2); // JSON string: two quotes
    expect((await api("POST", msgs("http-limits"), { body: exactly })).status).toBe(200);
    const over = await api("POST", msgs("http-limits"), { body: exactly + "x" });
    expect(over.status).toBe(413);
    expect(over.json.errors[0].field).toBe("body");

    const tooMany = await api("POST", batch("http-limits"), {
      messages: Array.from({ length: 101 }, (_, i) => ({ body: i })),
    });
    expect(tooMany.status).toBe(413);
    expect(tooMany.json.errors[0].field).toBe("messages");

    const big = "y".repeat(100_000);
    const tooBig = await api("POST", batch("http-limits"), { messages: [{ body: big }, { body: big }, { body: big }] });
    expect(tooBig.status).toBe(413);
    expect(tooBig.json.errors[0].field).toBe("messages");

    const oneBad = await api("POST", batch("http-limits"), { messages: [{ body: 1 }, { body: "z".repeat(130_000) }] });
    expect(oneBad.status).toBe(413);
    expect(oneBad.json.errors[0].field).toBe("messages[1].body");

    const huge = await api("POST", msgs("http-limits"), undefined, {
      raw: "x".repeat(1_100_000),
      headers: { "content-type": "application/json" },
    });
    expect(huge.status).toBe(413);
    expect(await backlog("http-limits")).toBe(1);
  });

  it("refuses a whole batch when one message is bad, storing none of it", async () => {
    await createQueue("http-atomic");
    const res = await api("POST", batch("http-atomic"), {
      messages: [{ body: 1 }, { body: 2 }, { body: 3, delay_seconds: 999_999 }],
    });
    expect(res.status).toBe(400);
    expect(res.json.errors[0].field).toBe("messages[2].delay_seconds");
    for (const body of [{ messages: [] }, { messages: "nope" }, {}, { messages: [{ nobody: 1 }] }]) {
      const r = await api("POST", batch("http-atomic"), body);
      expect(r.status).toBe(400);
    }
    expect(await backlog("http-atomic")).toBe(0);
  });

  it("refuses a body it could not deliver as sent with a 400 naming it, storing nothing: a lone surrogate in text, a number past a double", async () => {
    await createQueue("http-faithful");
    const raw = (path: string, text: string) =>
      api("POST", path, undefined, { raw: text, headers: { "content-type": "application/json" } });
    const cases: Array<[string, string, string, RegExp]> = [
      [
        msgs("http-faithful"),
        '{"body":"a\\ud800b","content_type":"text"}',
        "body",
        /lone surrogate \(U\+D800\) at index 1/,
      ],
      [
        batch("http-faithful"),
        '{"messages":[{"body":"ok","content_type":"text"},{"body":"\\udfff","content_type":"text"}]}',
        "messages[1].body",
        /lone surrogate \(U\+DFFF\)/,
      ],
      [msgs("http-faithful"), '{"body":{"big":1e400}}', "body", /1e400/],
      [batch("http-faithful"), '{"messages":[{"body":1},{"body":[0,-1e400]}]}', "messages[1].body", /-1e400/],
      [
        msgs("http-faithful"),
        '{"body":12345678901234567890}',
        "body",
        /12345678901234567890\b.*arrive as 12345678901234567000/,
      ],
      [
        batch("http-faithful"),
        '{"messages":[{"body":{"n":[9007199254740993]}}]}',
        "messages[0].body",
        /9007199254740993/,
      ],
      [msgs("http-faithful"), '{"body":{"tiny":1e-400}}', "body", /1e-400/],
    ];
    for (const [path, text, field, message] of cases) {
      const res = await raw(path, text);
      expect(res.status, text).toBe(400);
      expect(res.json.errors[0].field, text).toBe(field);
      expect(res.json.errors[0].message, text).toMatch(message);
    }
    expect(await backlog("http-faithful")).toBe(0);
  });

  it("delivers as sent what JSON carries: a lone surrogate inside a JSON string, big integers a double holds exactly, fractions; -0 as 0", async () => {
    await createQueue("http-faithful-ok");
    const text =
      '{"messages":[{"body":{"s":"a\\ud800b","n":[9007199254740992,1e21,-0,0.1,1.5e300,12345678901234567000]}}]}';
    const res = await api("POST", batch("http-faithful-ok"), undefined, {
      raw: text,
      headers: { "content-type": "application/json" },
    });
    expect(res.status).toBe(200);
    const [m] = (await storedMessages("http-faithful-ok")).messages;
    // Compared as JSON.stringify writes it (a lone surrogate escaped): a raw one in a failure's
    // message breaks the test pool's WebSocket (invalid UTF-8) and the failure is lost.
    const got = decodeBody(m!.body, "json") as { s: string; n: number[] };
    // The one number JSON reads and writes differently: -0 is written 0, by JSON.stringify as by
    // Cloudflare's json content type (README: a decision, not a loss of value).
    expect(Object.is(got.n[2], 0), "-0 arrives as 0").toBe(true);
    expect(JSON.stringify(got)).toBe(
      JSON.stringify({ s: "a\ud800b", n: [9007199254740992, 1e21, -0, 0.1, 1.5e300, 12345678901234567000] }),
    );
  });

  it("answers 404 for a send to a queue that does not exist", async () => {
    const res = await api("POST", msgs("ghost"), { body: 1 });
    expect(res.status).toBe(404);
    expect(res.json.errors[0].field).toBe("queue");
    expect(
      (await api("POST", `/accounts/local/queues/${encodeURIComponent("bad name!")}/messages`, { body: 1 })).status,
    ).toBe(404);
  });
});
