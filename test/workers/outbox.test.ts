/**
 * shardq/outbox in a user's Durable Object (test/fixtures/outbox-probe's OutboxProducer) over a
 * stand-in Queue: what a transaction records is sent once it commits and never when it rolls
 * back, in record order with ids fixed at record time, in batches the binding takes, one call at
 * a time, deleted once answered, with no alarm left behind. Failures and the shared alarm:
 * outbox-alarm.test.ts.
 */
import { describe, expect, it } from "vitest";
import { unwrap } from "../../src/inbox/inbox";
import { eventually } from "./helpers";
import { producerObject } from "./outbox-helpers";
import { sleep } from "../../src/kernel/sleep";

const ID = /^[0-9a-f]{32}$/;

describe("the outbox records in the caller's transaction", () => {
  it("sends nothing of a transactionSync() that rolls back, and leaves no row and no alarm", async () => {
    const p = await producerObject("rollback-sync", { queue: "fake" });
    // The transaction also starts a flush() before it throws: it reads after the rollback.
    expect(await p.addThenThrow(5)).toEqual({ error: "changed my mind" });
    await sleep(100);
    expect(await p.calls()).toEqual([]);
    expect(await p.total()).toBe(0);
    expect(await p.rows()).toBe(0);
    expect(await p.alarmAt()).toBeNull();
    expect(await p.state()).toBeNull();
  });

  it("sends nothing of a storage.transaction() that rolls back", async () => {
    const p = await producerObject("rollback-async", { queue: "fake" });
    expect(await p.addInTransactionThenThrow(5)).toEqual({ error: "changed my mind" });
    await sleep(100);
    expect(await p.calls()).toEqual([]);
    expect(await p.rows()).toBe(0);
    expect(await p.alarmAt()).toBeNull();
  });

  it("sends what a storage.transaction() commits, at once", async () => {
    const p = await producerObject("commit-async", { queue: "fake" });
    const id = await p.addInTransaction(3);
    // Well before the backstop alarm (10 s): the delivery started in the transaction ran after it.
    await eventually(
      () => p.rows(),
      (n) => n === 0,
      2_000,
    );
    const [call] = await p.calls();
    expect(unwrap({ id: "-", body: call!.messages[0]!.body })).toEqual({ id, body: { n: 3 } });
  });

  it("sends what commits, with the counter it was written with", async () => {
    const p = await producerObject("commit", { queue: "fake" });
    const { id, total } = await p.add(7);
    expect(id).toMatch(ID);
    expect(total).toBe(7);
    await eventually(
      () => p.rows(),
      (n) => n === 0,
    );
    const [call] = await p.calls();
    expect(call!.ok).toBe(true);
    expect(call!.messages).toHaveLength(1);
    expect(unwrap({ id: "queue-id", body: call!.messages[0]!.body })).toEqual({ id, body: { n: 7, total: 7 } });
  });
});

describe("delivery", () => {
  it("sends in record order, 100 messages a call, the ids fixed at record time, and leaves no alarm once empty", async () => {
    const p = await producerObject("order", { queue: "fake", options: { ids: "id" } });
    const ids = await p.addMany(Array.from({ length: 250 }, (_, i) => i + 1));
    expect(new Set(ids).size).toBe(250);
    for (const id of ids) expect(id).toMatch(ID);
    await eventually(
      () => p.rows(),
      (n) => n === 0,
    );
    const calls = await p.calls();
    expect(calls.map((c) => c.messages.length)).toEqual([100, 100, 50]);
    expect(calls.every((c) => c.ok)).toBe(true);
    const sent = calls.flatMap((c) => c.messages);
    // "id" mode: the id as the message's own, the body as it was written, in record order.
    expect(sent.map((m) => m.id)).toEqual(ids);
    expect(sent.map((m) => (m.body as { n: number }).n)).toEqual(ids.map((_, i) => i + 1));
    expect(sent[249]).toEqual({ id: ids[249], body: { n: 250, total: 31_375 }, contentType: "json" });
    expect(await p.maxInFlight()).toBe(1);
    expect(await p.alarmAt()).toBeNull();
    expect(await p.status()).toMatchObject({ pending: 0, attempts: 0, lastError: null, nextAttemptAt: null });
  });

  it("cuts a batch before 256 KB", async () => {
    const p = await producerObject("bytes-cut", { queue: "fake", options: { ids: "id" } });
    for (let i = 0; i < 5; i++) await p.sendRaw("y".repeat(100_000), { contentType: "text" });
    await eventually(
      () => p.rows(),
      (n) => n === 0,
    );
    const sizes = (await p.calls()).map((c) => c.messages.length);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(5);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(2);
  });

  it("keeps one call in flight while sends keep coming, and each message's delay and ordering key", async () => {
    const p = await producerObject("in-flight", { queue: "fake" });
    const ids: string[] = [];
    await Promise.all(
      Array.from({ length: 40 }, async (_, i) =>
        ids.push((await p.add(1, { delaySeconds: i % 3, orderingKey: `k${i % 2}` })).id),
      ),
    );
    await eventually(
      () => p.rows(),
      (n) => n === 0,
    );
    expect(await p.maxInFlight()).toBe(1);
    const sent = (await p.calls()).flatMap((c) => c.messages);
    expect(sent).toHaveLength(40);
    // Record order is the counter's order: each message carries the total it was written with.
    const totals = sent.map((m) => (unwrap({ id: "-", body: m.body }).body as { total: number }).total);
    expect(totals).toEqual(totals.toSorted((a, b) => a - b));
    for (const m of sent) {
      expect(m.orderingKey).toMatch(/^k[01]$/);
      expect([0, 1, 2]).toContain(m.delaySeconds);
    }
    expect(new Set(sent.map((m) => unwrap({ id: "-", body: m.body }).id))).toEqual(new Set(ids));
  });
});

