// The fault checker's order check (test/faults/order-checker.mjs) on hand-made
// histories: a key's messages first delivered out of the order the service accepted them,
// a batch holding them out of order, one delivered while an earlier one of its key is
// leased or waits for a retry, and what must pass: a dead-lettered message releasing its
// key, other keys, sends in flight together, a redelivery before the later message, sends
// left unknown. Each history differs from a passing one only in what the check looks at.
import { describe, expect, it } from "vitest";
import type { Op } from "../faults/history.mjs";
import { Script } from "./fault-script.ts";

/** A Script whose producer sends messages with ordering keys, and whose pulls answer with them. */
class Ordered extends Script {
  keys = new Map<string, string>();
  seqs = new Map<string, number>();
  /** Invokes one send of these messages ([harness id, ordering key or null]); `answer` completes it. */
  invokeSend(msgs: Array<[string, string | null]>, { q = "faults", extra = {} as Record<string, unknown> } = {}) {
    const ord = msgs.flatMap(([h, key]) => {
      if (key === null) return [];
      this.keys.set(h, key);
      const seq = (this.seqs.get(key) ?? 0) + 1;
      this.seqs.set(key, seq);
      return [[h, key, seq]];
    });
    const op = this.n++;
    this.ops.push({
      op,
      p: "producer-0",
      type: "invoke",
      f: "send",
      t: (this.t += 10),
      value: { q, hs: msgs.map(([h]) => h), ...(ord.length ? { ord } : {}), ...extra },
    });
    return op;
  }
  answer(op: number, hs: string[], type: Op["type"] = "ok") {
    this.ops.push({
      op,
      p: "producer-0",
      type,
      f: "send",
      t: (this.t += 5),
      value: type === "ok" ? { ids: hs.map((h) => `id-${h}`) } : { status: 503, error: "x" },
    });
  }
  /** Sends one after another, each answered before the next is invoked: the accepted order. */
  sendKeyed(msgs: Array<[string, string | null]>, { q = "faults", type = "ok" as Op["type"] } = {}) {
    for (const m of msgs) this.answer(this.invokeSend([m], { q }), [m[0]], type);
  }
  /** A pull answering each message with the ordering key it was sent with. */
  pullKeyed(
    msgs: Array<{ h: string; l: string; a?: number }>,
    opts: { vt?: number; dt?: number; q?: string; p?: string } = {},
  ) {
    this.pull(
      msgs.map((m) => ({ ...m, ...(this.keys.has(m.h) ? { k: this.keys.get(m.h) } : {}) })),
      opts,
    );
  }
}

const HELD = "1 messages delivered while an earlier message of their key was leased or waiting for a retry";

