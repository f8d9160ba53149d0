// A producer binding's own delay (`props.delivery_delay`, from `delivery_delay` on a
// `[[queues.producers]]` binding) and its precedence, as Cloudflare applies it: a message's own
// delaySeconds (0 included), then sendBatch()'s delaySeconds, then the binding's, then the
// queue's `delivery_delay` setting. Each message's delay is read off the shard that stores it
// (visible at, less enqueued at): no clock is waited on.
import { describe, expect, it } from "vitest";
import { bindingDelay } from "../../broker/producer/queue-producer";
import { backlog, createQueue, producer, storedMessages } from "./helpers";

/** The delay in seconds each id was stored with. */
async function delays(queue: string, ids: string[]): Promise<number[]> {
  const { messages } = await storedMessages(queue);
  return ids.map((id) => {
    const m = messages.find((x) => x.id === id);
    if (!m) throw new Error(`${id} is not stored in ${queue}`);
    return (m.visibleAt - m.enqueuedAt) / 1000;
  });
}

const unique = () => Math.random().toString(16).slice(2, 10);

describe("bindingDelay: which delay a message gets", () => {
  it.each([
    // message, batch, binding -> stored
    [undefined, undefined, undefined, undefined],
    [undefined, undefined, 5, 5],
    [undefined, undefined, 0, 0],
    [undefined, 3, 5, 3],
    [undefined, 0, 5, 0],
    [7, undefined, 5, 7],
    [7, 3, 5, 7],
    [0, undefined, 5, 0],
    [0, 3, 5, 0],
    [2, undefined, undefined, 2],
  ] as const)("message %s, batch %s, binding %s: %s", (message, batch, binding, expected) => {
    expect(bindingDelay(message, batch, binding)).toBe(expected);
  });
});

describe("a binding with delivery_delay", () => {
  it("delays every send() that gives no delay of its own; a message's own delaySeconds, 0 included, wins", async () => {
    const q = `bind-delay-send-${unique()}`;
    await createQueue(q);
    const b = producer(q, undefined, { delivery_delay: 30 });
    const ids = [
      (await b.send("binding's")).messageId,
      (await b.send("own 0", { delaySeconds: 0 })).messageId,
      (await b.send("own 7", { delaySeconds: 7, contentType: "text" })).messageId,
      (await b.send("own 45", { delaySeconds: 45 })).messageId,
    ];
    expect(await delays(q, ids)).toEqual([30, 0, 7, 45]);
  });

  it("sendBatch(): a message's own delay, then the batch's delaySeconds (0 included), then the binding's", async () => {
    const q = `bind-delay-batch-${unique()}`;
    await createQueue(q);
    const b = producer(q, undefined, { delivery_delay: 30 });
    const plain = await b.sendBatch([{ body: 1 }, { body: 2, delaySeconds: 0 }, { body: 3, delaySeconds: 9 }]);
    const withBatch = await b.sendBatch([{ body: 4 }, { body: 5, delaySeconds: 0 }, { body: 6, delaySeconds: 9 }], {
      delaySeconds: 12,
    });
    const batchZero = await b.sendBatch([{ body: 7 }, { body: 8, delaySeconds: 9 }], { delaySeconds: 0 });
    expect(await delays(q, plain.messageIds)).toEqual([30, 0, 9]);
    expect(await delays(q, withBatch.messageIds)).toEqual([12, 0, 9]);
    expect(await delays(q, batchZero.messageIds)).toEqual([0, 9]);
  });

  it("belongs to the binding: two bindings of one queue keep their own; it overrides the queue's delivery_delay, which a binding without one keeps", async () => {
    const q = `bind-delay-queue-${unique()}`;
    await createQueue(q, { delivery_delay: 20 });
    const slow = producer(q, undefined, { delivery_delay: 40 });
    const none = producer(q, undefined, { delivery_delay: 0 });
    const plain = producer(q);
    // Concurrent sends of the three bindings may share one write (src/routing/coalesce.ts): each keeps its delay.
    const [a, b, c] = await Promise.all([slow.send("a"), none.send("b"), plain.send("c")]);
    const [batchSlow, batchNone, batchPlain] = await Promise.all([
      slow.sendBatch([{ body: "d" }]),
      none.sendBatch([{ body: "e" }]),
      plain.sendBatch([{ body: "f" }]),
    ]);
    const explicitZero = await plain.send("g", { delaySeconds: 0 });
    expect(await delays(q, [a!.messageId, b!.messageId, c!.messageId])).toEqual([40, 0, 20]);
    expect(await delays(q, [batchSlow!.messageIds[0]!, batchNone!.messageIds[0]!, batchPlain!.messageIds[0]!])).toEqual(
      [40, 0, 20],
    );
    expect(await delays(q, [explicitZero.messageId])).toEqual([0]);
  });

  it.each([
    [-1, /props.delivery_delay: must be at least 0/],
    [1.5, /props.delivery_delay: must be a whole number of seconds/],
    [86_401, /props.delivery_delay: must be at most 86400/],
    ["5", /props.delivery_delay: must be a number of seconds/],
  ])("refuses a binding whose delivery_delay is %j, storing nothing", async (value, message) => {
    const q = `bind-delay-bad-${unique()}`;
    await createQueue(q);
    const b = producer(q, undefined, { delivery_delay: value });
    await expect(b.send(1)).rejects.toThrow(message);
    await expect(b.sendBatch([{ body: 1 }])).rejects.toThrow(TypeError);
    expect(await backlog(q)).toBe(0);
  });
});

describe("a refused call", () => {
  it("rejects the caller's promise with the binding's error type and message, the call itself resolving (broker/producer/refusal.ts)", async () => {
    const q = `bind-refused-${unique()}`;
    await createQueue(q);
    const b = producer(q);
    const caught = async (p: Promise<unknown>) =>
      p.then(
        () => null,
        (e: Error) => e,
      );
    const text = await caught(b.send(5, { contentType: "text" }));
    expect(text).toBeInstanceOf(TypeError);
    expect(text!.message).toBe('body: must be a string when content type is "text"');
    const big = await caught(b.send("x".repeat(128_001), { contentType: "text" }));
    expect(big).toBeInstanceOf(RangeError);
    expect(big!.message).toMatch(/^body: is 128001 bytes/);
    const batch = await caught(b.sendBatch([{ body: 1 }, { body: 5, contentType: "text" }]));
    expect(batch).toBeInstanceOf(TypeError);
    expect(batch!.message).toBe('messages[1].body: must be a string when content type is "text"');
    // Nothing stored, and the binding serves the next call as ever.
    expect(await backlog(q)).toBe(0);
    expect((await b.send("fine")).messageId).toMatch(/^[0-9a-f]{32}$/);
  });
});
