/**
 * shardq/inbox in a user's Durable Object (test/fixtures/outbox-probe's InboxConsumer, a balance
 * that each message adds its `n` to): once per id, whether the repeat is a redelivery, a retry
 * after a failure or the outbox sending again; each() keeping order; the envelope's id and body;
 * expiry after the window.
 */
import { describe, expect, it } from "vitest";
import { envelopeOf, bytesEnvelopeOf } from "../../src/envelope/envelope";
import { consumerObject } from "./outbox-helpers";

const OUTBOX_ID = "0123456789abcdef0123456789abcdef";

describe("inbox.once() and each()", () => {
  it("apply a message once per id: a redelivered batch is acked without its effects", async () => {
    const c = consumerObject("once");
    const batch = [
      { id: "m1", body: { n: 1 } },
      { id: "m2", body: { n: 2 } },
    ];
    const first = await c.apply(batch);
    expect(first.outcomes).toEqual([
      { id: "m1", outcome: "applied" },
      { id: "m2", outcome: "applied" },
    ]);
    expect(first.total).toBe(3);
    const again = await c.apply([...batch, { id: "m3", body: { n: 4 } }]);
    expect(again.outcomes.map((o) => o.outcome)).toEqual(["duplicate", "duplicate", "applied"]);
    expect(again).toMatchObject({ total: 7, applied: ["m1", "m2", "m3"] });
    expect(await c.rows()).toBe(3);
  });

  it("write nothing, the id included, when the effect throws: the retry applies it", async () => {
    const c = consumerObject("effect-throws");
    const failed = await c.applyOnce({ id: "m1", body: { n: 5 } }, "throw");
    expect(failed).toMatchObject({ error: { name: "Error", message: "effect failed" }, total: 0, applied: [] });
    expect(await c.seen("m1")).toBe(false);
    const retried = await c.applyOnce({ id: "m1", body: { n: 5 } });
    expect(retried).toMatchObject({ result: { applied: true, id: "m1", value: 5 }, total: 5 });
    expect(await c.applyOnce({ id: "m1", body: { n: 5 } })).toMatchObject({
      result: { applied: false, id: "m1" },
      total: 5,
    });
  });

  it("refuse an effect that returns a promise, writing nothing", async () => {
    const c = consumerObject("effect-async");
    const r = await c.applyOnce({ id: "m1", body: { n: 5 } }, "async");
    expect(r).toMatchObject({ error: { name: "TypeError" }, total: 0 });
    expect(await c.seen("m1")).toBe(false);
  });

  it("each() keeps order: after a failure every later message is held back, and a redelivery applies them in turn", async () => {
    const c = consumerObject("each-order");
    const r = await c.apply([
      { id: "a", body: { n: 1 } },
      { id: "b", body: { n: 2, fail: true } },
      { id: "c", body: { n: 4 } },
    ]);
    expect(r.outcomes).toEqual([
      { id: "a", outcome: "applied" },
      { id: "b", outcome: "failed", error: "Error: message b fails" },
      { id: "c", outcome: "held" },
    ]);
    expect(r).toMatchObject({ total: 1, applied: ["a"] });
    const redelivered = await c.apply([
      { id: "a", body: { n: 1 } },
      { id: "b", body: { n: 2 } },
      { id: "c", body: { n: 4 } },
    ]);
    expect(redelivered.outcomes.map((o) => o.outcome)).toEqual(["duplicate", "applied", "applied"]);
    expect(redelivered).toMatchObject({ total: 7, applied: ["a", "b", "c"] });
  });
});

describe("the outbox's envelope", () => {
  it("is deduplicated by the id inside it, not the queue's id, and its body is what the effect sees", async () => {
    const c = consumerObject("envelope");
    const env = envelopeOf(OUTBOX_ID, { n: 3 });
    // The outbox sent it twice (its answer was lost): two queue messages, one outbox id.
    const r = await c.apply([
      { id: "queue-id-1", body: env },
      { id: "queue-id-2", body: env },
    ]);
    expect(r.outcomes).toEqual([
      { id: OUTBOX_ID, outcome: "applied" },
      { id: OUTBOX_ID, outcome: "duplicate" },
    ]);
    expect(r).toMatchObject({ total: 3, applied: [OUTBOX_ID] });
    expect(await c.seen(OUTBOX_ID)).toBe(true);
    expect(await c.seen("queue-id-1")).toBe(false);
  });

  it("takes a bytes envelope's id, and leaves alone a body that only looks like an envelope", async () => {
    const c = consumerObject("envelope-shapes");
    const bytes = bytesEnvelopeOf(OUTBOX_ID, new Uint8Array([7, 8]));
    // The probe's effect adds body.n: an ArrayBuffer has none. The id is the envelope's.
    expect(await c.applyOnce({ id: "q1", body: bytes })).toMatchObject({
      result: { applied: true, id: OUTBOX_ID },
      total: 0,
    });
    const lookalike = { shardq_outbox: 1, id: OUTBOX_ID, body: { n: 1 }, extra: true, n: 10 };
    expect(await c.applyOnce({ id: "q2", body: lookalike })).toMatchObject({
      result: { applied: true, id: "q2" },
      total: 10,
    });
  });
});

describe("expiry", () => {
  it("forgets an id once the window has passed, and only then", async () => {
    const c = consumerObject("expiry");
    await c.apply([{ id: "m1", body: { n: 1 } }]);
    await c.backdate(4 * 86_400 - 60);
    expect(await c.expire()).toBe(0);
    expect(await c.seen("m1")).toBe(true);
    await c.backdate(120);
    expect(await c.expire()).toBe(1);
    expect(await c.seen("m1")).toBe(false);
    // A repeat after the window is applied again: the window must outlast every repeat.
    expect((await c.apply([{ id: "m1", body: { n: 1 } }])).total).toBe(2);
  });

  it("refuses a window under an hour", async () => {
    const c = consumerObject("window");
    expect(await c.tryOptions({ windowSeconds: 3_599 })).toMatchObject({ error: { name: "RangeError" } });
    expect(await c.tryOptions({ windowSeconds: 3_600 })).toEqual({ ok: true });
  });
});
