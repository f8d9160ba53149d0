/**
 * Message ids chosen by the producer, through the producer binding: `send(body, { id })` and an
 * `id` per message of `sendBatch()` store a message at most once per id, as the HTTP API's `id`
 * does (test/workers/idempotency.test.ts), with the HTTP API's checks and refusals; sends
 * without ids keep their path and pay nothing for the feature.
 */
import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { QueueProducer } from "../../broker/producer/queue-producer";
import type { Env } from "../../src/kernel/env";
import { ACCOUNT, api, backlog, createQueue, producer, queuePath, send, storedMessages } from "./helpers";

const hexId = (n: number) => n.toString(16).padStart(32, "0");
const unique = (what: string) => `bid-${what}-${Math.random().toString(16).slice(2, 8)}`;
const sendBatchHttp = (q: string, body: unknown) => api("POST", `${queuePath(q)}/messages/batch`, body);

async function storedIds(q: string): Promise<string[]> {
  return (await storedMessages(q)).messages.map((m) => m.id).sort();
}

/** The binding's refusal of `call`: the error's type and message as its caller sees them. */
async function refusalOf(call: Promise<unknown>): Promise<{ name: string; message: string }> {
  const err = await call.then(
    () => expect.fail("the call was not refused"),
    (e: unknown) => e as Error,
  );
  return { name: err.name, message: err.message };
}