describe("the fault checker's order check", () => {
  it("passes a key's messages delivered one at a time, and together in one batch, in the order they were sent", () => {
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
      ["c", "k1"],
    ]);
    s.pullKeyed([{ h: "a", l: "L1" }]);
    s.ack(["L1"]);
    s.pullKeyed([
      { h: "b", l: "L2" },
      { h: "c", l: "L3" },
    ]);
    s.ack(["L2", "L3"]);
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.order).toEqual({
      keys: 1,
      messages: 3,
      delivered: 3,
      unknown_delivered: 0,
      ordered_pairs: 3,
      first_out_of_order: 0,
      batches_out_of_order: 0,
      delivered_while_held: 0,
      wrong_key: 0,
      keyed_redriven: 0,
    });
  });

  it("reports a later message of a key first delivered before an earlier one", () => {
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    s.pullKeyed([{ h: "b", l: "L1" }]);
    s.ack(["L1"]);
    s.pullKeyed([{ h: "a", l: "L2" }]);
    s.ack(["L2"]);
    const r = s.drained();
    expect(r.figures.order).toMatchObject({ first_out_of_order: 1, batches_out_of_order: 0 });
    expect(r.examples.order_out_of_order[0]).toMatchObject({
      key: "k1",
      why: "first delivered before an earlier message of its key",
      earlier: { h: "a", seq: 1 },
      later: { h: "b", seq: 2 },
    });
    expect(r.failures).toContain(
      "1 messages of an ordering key first delivered before an earlier message of their key",
    );
    expect(r.valid).toBe(false);
  });

  it("reports a batch holding a later message of a key ahead of an earlier one, and passes the same batch in order", () => {
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    s.pullKeyed([
      { h: "b", l: "L1" },
      { h: "a", l: "L2" },
    ]);
    s.ack(["L1", "L2"]);
    const r = s.drained();
    expect(r.figures.order).toMatchObject({ first_out_of_order: 0, batches_out_of_order: 1, delivered_while_held: 0 });
    expect(r.examples.order_out_of_order[0]).toMatchObject({
      why: "ahead of an earlier message of its key in one batch",
      earlier: { h: "a" },
      later: { h: "b" },
    });
    expect(r.failures).toEqual(["1 batches holding messages of one ordering key out of their order"]);
    const t = new Ordered();
    t.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    t.pullKeyed([
      { h: "a", l: "L1" },
      { h: "b", l: "L2" },
    ]);
    t.ack(["L1", "L2"]);
    expect(t.drained().failures).toEqual([]);
  });

  it("reports a later message delivered while an earlier one of its key is leased", () => {
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    s.pullKeyed([{ h: "a", l: "L1" }], { vt: 5000 });
    s.pullKeyed([{ h: "b", l: "L2" }], { p: "consumer-1" });
    s.ack(["L1"]);
    s.ack(["L2"]);
    const r = s.drained();
    expect(r.figures.order).toMatchObject({ first_out_of_order: 0, delivered_while_held: 1 });
    expect(r.examples.order_while_held[0]).toMatchObject({
      key: "k1",
      state: "leased",
      earlier: { h: "a" },
      later: { h: "b" },
    });
    expect(r.failures).toEqual([HELD]);
  });

  it("reports a later message delivered while an earlier one of its key waits for a retry: retried, its lease run out, or its ack refused as stale", () => {
    // Retried by the consumer, then b before a comes again.
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    s.pullKeyed([{ h: "a", l: "L1" }]);
    s.retry(["L1"]);
    s.pullKeyed([{ h: "b", l: "L2" }]);
    s.pullKeyed([{ h: "a", l: "L3", a: 2 }]);
    s.ack(["L3"]);
    s.ack(["L2"]);
    const r = s.drained();
    expect(r.figures.order).toMatchObject({ first_out_of_order: 0, delivered_while_held: 1 });
    expect(r.examples.order_while_held[0]).toMatchObject({
      state: "waiting for a retry",
      earlier: { h: "a" },
      later: { h: "b" },
    });
    expect(r.failures).toEqual([HELD]);
    // Its lease ran out (dropped), then b before a comes again.
    const t = new Ordered();
    t.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    t.pullKeyed([{ h: "a", l: "L1" }], { vt: 1000 });
    t.pullKeyed([{ h: "b", l: "L2" }], { dt: 2000 });
    t.pullKeyed([{ h: "a", l: "L3", a: 2 }]);
    t.ack(["L3"]);
    t.ack(["L2"]);
    const tr = t.drained();
    expect(tr.examples.order_while_held[0]).toMatchObject({ state: "waiting for a retry" });
    expect(tr.failures).toEqual([HELD]);
    // Acked after its lease ran out, the ack refused as stale: a still waits, so b may not come.
    const u = new Ordered();
    u.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    u.pullKeyed([{ h: "a", l: "L1" }], { vt: 1000 });
    u.ack(["L1"], [], 2000);
    u.pullKeyed([{ h: "b", l: "L2" }]);
    u.pullKeyed([{ h: "a", l: "L3", a: 2 }]);
    u.ack(["L3"]);
    u.ack(["L2"]);
    expect(u.drained().failures).toEqual([HELD]);
  });

  it("passes a later message delivered once the earlier one of its key is dead-lettered, not before", () => {
    const run = (bAfter: number) => {
      const s = new Ordered();
      s.sendKeyed([
        ["a", "k1"],
        ["b", "k1"],
      ]);
      for (let n = 1; n <= 3; n++) {
        if (n === bAfter + 1) s.pullKeyed([{ h: "b", l: "Lb" }]);
        s.pullKeyed([{ h: "a", l: `L${n}`, a: n }]);
        s.retry([`L${n}`]);
      }
      if (bAfter === 3) s.pullKeyed([{ h: "b", l: "Lb" }]);
      s.ack(["Lb"]);
      s.pullKeyed([{ h: "a", l: "L4" }], { q: "faults-dlq", p: "dlq-consumer-0" });
      s.ack(["L4"]);
      return s.drained();
    };
    // After its third delivery was retried out to the dead-letter queue: released.
    expect(run(3).failures).toEqual([]);
    // Between its second and third delivery it still held the key.
    const r = run(2);
    expect(r.examples.order_while_held[0]).toMatchObject({
      state: "waiting for a retry",
      earlier: { h: "a" },
      later: { h: "b" },
    });
    expect(r.failures).toEqual([HELD]);
    // With max_retries 0: dead-lettered at its first retry, at attempts 1 in both queues; its
    // dead-letter queue delivery is not one of its stay in the queue it was sent to.
    const t = new Ordered();
    t.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    t.pullKeyed([{ h: "a", l: "L1" }]);
    t.retry(["L1"]);
    t.pullKeyed([{ h: "b", l: "L2" }]);
    t.ack(["L2"]);
    t.pullKeyed([{ h: "a", l: "L3" }], { q: "faults-dlq", p: "dlq-consumer-0" });
    t.ack(["L3"]);
    expect(t.drained().failures).toEqual([]);
  });

  it("passes messages of different keys delivered while the other's is leased", () => {
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", "k2"],
      ["c", null],
    ]);
    s.pullKeyed([{ h: "a", l: "L1" }]);
    s.pullKeyed([{ h: "b", l: "L2" }], { p: "consumer-1" });
    s.pullKeyed([{ h: "c", l: "L3" }], { p: "consumer-2" });
    s.ack(["L1", "L2", "L3"]);
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.order).toMatchObject({ keys: 2, messages: 2, ordered_pairs: 0 });
  });

  it("passes sends of one key in flight together (b invoked before a's ok) delivered in either order", () => {
    for (const order of [
      ["b", "a"],
      ["a", "b"],
    ] as const) {
      const s = new Ordered();
      const a = s.invokeSend([["a", "k1"]]);
      const b = s.invokeSend([["b", "k1"]]);
      s.answer(a, ["a"]);
      s.answer(b, ["b"]);
      // The first one still leased when the second comes: neither is earlier.
      s.pullKeyed([{ h: order[0], l: "L1" }]);
      s.pullKeyed([{ h: order[1], l: "L2" }], { p: "consumer-1" });
      s.ack(["L1", "L2"]);
      const r = s.drained();
      expect(r.failures, order.join()).toEqual([]);
      expect(r.figures.order.ordered_pairs).toBe(0);
    }
  });

  it("passes a later message delivered after the earlier one's lease ran out and it came again first, alone or ahead in one batch", () => {
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    s.pullKeyed([{ h: "a", l: "L1" }], { vt: 1000 });
    s.pullKeyed([{ h: "a", l: "L2", a: 2 }], { dt: 2000 });
    s.ack(["L2"]);
    s.pullKeyed([{ h: "b", l: "L3" }]);
    s.ack(["L3"]);
    expect(s.drained().failures).toEqual([]);
    const t = new Ordered();
    t.sendKeyed([
      ["a", "k1"],
      ["b", "k1"],
    ]);
    t.pullKeyed([{ h: "a", l: "L1" }], { vt: 1000 });
    t.pullKeyed(
      [
        { h: "a", l: "L2", a: 2 },
        { h: "b", l: "L3" },
      ],
      { dt: 2000 },
    );
    t.ack(["L2", "L3"]);
    const r = t.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.order).toMatchObject({ ordered_pairs: 1, delivered_while_held: 0 });
  });

  it("places a send left unknown after the ones answered before it, before none; a keyed retry answered ok places it at that answer", () => {
    // a unknown (it may have been applied after b): b first is no violation.
    const s = new Ordered();
    s.sendKeyed([["a", "k1"]], { type: "unknown" });
    s.sendKeyed([["b", "k1"]]);
    s.pullKeyed([{ h: "b", l: "L1" }]);
    s.ack(["L1"]);
    s.pullKeyed([{ h: "a", l: "L2" }]);
    s.ack(["L2"]);
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.order).toMatchObject({ unknown_delivered: 1, ordered_pairs: 0 });
    // b unknown and stored: it still comes after a.
    const t = new Ordered();
    t.sendKeyed([["a", "k1"]]);
    t.sendKeyed([["b", "k1"]], { type: "unknown" });
    t.pullKeyed([{ h: "b", l: "L1" }]);
    t.ack(["L1"]);
    t.pullKeyed([{ h: "a", l: "L2" }]);
    t.ack(["L2"]);
    expect(t.drained().figures.order).toMatchObject({ first_out_of_order: 1 });
    // a's first try unknown, its second (same Idempotency-Key) ok: a comes before b.
    const u = new Ordered();
    u.answer(u.invokeSend([["a", "k1"]], { extra: { key: "ik", try: 1 } }), ["a"], "unknown");
    u.answer(u.invokeSend([["a", "k1"]], { extra: { key: "ik", try: 2 } }), ["a"]);
    u.sendKeyed([["b", "k1"]]);
    u.pullKeyed([{ h: "b", l: "L1" }]);
    u.ack(["L1"]);
    u.pullKeyed([{ h: "a", l: "L2" }]);
    u.ack(["L2"]);
    expect(u.drained().figures.order).toMatchObject({ first_out_of_order: 1 });
  });

  it("reports a push handler given a later message while an earlier one of its key is in another handler, and passes them one after another", () => {
    const s = new Ordered();
    s.sendKeyed(
      [
        ["a", "k1"],
        ["b", "k1"],
      ],
      { q: "faults-push" },
    );
    const a = s.pushStart([{ h: "a" }]);
    const b = s.pushStart([{ h: "b" }]);
    s.pushEnd(a, { acked: ["a"] });
    s.pushEnd(b, { acked: ["b"] });
    const r = s.drained();
    expect(r.examples.order_while_held[0]).toMatchObject({
      q: "faults-push",
      state: "leased",
      earlier: { h: "a" },
      later: { h: "b" },
    });
    expect(r.failures).toEqual([HELD]);
    const t = new Ordered();
    t.sendKeyed(
      [
        ["a", "k1"],
        ["b", "k1"],
      ],
      { q: "faults-push" },
    );
    const a2 = t.pushStart([{ h: "a" }]);
    t.pushEnd(a2, { acked: ["a"] });
    const b2 = t.pushStart([{ h: "b" }]);
    t.pushEnd(b2, { acked: ["b"] });
    expect(t.drained().failures).toEqual([]);
    // A handler that threw retried a: b may not come before a does again.
    const u = new Ordered();
    u.sendKeyed(
      [
        ["a", "k1"],
        ["b", "k1"],
      ],
      { q: "faults-push" },
    );
    const a3 = u.pushStart([{ h: "a" }]);
    u.pushEnd(a3, { retried: ["a"], threw: true });
    const b3 = u.pushStart([{ h: "b" }]);
    u.pushEnd(b3, { acked: ["b"] });
    const a4 = u.pushStart([{ h: "a", a: 2 }]);
    u.pushEnd(a4, { acked: ["a"] });
    const ur = u.drained();
    expect(ur.examples.order_while_held[0]).toMatchObject({
      state: "waiting for a retry",
      earlier: { h: "a" },
      later: { h: "b" },
    });
    expect(ur.failures).toEqual([HELD]);
  });

  it("reports a pull answering a message with another ordering_key than it was sent with, or with one it was sent without", () => {
    const s = new Ordered();
    s.sendKeyed([
      ["a", "k1"],
      ["b", null],
    ]);
    s.pull([
      { h: "a", l: "L1" },
      { h: "b", l: "L2", k: "k1" },
    ]);
    s.ack(["L1", "L2"]);
    const r = s.drained();
    expect(r.examples.order_wrong_key).toEqual([
      { h: "a", q: "faults", sent: "k1", delivered: null },
      { h: "b", q: "faults", sent: null, delivered: "k1" },
    ]);
    expect(r.failures).toEqual(["2 pulled messages with another ordering_key than they were sent with"]);
  });
});
