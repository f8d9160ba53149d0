import { env } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { decodeBody } from "../../src/kernel/encoding";
import { batchingQueue } from "../../src/producer/batching-queue";
import { createQueue, producer, storedMessages } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

/** A Queue that records each sendBatch() call and answers with ids "<call>-<index>", or fails while `failing` is set. */
function fakeQueue() {
  const calls: Array<Array<MessageSendRequest<unknown>>> = [];
  const state = { failing: null as Error | null };
  const queue: Queue<unknown> = {
    send: async () => {
      throw new Error("the helper sends through sendBatch()");
    },
    sendBatch: async (messages) => {
      const list = [...messages];
      const call = calls.push(list);
      await Promise.resolve();
      if (state.failing) throw state.failing;
      return {
        metadata: { metrics: { backlogCount: call, backlogBytes: 0 } },
        messageIds: list.map((_, i) => `${call}-${i}`),
      } as QueueSendBatchResponse;
    },
    metrics: async () => ({ backlogCount: 0, backlogBytes: 0 }),
  };
  return { queue, calls, state };
}

const idOf = (r: QueueSendResponse) => (r as QueueSendResponse & { messageId?: string }).messageId;
const settle = <T>(ps: Array<Promise<T>>) => Promise.allSettled(ps);

afterEach(() => {
  vi.useRealTimers();
});

