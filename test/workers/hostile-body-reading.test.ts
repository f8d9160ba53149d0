/**
 * Hostile input, bodies read with care: a chunked body with no length cut off at the limit and
 * not read to its end, a body whose stream fails mid-way, the largest valid requests taken, and
 * 500 mangled requests each answered with a 4xx naming a field (the refusal tables themselves:
 * hostile-bodies, hostile-content-types, hostile-names and hostile-numbers.test.ts).
 */
import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { DISCARD_LIMIT_BYTES, MAX_JSON_DEPTH } from "../../broker/http/read-json";
import { router } from "../../broker/http/router";
import { api, BASE, createQueue, queuePath, TOKEN } from "./helpers";
import { big, hostileQueue, JSON_TYPE, nest, P, snapshot } from "./hostile-input-helpers";

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