describe("bodies, as the binding serialises them", () => {
  it("wraps each content type in the envelope, json unless V8 is asked for, and gives every body back", async () => {
    const p = await producerObject("envelopes", { queue: "fake" });
    const v8 = { when: new Date(5), tags: new Set(["a"]), big: 12n, map: new Map([[1, "one"]]) };
    const sends: Array<[unknown, Record<string, unknown> | undefined]> = [
      [{ a: 1 }, undefined],
      ["plain text", { contentType: "text" }],
      [new Uint8Array([1, 2, 255]), { contentType: "bytes" }],
      [v8, { contentType: "v8" }],
    ];
    const ids: string[] = [];
    for (const [body, options] of sends) {
      const r = await p.sendRaw(body, options);
      if (!("id" in r)) throw new Error(JSON.stringify(r));
      ids.push(r.id);
    }
    await eventually(
      () => p.rows(),
      (n) => n === 0,
    );
    const sent = (await p.calls()).flatMap((c) => c.messages);
    expect(sent.map((m) => m.contentType)).toEqual(["json", "json", "json", "v8"]);
    expect(sent[0]!.body).toEqual({ shardq_outbox: 1, id: ids[0], body: { a: 1 } });
    expect(sent[2]!.body).toEqual({ shardq_outbox: 1, id: ids[2], bytes: "AQL/" });
    const out = sent.map((m) => unwrap({ id: "-", body: m.body }));
    expect(out.map((o) => o.id)).toEqual(ids);
    expect(out[1]!.body).toBe("plain text");
    expect(new Uint8Array(out[2]!.body as ArrayBuffer)).toEqual(new Uint8Array([1, 2, 255]));
    expect(out[3]!.body).toEqual(v8);
  });

  it("refuses, at record time and with the binding's kind of error, what the binding would refuse", async () => {
    const p = await producerObject("refusals", { queue: "fake" });
    const cases: Array<[unknown, Record<string, unknown> | undefined, string, RegExp]> = [
      [undefined, undefined, "TypeError", /cannot be undefined/],
      [5, { contentType: "text" }, "TypeError", /must be a string/],
      ["x", { contentType: "yaml" }, "TypeError", /Unsupported queue message content type/],
      [{ n: Number.NaN }, undefined, "TypeError", /NaN or Infinity/],
      [{ n: 1n }, undefined, "TypeError", /not serialisable as JSON/],
      ["z".repeat(128_000), { contentType: "text" }, "RangeError", /in its envelope; a message holds at most 128000/],
      [{ a: 1 }, { delaySeconds: 86_401 }, "RangeError", /delaySeconds/],
      [{ a: 1 }, { orderingKey: "" }, "TypeError", /orderingKey/],
    ];
    for (const [body, options, name, message] of cases) {
      const r = await p.sendRaw(body, options);
      expect(r, JSON.stringify(options)).toMatchObject({ error: { name } });
      expect((r as { error: { message: string } }).error.message).toMatch(message);
    }
    expect(await p.rows()).toBe(0);
    expect(await p.alarmAt()).toBeNull();
  });

  it('in "id" mode measures the body alone: 128,000 bytes of text fit', async () => {
    const p = await producerObject("id-size", { queue: "fake", options: { ids: "id" } });
    expect(await p.sendRaw("z".repeat(128_000), { contentType: "text" })).toHaveProperty("id");
    expect(await p.sendRaw("z".repeat(128_001), { contentType: "text" })).toMatchObject({
      error: { name: "RangeError" },
    });
  });
});