describe("message ids chosen through the producer binding", () => {
  it("send() stores a message under its id once however often it is sent, answering that id", async () => {
    const q = unique("send");
    await createQueue(q);
    const id = hexId(1);
    for (let i = 0; i < 3; i++) {
      const sent = await producer(q).send({ order: 1 }, { id });
      expect(sent.messageId).toBe(id);
      expect(sent.metadata.metrics.backlogCount).toBe(1);
    }
    expect(await storedIds(q)).toEqual([id]);
    expect(await backlog(q)).toBe(1);
  });

  it("sendBatch() stores each message under its id once: a repeated batch stores nothing and answers the same ids", async () => {
    const q = unique("batch");
    await createQueue(q);
    const messages = [1, 2, 3].map((n) => ({ body: n, id: hexId(10 + n) }));
    const first = await producer(q).sendBatch(messages);
    expect(first.messageIds).toEqual([hexId(11), hexId(12), hexId(13)]);
    expect((await producer(q).sendBatch(messages)).messageIds).toEqual(first.messageIds);
    expect(await storedIds(q)).toEqual(first.messageIds);
    expect(await backlog(q)).toBe(3);
  });

  it("refuses an id sent again with another body with the HTTP API's message, storing nothing", async () => {
    const q = unique("reused");
    await createQueue(q);
    const id = hexId(2);
    await producer(q).send("one", { id });
    const http = await send(q, "two", { id });
    expect(http.status).toBe(409);
    const single = await refusalOf(producer(q).send("two", { id }));
    expect(single.message).toBe(http.json.errors[0].message);
    expect(single.message).toBe(
      "id: was already sent to this queue with a different body, content type or delay in the last 24 hours",
    );
    // Another content type or delay is another message too.
    expect((await refusalOf(producer(q).send("one", { id, contentType: "text" }))).message).toMatch(/^id: /);
    expect((await refusalOf(producer(q).send("one", { id, delaySeconds: 5 }))).message).toMatch(/^id: /);
    const batch = [
      { body: "new", id: hexId(3) },
      { body: "two", id },
    ];
    const httpBatch = await sendBatchHttp(q, { messages: batch });
    expect(httpBatch.status).toBe(409);
    const inBatch = await refusalOf(producer(q).sendBatch(batch));
    expect(inBatch.message).toBe(httpBatch.json.errors[0].message);
    expect(inBatch.message).toMatch(/^messages\[1\]\.id: was already sent to this queue/);
    expect(await storedIds(q)).toEqual([id]);
    // The refused batch used up none of its ids.
    expect((await producer(q).send("anything", { id: hexId(3) })).messageId).toBe(hexId(3));
  });

  it.each([
    [
      "send() with an id that is not 32 lowercase hex",
      (q: string) => producer(q).send(1, { id: "ABC" }),
      "id: must be 32 lowercase hex characters",
    ],
    [
      "send() with upper-case hex",
      (q: string) => producer(q).send(1, { id: "A".repeat(32) }),
      "id: must be 32 lowercase hex characters",
    ],
    ["send() with an id that is not a string", (q: string) => producer(q).send(1, { id: 7 }), "id: must be a string"],
    [
      "sendBatch() with one bad id",
      (q: string) =>
        producer(q).sendBatch([{ body: 0, id: hexId(20) }, { body: 1 }, { body: 2, id: "not-an-id" }, { body: 3 }]),
      "messages[2].id: must be 32 lowercase hex characters",
    ],
    [
      "sendBatch() naming one id twice",
      (q: string) => producer(q).sendBatch([{ body: 0, id: hexId(21) }, { body: 1 }, { body: 2, id: hexId(21) }]),
      "messages[2].id: repeats the id of messages[0]",
    ],
  ])("refuses %s with a TypeError naming the field, storing nothing of the call", async (_what, call, message) => {
    const q = unique("bad");
    await createQueue(q);
    expect(await refusalOf(call(q))).toEqual({ name: "TypeError", message });
    expect(await backlog(q)).toBe(0);
  });

  it("sends a batch's messages without ids as before: stored each time, beside the chosen ids stored once", async () => {
    const q = unique("mixed");
    await createQueue(q);
    const batch = [{ body: "a", id: hexId(31) }, { body: "no id" }, { body: "b", id: hexId(32) }];
    const first = await producer(q).sendBatch(batch);
    const again = await producer(q).sendBatch(batch);
    expect([first.messageIds[0], first.messageIds[2]]).toEqual([hexId(31), hexId(32)]);
    expect([again.messageIds[0], again.messageIds[2]]).toEqual([hexId(31), hexId(32)]);
    expect(first.messageIds[1]).toMatch(/^[0-9a-f]{32}$/);
    expect(again.messageIds[1]).toMatch(/^[0-9a-f]{32}$/);
    expect(again.messageIds[1]).not.toBe(first.messageIds[1]);
    expect(await storedIds(q)).toEqual([hexId(31), hexId(32), first.messageIds[1]!, again.messageIds[1]!].sort());
  });

  it("takes a binding's delivery_delay as the binding's: send() and sendBatch() of one message and id are one send", async () => {
    const q = unique("delay");
    await createQueue(q);
    const id = hexId(61);
    const delayed = producer(q, ACCOUNT, { delivery_delay: 30 });
    expect((await delayed.send({ n: 1 }, { id })).messageId).toBe(id);
    expect((await delayed.sendBatch([{ body: { n: 1 }, id }])).messageIds).toEqual([id]);
    expect((await producer(q).send({ n: 1 }, { id })).messageId).toBe(id);
    // The message's own delay is the message's: another one is another message.
    expect((await refusalOf(delayed.send({ n: 1 }, { id, delaySeconds: 30 }))).message).toMatch(/^id: /);
    const { messages } = await storedMessages(q);
    expect(messages.map((m) => [m.id, m.visibleAt - m.enqueuedAt])).toEqual([[id, 30_000]]);
  });

  it("recognises an id sent over HTTP through the binding, and one sent through the binding over HTTP", async () => {
    const q = unique("cross");
    await createQueue(q);
    const overHttp = hexId(41);
    expect((await send(q, { n: 1 }, { id: overHttp })).json.result.message_id).toBe(overHttp);
    expect((await producer(q).send({ n: 1 }, { id: overHttp })).messageId).toBe(overHttp);
    expect((await producer(q).sendBatch([{ body: { n: 1 }, id: overHttp }])).messageIds).toEqual([overHttp]);
    expect((await refusalOf(producer(q).send({ n: 2 }, { id: overHttp }))).message).toMatch(
      /^id: was already sent to this queue/,
    );
    const throughBinding = hexId(42);
    expect((await producer(q).send("text", { id: throughBinding, contentType: "text" })).messageId).toBe(
      throughBinding,
    );
    const again = await send(q, "text", { id: throughBinding, content_type: "text" });
    expect(again.status).toBe(200);
    expect(again.json.result.message_id).toBe(throughBinding);
    const other = await sendBatchHttp(q, { messages: [{ body: "other", id: throughBinding, content_type: "text" }] });
    expect(other.status).toBe(409);
    expect(other.json.errors[0].field).toBe("messages[0].id");
    expect(await storedIds(q)).toEqual([overHttp, throughBinding]);
  });

  it("calls the queue's IdempotencyKeys for sends with ids only", async () => {
    const q = unique("cost");
    await createQueue(q);
    let calls = 0;
    const counted = {
      idFromName: (name: string) => (calls++, env.IDEMPOTENCY_KEYS.idFromName(name)),
      get: (id: DurableObjectId) => env.IDEMPOTENCY_KEYS.get(id),
    };
    const ctx = createExecutionContext();
    Object.defineProperty(ctx, "props", { value: { account: ACCOUNT, queue: q } });
    const binding = new QueueProducer(ctx, {
      ...env,
      IDEMPOTENCY_KEYS: counted as unknown as Env["IDEMPOTENCY_KEYS"],
    } as Env);
    // Called in this isolate, a refused call resolves instead of rejecting (broker/producer/refusal.ts):
    // each answer must hold its ids.
    const ids = [
      (await binding.send("plain")).messageId,
      (await binding.send("plain", { contentType: "text", delaySeconds: 0 })).messageId,
      ...(await binding.sendBatch([{ body: 1 }, { body: "2", contentType: "text" }], { delaySeconds: 0 })).messageIds,
    ];
    expect(calls).toBe(0);
    // One id: a claim and its completion, in the one object the id hashes to.
    ids.push((await binding.send("chosen", { id: hexId(51) })).messageId);
    expect(calls).toBe(2);
    ids.push(...(await binding.sendBatch([{ body: 1 }, { body: 2, id: hexId(52) }])).messageIds);
    expect(calls).toBe(4);
    expect(await storedIds(q)).toEqual([...ids].sort());
    expect(await backlog(q)).toBe(7);
  });
});
