/**
 * What the outbox and the inbox agree on, without an object: a `v8` body's record
 * (clone-codec.ts) gives back what structuredClone gives; the envelope goes on and comes off;
 * settle() acks and retries a batch by the outcomes a consumer object returned.
 */
import { describe, expect, it, vi } from "vitest";
import { decodeClone, encodeClone } from "../../src/outbox/clone-codec";
import { bytesEnvelopeOf, envelopeOf, newOutboxId, unwrapEnvelope } from "../../src/envelope/envelope";
import { forInbox, idOf, settle, unwrap, type InboxOutcome } from "../../src/inbox/inbox";
import { messageOf, record } from "../../src/outbox/recorded-body";

const roundTrip = (v: unknown) => decodeClone(encodeClone(v));

describe("a v8 body's record", () => {
  it("gives back what structuredClone gives, for every kind of value V8 serialises", () => {
    const buffer = new ArrayBuffer(8);
    const value = {
      text: "é ☃ \ud83d\ude00",
      numbers: [0, -0, 1.5, Number.NaN, Infinity, -Infinity, 2 ** 60],
      big: -(2n ** 70n),
      missing: undefined,
      nothing: null,
      flags: [true, false],
      when: new Date(1_700_000_000_000),
      pattern: /a+b/giu,
      map: new Map<unknown, unknown>([
        [{ k: 1 }, "object key"],
        [2, new Set([1, "2"])],
      ]),
      bytes: new Uint8Array([1, 2, 3]),
      shared: [new Uint16Array(buffer, 2, 2), new DataView(buffer, 0, 4)],
      floats: new Float64Array([0.1, -2]),
      wrapped: [Object(false), Object(3), Object("s"), Object(5n)],
      error: new RangeError("too far"),
      __proto__key: JSON.parse('{"__proto__": 1}') as unknown,
    };
    const back = roundTrip(value) as typeof value;
    expect(back).toEqual(structuredClone(value));
    expect(Object.is(back.numbers[1], -0)).toBe(true);
    expect(back.error).toBeInstanceOf(RangeError);
    expect(back.error.message).toBe("too far");
    expect(Number.isNaN((roundTrip(new Date(Number.NaN)) as Date).getTime())).toBe(true);
    expect(Object.hasOwn(back.__proto__key as object, "__proto__")).toBe(true);
    // Two views of one buffer still share it.
    const [u16, view] = back.shared as [Uint16Array, DataView];
    expect(u16.buffer).toBe(view.buffer);
    view.setUint8(2, 9);
    expect(u16[0]).not.toBe(0);
  });

  it("keeps holes, extra keys, shared references and cycles", () => {
    const sparse: unknown[] = [1, , 3]; // eslint-disable-line no-sparse-arrays
    (sparse as unknown as Record<string, unknown>).extra = "x";
    const node: Record<string, unknown> = { name: "loop" };
    node.self = node;
    const shared = { once: true };
    const back = roundTrip({ sparse, node, pair: [shared, shared] }) as {
      sparse: unknown[];
      node: Record<string, unknown>;
      pair: [object, object];
    };
    expect(back.sparse.length).toBe(3);
    expect(1 in back.sparse).toBe(false);
    expect((back.sparse as unknown as Record<string, unknown>).extra).toBe("x");
    expect(back.node.self).toBe(back.node);
    expect(back.pair[0]).toBe(back.pair[1]);
  });

  it("refuses what structuredClone refuses, and drops what it drops", () => {
    expect(() => encodeClone({ f: () => 1 })).toThrow();
    expect(() => encodeClone(Symbol("s"))).toThrow();
    class Point {
      constructor(readonly x: number) {}
      get double() {
        return this.x * 2;
      }
    }
    expect(roundTrip(new Point(2))).toEqual({ x: 2 });
  });
});

