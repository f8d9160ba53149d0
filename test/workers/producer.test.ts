import { describe, expect, it } from "vitest";
import { decodeBody } from "../../src/kernel/encoding";
import { env, runDurableObjectAlarm } from "cloudflare:test";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { backlog, createQueue, producer, storedMessages } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

describe("the QueueProducer binding", () => {
  it("sends with Cloudflare's content types and resolves with the message id beside Cloudflare's response", async () => {
    await createQueue("bind-types");
    const q = producer("bind-types");
    const nested = {
      when: new Date(1_700_000_000_000),
      tags: new Set(["a"]),
      index: new Map([[1, /x+/g]]),
      big: 10n ** 20n,
      none: undefined,
    };
    const cyclic: Record<string, unknown> = { name: "loop" };
    cyclic.self = cyclic;
    const id = async (r: Promise<{ messageId: string }>) => (await r).messageId;
    const ids = {
      json: await id(q.send({ a: [1, null, "two"] })),
      jsonDefault: await id(q.send("a string as json")),
      text: await id(q.send("hello", { contentType: "text" })),
      bytesBuffer: await id(q.send(new Uint8Array([1, 2, 3]).buffer, { contentType: "bytes" })),
      bytesView: await id(q.send(new Uint8Array([9, 8, 7, 6]).subarray(1, 3), { contentType: "bytes" })),
      v8: await id(q.send(nested, { contentType: "v8" })),
      v8Cycle: await id(q.send(cyclic, { contentType: "v8" })),
      v8Error: await id(q.send(new RangeError("too far"), { contentType: "v8" })),
    };
    for (const id of Object.values(ids)) expect(id).toMatch(/^[0-9a-f]{32}$/);
    const { messages } = await storedMessages("bind-types");
    const body = (id: string) => {
      const m = messages.find((x) => x.id === id)!;
      return decodeBody(m.body, m.contentType);
    };
    expect(body(ids.json)).toEqual({ a: [1, null, "two"] });
    expect(messages.find((m) => m.id === ids.jsonDefault)!.contentType).toBe("json");
    expect(body(ids.text)).toBe("hello");
    expect(new Uint8Array(body(ids.bytesBuffer) as ArrayBuffer)).toEqual(new Uint8Array([1, 2, 3]));
    expect(new Uint8Array(body(ids.bytesView) as ArrayBuffer)).toEqual(new Uint8Array([8, 7]));
    expect(body(ids.v8)).toEqual(nested);
    const loop = body(ids.v8Cycle) as Record<string, unknown>;
    expect(loop.self).toBe(loop);
    const err = body(ids.v8Error) as Error;
    expect(err).toBeInstanceOf(RangeError);
    expect(err.message).toBe("too far");
  });

  it("sendBatch stores every message with its own options and resolves with the ids in order", async () => {
    await createQueue("bind-batch");
    const { messageIds: ids } = await producer("bind-batch").sendBatch(
      [
        { body: { n: 1 } },
        { body: "two", contentType: "text", delaySeconds: 30 },
        { body: new Uint8Array([3]), contentType: "bytes" },
      ],
      { delaySeconds: 10 },
    );
    expect(ids).toHaveLength(3);
    const { messages } = await storedMessages("bind-batch");
    const delays = ids.map((id) => {
      const m = messages.find((x) => x.id === id)!;
      return [m.contentType, m.visibleAt - m.enqueuedAt];
    });
    expect(delays).toEqual([
      ["json", 10_000],
      ["text", 30_000],
      ["bytes", 10_000],
    ]);
  });

  it("metrics() reports backlog count, bytes and the oldest message's time, as Cloudflare's", async () => {
    await createQueue("bind-metrics");
    const q = producer("bind-metrics");
    expect(await q.metrics()).toEqual({ backlogCount: 0, backlogBytes: 0 });
    const before = Date.now();
    await q.send("12345", { contentType: "text" });
    await q.sendBatch([
      { body: "ab", contentType: "text" },
      { body: "c", contentType: "text" },
    ]);
    const m = await q.metrics();
    expect(m.backlogCount).toBe(3);
    expect(m.backlogBytes).toBe(8);
    expect(m.oldestMessageTimestamp).toBeInstanceOf(Date);
    expect(m.oldestMessageTimestamp!.getTime()).toBeGreaterThanOrEqual(before - 1000);
  });

  it("send() and sendBatch() resolve to Cloudflare's QueueSendResponse: the queue's figures in metadata.metrics, over every shard", async () => {
    const q0 = await createQueue("bind-response");
    const q = producer("bind-response");
    const shards = (await coordinatorFor(env, q0.queue_id).shardMap())!.shards.map((s) => s.name);
    expect(shards.length).toBeGreaterThan(1);
    // The shard a send writes to answers exactly; the others are summed from their latest heartbeats.
    const heartbeats = async () => {
      for (const s of shards) await runDurableObjectAlarm(storageShardFor(env, s));
      await sleep(1100); // past the isolate's one-second cache
    };
    const before = Date.now();
    // Typed code reads metadata.metrics as on Cloudflare: it must be there, and right.
    const first: QueueSendResponse = await q.send("12345", { contentType: "text" });
    expect(first.metadata.metrics).toMatchObject({ backlogCount: 1, backlogBytes: 5 });
    expect(first.metadata.metrics.oldestMessageTimestamp).toBeInstanceOf(Date);
    expect(first.metadata.metrics.oldestMessageTimestamp!.getTime()).toBeGreaterThanOrEqual(before - 1000);
    await heartbeats();
    // Whichever shard the batch lands on, the message on the other one counts.
    const batch: QueueSendBatchResponse = await q.sendBatch([
      { body: "ab", contentType: "text" },
      { body: "c", contentType: "text" },
    ]);
    expect(batch.metadata.metrics).toMatchObject({ backlogCount: 3, backlogBytes: 8 });
    await heartbeats();
    const later = await q.send("z", { contentType: "text" });
    expect(later.metadata.metrics).toEqual(await q.metrics());
    expect(later.metadata.metrics).toMatchObject({ backlogCount: 4, backlogBytes: 9 });
  });

  it.each([
    [
      "a body over 128 KB",
      (q: ReturnType<typeof producer>) => q.send("x".repeat(128_001), { contentType: "text" }),
      /body: is 128001 bytes/,
    ],
    [
      "an unknown content type",
      (q: ReturnType<typeof producer>) => q.send("x", { contentType: "yaml" }),
      /options.contentType: must be one of/,
    ],
    [
      "text that is not a string",
      (q: ReturnType<typeof producer>) => q.send(5, { contentType: "text" }),
      /body: must be a string/,
    ],
    [
      "bytes that are not bytes",
      (q: ReturnType<typeof producer>) => q.send("x", { contentType: "bytes" }),
      /body: must be an ArrayBuffer/,
    ],
    [
      "JSON that is not JSON",
      (q: ReturnType<typeof producer>) => q.send(undefined),
      /body: is not serialisable as JSON/,
    ],
    // Cloudflare's runtime turns a lone surrogate into U+FFFD on the way to UTF-8; shardq refuses rather than change a body.
    [
      "text with a lone surrogate",
      (q: ReturnType<typeof producer>) => q.send("a\ud800b", { contentType: "text" }),
      /body: is not well-formed Unicode: a lone surrogate \(U\+D800\) at index 1/,
    ],
    [
      "a lone surrogate in a batch's text",
      (q: ReturnType<typeof producer>) =>
        q.sendBatch([
          { body: "ok", contentType: "text" },
          { body: "\udc00", contentType: "text" },
        ]),
      /messages\[1\].body: is not well-formed Unicode/,
    ],
    [
      "JSON with a number JSON cannot hold",
      (q: ReturnType<typeof producer>) => q.send({ a: [1, Infinity] }),
      /body: holds a number JSON cannot carry \(Infinity at a\[1\]\)/,
    ],
    [
      "JSON with NaN",
      (q: ReturnType<typeof producer>) => q.send(NaN),
      /body: holds a number JSON cannot carry \(NaN\)/,
    ],
    [
      "a delay over 24 h",
      (q: ReturnType<typeof producer>) => q.send(1, { delaySeconds: 86_401 }),
      /options.delaySeconds: must be at most 86400/,
    ],
    [
      "an unknown option",
      (q: ReturnType<typeof producer>) => q.send(1, { delay: 5 }),
      /options.delay: is not a known field/,
    ],
    [
      "more than 100 messages",
      (q: ReturnType<typeof producer>) => q.sendBatch(Array.from({ length: 101 }, () => ({ body: 1 }))),
      /messages: holds 101 messages/,
    ],
    [
      "more than 256 KB in a batch",
      (q: ReturnType<typeof producer>) =>
        q.sendBatch([1, 2, 3].map(() => ({ body: "y".repeat(100_000), contentType: "text" }))),
      /batch is 300000 bytes/,
    ],
    [
      "a batch message without a body",
      (q: ReturnType<typeof producer>) => q.sendBatch([{ body: 1 }, { contentType: "text" }]),
      /messages\[1\].body: is required/,
    ],
    [
      "a batch that is not an array",
      (q: ReturnType<typeof producer>) => q.sendBatch("nope"),
      /messages: must be an array/,
    ],
    ["an empty batch", (q: ReturnType<typeof producer>) => q.sendBatch([]), /messages: must hold at least one message/],
  ])("refuses %s with an error naming the field, storing nothing", async (_what, call, message) => {
    const name = `bind-bad-${Math.random().toString(16).slice(2, 10)}`;
    await createQueue(name);
    await expect(call(producer(name))).rejects.toThrow(message);
    expect(await backlog(name)).toBe(0);
  });

  it("fails clearly for a binding to a queue that does not exist", async () => {
    await expect(producer("not-created").send(1)).rejects.toThrow(/queue "not-created" not found/);
    await expect(producer("not-created").metrics()).rejects.toThrow(/not found/);
  });

  it("cannot reach another account's queue through a binding scoped to its own account", async () => {
    await createQueue("bind-private");
    await expect(producer("bind-private", "other").send(1)).rejects.toThrow(/not found/);
    expect(await backlog("bind-private")).toBe(0);
  });
});
