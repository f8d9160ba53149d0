// The fault checker (test/faults/checker.mjs, push-checker.mjs) on hand-made histories of
// the push path, one per anomaly: a message a queue() handler was given not lost, two handlers
// holding one message at once, a delivery after a handler acked, a retried message never seen
// again, a consumer shard abort that never fired (and one skipped once the queue emptied).
import { describe, expect, it } from "vitest";
import { Script } from "./fault-script.ts";

describe("the fault checker", () => {
  it("counts a message a push consumer's queue() handler was given as delivered, not lost", () => {
    const s = new Script();
    s.send(["a", "b"]);
    const d = s.pushStart([{ h: "a" }, { h: "b" }]);
    s.pushEnd(d, { acked: ["a", "b"] });
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures).toMatchObject({
      lost: 0,
      delivered: { deliveries: 2, distinct: 2 },
      push: { deliveries: 2, invocations: 1, overlaps_while_up: 0, after_ack: 0, not_again: 0 },
    });
    // The same history without the handler's report: both are lost.
    const t = new Script();
    t.send(["a", "b"]);
    expect(t.drained().figures.lost).toBe(2);
  });

  it("reports two push handlers holding one message at once as a push overlap, but not across a consumer shard abort or a kill", () => {
    const s = new Script();
    s.send(["a", "b", "c"]);
    const a1 = s.pushStart([{ h: "a" }]);
    const a2 = s.pushStart([{ h: "a", a: 2 }], 100);
    s.pushEnd(a2, { acked: ["a"] });
    s.pushEnd(a1, { acked: ["a"] });
    const b1 = s.pushStart([{ h: "b" }]);
    s.consumerAbort("abort-leased");
    const b2 = s.pushStart([{ h: "b", a: 2 }], 100);
    s.pushEnd(b2, { acked: ["b"] });
    s.pushEnd(b1, { acked: ["b"] });
    // Cut off by a kill: its span ends there, so the next delivery overlaps nothing.
    s.pushStart([{ h: "c" }]);
    s.kill();
    const c2 = s.pushStart([{ h: "c" }], 100);
    s.pushEnd(c2, { acked: ["c"] });
    const r = s.drained();
    expect(r.figures.push).toMatchObject({
      overlaps_while_up: 1,
      overlaps_across: { "abort-consumer": 1, kill: 0 },
      duplicates: { causes: { kill: 1 } },
    });
    expect(r.examples.push_overlaps[0]).toMatchObject({ h: "a" });
    expect(r.failures).toEqual(["1 push overlaps while up (one message in two queue() handlers at once)"]);
  });

  it("ends a handler that started while the service was being killed with the kill, not at the next one", () => {
    const s = new Script();
    s.send(["d"]);
    // SIGKILL sent; the handler reports its start before the process is gone, and never its end.
    const kill = s.n++;
    s.ops.push({ op: kill, p: "nemesis", type: "invoke", f: "kill", t: (s.t += 10), value: { n: 1 } });
    s.pushStart([{ h: "d" }], 5);
    s.ops.push({ op: kill, p: "nemesis", type: "ok", f: "kill", t: (s.t += 1500) });
    const start = s.n++;
    s.ops.push({ op: start, p: "nemesis", type: "invoke", f: "start", t: (s.t += 10), value: { n: 1 } });
    s.ops.push({ op: start, p: "nemesis", type: "ok", f: "start", t: (s.t += 5000), value: { ready_ms: 5000 } });
    const d2 = s.pushStart([{ h: "d", a: 2 }], 100);
    s.pushEnd(d2, { acked: ["d"] });
    const r = s.drained();
    expect(r.figures.push).toMatchObject({ overlaps_while_up: 0 });
    expect(r.failures).toEqual([]);
  });

  it("reports a push delivery after a handler acked the message with no fault between, and not one after a consumer shard abort", () => {
    const s = new Script();
    s.send(["a", "b"]);
    const a1 = s.pushStart([{ h: "a" }]);
    s.pushEnd(a1, { acked: ["a"] });
    const a2 = s.pushStart([{ h: "a", a: 2 }], 100);
    s.pushEnd(a2, { acked: ["a"] });
    const b1 = s.pushStart([{ h: "b" }]);
    s.pushEnd(b1, { acked: ["b"] });
    s.consumerAbort("abort-dispatched");
    const b2 = s.pushStart([{ h: "b", a: 2 }], 100);
    s.pushEnd(b2, { acked: ["b"] });
    const r = s.drained();
    expect(r.figures.push).toMatchObject({
      after_ack: 1,
      duplicates: { causes: { abort_consumer: 1, acked_then_again: 1 } },
    });
    expect(r.examples.push_after_ack).toEqual([expect.objectContaining({ h: "a" })]);
    expect(r.failures).toEqual(["1 push deliveries after the consumer acked the message, no fault in between"]);
  });

  it("reports a message a push handler retried or threw at its last delivery and that never came again, but not one that reached the dead-letter queue", () => {
    const s = new Script();
    s.send(["a", "b", "c"]);
    const d1 = s.pushStart([{ h: "a" }, { h: "b" }, { h: "c" }]);
    s.pushEnd(d1, { acked: ["c"], retried: ["a", "b"], threw: true });
    s.pull([{ h: "b", l: "L1" }], { q: "faults-dlq", p: "dlq-consumer-0" });
    s.ack(["L1"]);
    const r = s.drained();
    expect(r.figures.push).toMatchObject({
      not_again: 1,
      throws: { invocations: 1, acked_before: 1, retried_by: 2 },
      duplicates: { causes: { dead_lettered: 1 } },
    });
    expect(r.examples.push_not_again).toEqual([expect.objectContaining({ h: "a" })]);
    // Gone without an ack: lost as well, whatever the push checker says of it.
    expect(r.failures).toEqual([
      "1 acknowledged messages lost",
      "1 push messages not acked at their last delivery and never delivered again",
    ]);
    expect(r.examples.lost).toEqual(["a"]);
  });

  it("takes a copy dead-lettered again, its lease lost to a kill, for the move already delivered from the dead-letter queue; not one whose attempts moved on", () => {
    const s = new Script();
    s.send(["a", "b"]);
    const d1 = s.pushStart([
      { h: "a", a: 3 },
      { h: "b", a: 3 },
    ]);
    s.pushEnd(d1, { retried: ["a", "b"] });
    // Killed before the source heard of the dead-lettering: both copies come again, attempts as they were (b's counted on).
    s.kill();
    s.pull(
      [
        { h: "a", l: "L1" },
        { h: "b", l: "L2" },
      ],
      { q: "faults-dlq", p: "dlq-consumer-0" },
    );
    s.ack(["L1", "L2"]);
    const d2 = s.pushStart(
      [
        { h: "a", a: 3 },
        { h: "b", a: 4 },
      ],
      100,
    );
    s.pushEnd(d2, { retried: ["a", "b"] });
    const r = s.drained();
    expect(r.figures.push).toMatchObject({ not_again: 1, dead_lettered_again: 1 });
    expect(r.examples.push_not_again).toEqual([expect.objectContaining({ h: "b" })]);
    expect(r.failures).toEqual(["1 push messages not acked at their last delivery and never delivered again"]);
  });

  it("fails a run whose consumer shard abort never fired", () => {
    const s = new Script();
    s.plan({ consumerAborts: 1 });
    s.send(["a"]);
    s.consumerAbort("abort-leased", false);
    const d = s.pushStart([{ h: "a" }]);
    s.pushEnd(d, { acked: ["a"] });
    const r = s.drained();
    expect(r.failures).toEqual(["0 of the 1 planned consumer shard aborts fired"]);
    expect(r.figures.push.consumer_aborts).toMatchObject({ planned: 1, count: 1, fired: 0 });
  });

  it("counts an abort that nothing came to fire before the queue emptied after the load as skipped, not as one that failed", () => {
    const s = new Script();
    s.plan({ consumerAborts: 2 });
    s.send(["a"]);
    s.consumerAbort("abort-leased");
    const d = s.pushStart([{ h: "a" }]);
    s.pushEnd(d, { acked: ["a"] });
    s.consumerAbort("abort-dispatched", "skipped");
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.push.consumer_aborts).toMatchObject({ planned: 2, count: 1, fired: 1, skipped: 1 });
  });
});