describe("the envelope", () => {
  it("carries an id of 32 hex digits, and comes off only as written", () => {
    const id = newOutboxId();
    expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(newOutboxId()).not.toBe(id);
    expect(unwrapEnvelope(envelopeOf(id, { a: 1 }))).toEqual({ id, body: { a: 1 } });
    const bytes = unwrapEnvelope(bytesEnvelopeOf(id, new Uint8Array([0, 255])))!;
    expect(bytes.body).toBeInstanceOf(ArrayBuffer);
    expect([...new Uint8Array(bytes.body as ArrayBuffer)]).toEqual([0, 255]);
    for (const notOne of [
      null,
      "text",
      [1],
      { shardq_outbox: 1, id, body: 1, more: 2 },
      { shardq_outbox: 2, id, body: 1 },
      { shardq_outbox: 1, id: "short", body: 1 },
      { shardq_outbox: 1, id, bytes: "%%%" },
    ])
      expect(unwrapEnvelope(notOne)).toBeNull();
  });

  it("is what the outbox sends for each content type, and unwrap() gives the body back", () => {
    const id = newOutboxId();
    const cases: Array<[unknown, QueueContentType]> = [
      [{ a: [1, "b"] }, "json"],
      ["text ☃", "text"],
      [new Uint8Array([9, 8, 7]), "bytes"],
      [new Map([["k", new Date(3)]]), "v8"],
    ];
    for (const [body, contentType] of cases) {
      const sent = messageOf(record(id, body, { contentType }, "json", "envelope"), "envelope");
      const back = unwrap({ id: "queue-id", body: sent.body });
      expect(back.id).toBe(id);
      expect(body instanceof Uint8Array ? new Uint8Array(back.body as ArrayBuffer) : back.body).toEqual(body);
      expect(sent.contentType).toBe(contentType === "v8" ? "v8" : "json");
    }
  });

  it('is left out in "id" mode: the id is the message\'s own', () => {
    const id = newOutboxId();
    const sent = messageOf(record(id, { a: 1 }, { delaySeconds: 5, orderingKey: "k" }, "json", "id"), "id");
    expect(sent).toEqual({ id, body: { a: 1 }, contentType: "json", delaySeconds: 5, orderingKey: "k" });
    expect(idOf({ id, body: sent.body })).toBe(id);
  });

  it("counts its own bytes against the 128 KB a message may hold", () => {
    const id = newOutboxId();
    const json = record(id, "x".repeat(1000), {}, "json", "envelope");
    expect(json.size).toBe(JSON.stringify(envelopeOf(id, "x".repeat(1000))).length);
    const bytes = record(id, new Uint8Array(3000), { contentType: "bytes" }, "json", "envelope");
    expect(bytes.size).toBe(JSON.stringify(bytesEnvelopeOf(id, new Uint8Array(3000))).length);
    expect(() => record(id, new Uint8Array(96_000), { contentType: "bytes" }, "json", "envelope")).toThrow(RangeError);
    expect(record(id, new Uint8Array(96_000), { contentType: "bytes" }, "json", "id").size).toBe(96_000);
  });
});

describe("settle()", () => {
  it("acks what a consumer object applied or found done, and retries the rest", () => {
    const message = (id: string) => ({ id, body: {}, ack: vi.fn(), retry: vi.fn() });
    const batch = ["a", "b", "c", "d"].map(message);
    const outcomes: InboxOutcome[] = [
      { id: "a", outcome: "applied" },
      { id: "b", outcome: "duplicate" },
      { id: "c", outcome: "failed", error: "Error: no" },
      { id: "d", outcome: "held" },
    ];
    expect(forInbox(batch)).toEqual(batch.map((m) => ({ id: m.id, body: m.body })));
    settle(batch, outcomes);
    expect(batch.map((m) => [m.ack.mock.calls.length, m.retry.mock.calls.length])).toEqual([
      [1, 0],
      [1, 0],
      [0, 1],
      [0, 1],
    ]);
    expect(() => settle(batch, outcomes.toReversed())).toThrow(/outcome 0 is for d, not a/);
  });
});