describe("batchingQueue", () => {
  it("turns concurrent sends into sendBatch() calls cut at 100 messages, each send resolving with its own id", async () => {
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { lingerMs: 5 });
    const ids = (await Promise.all(Array.from({ length: 250 }, (_, i) => q.send({ i })))).map(idOf);
    expect(calls.map((c) => c.length)).toEqual([100, 100, 50]);
    // In order: the 150th send is the 50th message of the second call.
    expect(ids[0]).toBe("1-0");
    expect(ids[149]).toBe("2-49");
    expect(ids[249]).toBe("3-49");
    expect(calls[1]![49]!.body).toEqual({ i: 149 });
    expect(new Set(ids).size).toBe(250);
  });

  it("cuts at maxBatch when it is set lower", async () => {
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { maxBatch: 10, lingerMs: 1 });
    await Promise.all(Array.from({ length: 25 }, (_, i) => q.send(i)));
    expect(calls.map((c) => c.length)).toEqual([10, 10, 5]);
  });

  it("cuts a batch before it would pass 256 KB of encoded bodies, and takes one of exactly 256 KB", async () => {
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { lingerMs: 1 });
    await Promise.all(Array.from({ length: 5 }, () => q.send("y".repeat(100_000), { contentType: "text" })));
    expect(calls.map((c) => c.length)).toEqual([2, 2, 1]);
    calls.length = 0;
    await Promise.all([
      q.send("z".repeat(128_000), { contentType: "text" }),
      q.send("z".repeat(128_000), { contentType: "text" }),
    ]);
    expect(calls.map((c) => c.length)).toEqual([2]);
  });

  it("refuses a message too large or of a bad content type alone, with the binding's own error, and sends its neighbours", async () => {
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { lingerMs: 1 });
    const tooLarge = "x".repeat(128_001);
    const results = await settle([
      q.send({ n: 1 }),
      q.send(tooLarge, { contentType: "text" }),
      q.send({ n: 2 }),
      q.send("x", { contentType: "yaml" as QueueContentType }),
      q.send(5 as unknown, { contentType: "text" }),
      q.send({ n: 3 }, { delaySeconds: 86_401 }),
      q.send({ n: 4 }),
    ]);
    expect(results.map((r) => r.status)).toEqual([
      "fulfilled",
      "rejected",
      "fulfilled",
      "rejected",
      "rejected",
      "rejected",
      "fulfilled",
    ]);
    expect(calls.map((c) => c.map((m) => m.body))).toEqual([[{ n: 1 }, { n: 2 }, { n: 4 }]]);
    expect(results.filter((r) => r.status === "fulfilled").map((r) => idOf(r.value))).toEqual(["1-0", "1-1", "1-2"]);

    // The very errors the QueueProducer binding gives for the same calls.
    await createQueue("batching-errors");
    const binding = producer("batching-errors");
    const refusals = [
      [results[1], binding.send(tooLarge, { contentType: "text" })],
      [results[3], binding.send("x", { contentType: "yaml" })],
      [results[4], binding.send(5, { contentType: "text" })],
      [results[5], binding.send({ n: 3 }, { delaySeconds: 86_401 })],
    ] as const;
    for (const [mine, theirs] of refusals) {
      const expected = await theirs.then(
        () => null,
        (e: Error) => e,
      );
      const got = (mine as PromiseRejectedResult).reason as Error;
      expect(expected).not.toBeNull();
      expect(got.name).toBe(expected!.name);
      expect(got.message).toBe(expected!.message);
    }
    expect(((results[1] as PromiseRejectedResult).reason as Error).name).toBe("RangeError");
  });

  it("sends a batch lingerMs after its first message, not later and not sooner, with the sends that came meanwhile", async () => {
    vi.useFakeTimers();
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { lingerMs: 50 });
    const first = q.send("a");
    await vi.advanceTimersByTimeAsync(30);
    const second = q.send("b");
    await vi.advanceTimersByTimeAsync(19);
    expect(calls).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls.map((c) => c.map((m) => m.body))).toEqual([["a", "b"]]);
    expect([idOf(await first), idOf(await second)]).toEqual(["1-0", "1-1"]);
  });

  it("flush() sends what waits at once and resolves once it is durable", async () => {
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { lingerMs: 60_000 });
    const sent = q.send("now");
    expect(calls).toHaveLength(0);
    await q.flush();
    expect(calls).toHaveLength(1);
    expect(idOf(await sent)).toBe("1-0");
  });

  it("rejects every send of a batch whose sendBatch() failed, with that error, and goes on with the next batch", async () => {
    const { queue, calls, state } = fakeQueue();
    const q = batchingQueue(queue, { maxBatch: 3, lingerMs: 1 });
    state.failing = new Error("service unavailable");
    const failed = await settle([q.send(1), q.send(2), q.send(3)]);
    expect(failed.map((r) => r.status === "rejected" && r.reason)).toEqual([
      state.failing,
      state.failing,
      state.failing,
    ]);
    state.failing = null;
    expect((await Promise.all([q.send(4), q.send(5)])).map(idOf)).toEqual(["2-0", "2-1"]);
    expect(calls.map((c) => c.length)).toEqual([3, 2]);
  });

  it("sends each body as it was at send(), and each message's own content type and delay", async () => {
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { lingerMs: 1 });
    const body = { n: 1 };
    const sent = Promise.all([
      q.send(body),
      q.send("t", { contentType: "text", delaySeconds: 30 }),
      q.send(new Date(5), { contentType: "v8" }),
    ]);
    body.n = 2;
    await sent;
    expect(calls[0]).toEqual([
      { body: { n: 1 } },
      { body: "t", contentType: "text", delaySeconds: 30 },
      { body: new Date(5), contentType: "v8" },
    ]);
  });

  it("refuses a send() with shardq's `id`, which it does not carry through its batches, sending nothing", async () => {
    const { queue, calls } = fakeQueue();
    const q = batchingQueue(queue, { lingerMs: 1 });
    const refused = await q.send({ n: 1 }, { id: "0".repeat(32) } as QueueSendOptions).then(
      () => null,
      (e: Error) => e,
    );
    expect(refused).toBeInstanceOf(TypeError);
    expect(refused!.message).toBe("options.id: is not a known field");
    await q.flush();
    expect(calls).toEqual([]);
  });

  it("refuses options it cannot honour", () => {
    const { queue } = fakeQueue();
    expect(() => batchingQueue(queue, { maxBatch: 101 })).toThrow(RangeError);
    expect(() => batchingQueue(queue, { maxBatch: 0 })).toThrow(/maxBatch/);
    expect(() => batchingQueue(queue, { lingerMs: -1 })).toThrow(/lingerMs/);
  });

  it("stores every message through the real QueueProducer binding, each send with the id of its own message", async () => {
    await createQueue("batching-binding");
    const q = batchingQueue(producer("batching-binding") as unknown as Queue<unknown>, { lingerMs: 2 });
    const sends = [
      ...Array.from({ length: 140 }, (_, i) => q.send({ i })),
      q.send("plain text", { contentType: "text" }),
      q.send({ later: true }, { delaySeconds: 600 }),
    ];
    const ids = (await Promise.all(sends)).map(idOf);
    expect(ids.every((id) => /^[0-9a-f]{32}$/.test(id ?? ""))).toBe(true);
    expect(new Set(ids).size).toBe(142);
    const { messages } = await storedMessages("batching-binding");
    expect(messages.map((m) => m.id).sort()).toEqual([...ids].sort());
    const byId = new Map(messages.map((m) => [m.id, m]));
    expect(decodeBody(byId.get(ids[7]!)!.body, "json")).toEqual({ i: 7 });
    expect(byId.get(ids[140]!)!.contentType).toBe("text");
    const delayed = byId.get(ids[141]!)!;
    expect(delayed.visibleAt - delayed.enqueuedAt).toBe(600_000);
  });

  describe("shared by the requests of one isolate (test/fixtures/batching-probe)", () => {
    const probe = (path: string) =>
      env.BATCHING_PROBE.fetch(`http://probe${path}`, { method: path === "/stats" ? "GET" : "POST" });
    const stats = async () => (await (await probe("/stats")).json()) as { batches: number; messages: number };

    it("answers every awaiting request once its own message is sent, though another request sent the batch", async () => {
      const before = await stats();
      const answers = await Promise.all(Array.from({ length: 20 }, () => probe("/send?await=1&linger=50")));
      // workerd cancels a request left with nothing of its own pending as hung: a 500.
      expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
      const ids = await Promise.all(answers.map(async (a) => ((await a.json()) as { messageId: string }).messageId));
      expect(new Set(ids).size).toBe(20);
      const after = await stats();
      expect(after.messages - before.messages).toBe(20);
      expect(after.batches - before.batches).toBeLessThan(5);
    });

    it("sends what requests that did not await their sends left behind", async () => {
      const before = await stats();
      const answers = await Promise.all(Array.from({ length: 10 }, async () => (await probe("/send?await=0")).json()));
      expect(answers).toEqual(Array(10).fill({ awaited: false }));
      // Every request has answered; the batch leaves 50 ms after its first message.
      await sleep(300);
      const after = await stats();
      expect(after.messages - before.messages).toBe(10);
    });
  });
});
