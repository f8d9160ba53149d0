// The fault checker (test/faults/purge-checker.mjs, order-checker.mjs) on hand-made histories
// of keyed dead letters and of purges of the dead-letter queue during a redrive:
// what a purge reported deleted is never delivered after it, is counted apart from the lost
// messages, and nothing else is; a copy moved back keeps its ordering key.
import { describe, expect, it } from "vitest";
import { Script } from "./fault-script.ts";

const AFTER_PURGE = "1 deliveries of messages a purge reported deleted, after it answered";

/** Sends `h` and dead-letters it: pulled at its last attempt, retried out. */
function deadLettered(s: Script, h: string, lease: string) {
  s.send([h]);
  s.pull([{ h, l: lease, a: 3 }]);
  s.retry([lease]);
}

describe("the fault checker, with purges of the dead-letter queue", () => {
  it("fails a run in which a message a purge reported deleted is delivered after the purge answered, but for a copy a cut-off move may have left", () => {
    const run = (kill: boolean) => {
      const s = new Script();
      deadLettered(s, "m", "L1");
      // The redrive moved it while the purge reported it deleted (the issue-28 race).
      s.redrive("ok", 1);
      s.purge(["id-m"]);
      if (kill) s.kill();
      s.pull([{ h: "m", l: "L2", a: 1 }]);
      s.ack(["L2"]);
      return s.drained();
    };
    const raced = run(false);
    expect(raced.failures).toEqual([AFTER_PURGE]);
    expect(raced.examples.delivered_after_purge).toEqual([expect.objectContaining({ id: "id-m", q: "faults" })]);
    const cut = run(true);
    expect(cut.failures).toEqual([]);
    expect(cut.figures.purges).toMatchObject({ delivered_after_purge: 0, delivered_after_purge_across_cut: 1 });
    // Delivered while the purge ran (invoked before it answered): it was still there.
    const s = new Script();
    deadLettered(s, "d", "D1");
    s.ops.push({
      op: 900,
      p: "dlq-consumer-0",
      type: "invoke",
      f: "pull",
      t: (s.t += 10),
      value: { q: "faults-dlq", n: 10, vt: 5000 },
    });
    s.purge(["id-d"]);
    s.ops.push({
      op: 900,
      p: "dlq-consumer-0",
      type: "ok",
      f: "pull",
      t: (s.t += 5),
      value: { msgs: [{ h: "d", id: "id-d", a: 1, l: "D2" }] },
    });
    s.ack(["D2"], []);
    expect(s.drained().failures).toEqual([]);
  });

  it("counts a dead letter a purge named apart from the lost messages, and one no purge named as lost", () => {
    const s = new Script();
    deadLettered(s, "m", "M1");
    deadLettered(s, "n", "N1");
    s.redrive("ok", 0);
    s.purge(["id-m"]);
    const r = s.drained();
    expect(r.failures).toEqual(["1 acknowledged messages lost"]);
    expect(r.examples.lost).toEqual(["n"]);
    expect(r.figures.purges).toMatchObject({
      purges: 1,
      purges_ok: 1,
      reported_deleted: 1,
      purged: 1,
      maybe_purged: 0,
    });
  });

  it("counts a dead letter as maybe purged when a purge never answered, but not a message still in its queue", () => {
    const s = new Script();
    deadLettered(s, "m", "M1");
    s.send(["q"]);
    // Retried at its first attempt: still in the queue, not dead-lettered.
    s.pull([{ h: "q", l: "Q1", a: 1 }]);
    s.retry(["Q1"]);
    s.purge([], "unknown");
    const r = s.drained();
    expect(r.failures).toEqual(["1 acknowledged messages lost"]);
    expect(r.examples.lost).toEqual(["q"]);
    expect(r.figures.purges).toMatchObject({ purges_unknown: 1, purged: 0, maybe_purged: 1 });
  });
});

describe("the fault checker, with push messages dead-lettered and then purged", () => {
  it("counts a push message its handler retried out and a purge then deleted as purged, not as never delivered again, and one no purge named as both lost and never again", () => {
    const s = new Script();
    s.send(["a", "b"]);
    // Both dead-lettered by the push consumer at their last attempt; a purge of the dead-letter queue names a only.
    const d = s.pushStart([
      { h: "a", a: 3 },
      { h: "b", a: 3 },
    ]);
    s.pushEnd(d, { retried: ["a", "b"] });
    s.purge(["id-a"]);
    const r = s.drained();
    expect(r.figures.push).toMatchObject({ not_again: 1 });
    expect(r.examples.push_not_again).toEqual([expect.objectContaining({ h: "b" })]);
    expect(r.figures.purges).toMatchObject({ purged: 1 });
    expect(r.failures).toEqual([
      "1 acknowledged messages lost",
      "1 push messages not acked at their last delivery and never delivered again",
    ]);
    expect(r.examples.lost).toEqual(["b"]);
  });

  it("counts a push message dead-lettered before a purge that never answered as maybe purged, but not one the purge came before", () => {
    const s = new Script();
    s.send(["a", "b"]);
    const d = s.pushStart([{ h: "a", a: 3 }]);
    s.pushEnd(d, { retried: ["a"] });
    s.purge([], "unknown");
    const e = s.pushStart([{ h: "b", a: 3 }]);
    s.pushEnd(e, { retried: ["b"] });
    const r = s.drained();
    expect(r.examples.push_not_again).toEqual([expect.objectContaining({ h: "b" })]);
    expect(r.figures.purges).toMatchObject({ purges_unknown: 1, maybe_purged: 1 });
  });
});

describe("the fault checker, with keyed dead letters redriven", () => {
  /** A send of `h` with ordering key `key`, as workload.mjs logs it, answered ok. */
  const sendKeyed = (s: Script, h: string, key: string) => {
    const op = s.n++;
    s.ops.push({
      op,
      p: "producer-0",
      type: "invoke",
      f: "send",
      t: (s.t += 10),
      value: { q: "faults", hs: [h], ord: [[h, key, 1]] },
    });
    s.ops.push({ op, p: "producer-0", type: "ok", f: "send", t: (s.t += 5), value: { ids: [`id-${h}`] } });
  };

  it("reports a redriven copy pulled without the ordering key it was sent with, and counts the keyed messages that came back", () => {
    const run = (backWith: string | undefined) => {
      const s = new Script();
      sendKeyed(s, "m", "k1");
      s.pull([{ h: "m", l: "L1", a: 3, k: "k1" }]);
      s.retry(["L1"]);
      s.redrive("ok", 1);
      s.pull([{ h: "m", l: "L2", a: 1, ...(backWith ? { k: backWith } : {}) }]);
      s.ack(["L2"]);
      return s.drained();
    };
    const kept = run("k1");
    expect(kept.failures).toEqual([]);
    expect(kept.figures.order).toMatchObject({ keyed_redriven: 1, wrong_key: 0 });
    const lostKey = run(undefined);
    expect(lostKey.failures).toEqual(["1 pulled messages with another ordering_key than they were sent with"]);
    expect(lostKey.examples.order_wrong_key).toEqual([{ h: "m", q: "faults", sent: "k1", delivered: null }]);
  });
});
