// The fault checker (test/faults/checker.mjs, control-figures.mjs) on the planned faults
// themselves, in hand-made histories: a control-plane fault that did not fire or did not
// recover fails the run, one skipped for a stated reason does not; what producers saw while a
// Coordinator reset played out; an abort that never fired, and one disarmed unfired once the
// load was over.
import { describe, expect, it } from "vitest";
import { Script } from "./fault-script.ts";

describe("the fault checker", () => {
  it("fails a run on a control-plane fault that did not fire or did not recover, not on one skipped for a stated reason, and counts what producers saw meanwhile", () => {
    const s = new Script();
    s.plan({ controls: 4 });
    s.send(["a"]);
    s.controlFault(
      { kind: "abort-coordinator", point: "abort-scale-out", n: 1 },
      { fired: true, fired_ms: 100, recovered: true, recovered_ms: 1200 },
    );
    s.controlFault(
      { kind: "throw-alarm", n: 1, target: "consumer", times: 7 },
      { fired: false, skipped: true, why: "no alarm came" },
    );
    s.send(["b"]);
    s.controlFault(
      { kind: "throw-alarm", n: 2, target: "coordinator", times: 7 },
      { fired: true, fired_ms: 500, recovered: false, recovered_ms: null, thrown: 7 },
    );
    s.controlFault(
      { kind: "stale-map", n: 1, shard: "s1", hold_ms: 10_000 },
      { fired: false, error: "nothing happened" },
    );
    s.pull([
      { h: "a", l: "L1" },
      { h: "b", l: "L2" },
    ]);
    s.ack(["L1", "L2"]);
    const r = s.drained();
    expect(r.failures).toEqual([
      "throw-alarm of the coordinator fired and the service did not recover from it in time",
      "stale-map did not fire: nothing happened",
    ]);
    expect(r.figures.control).toMatchObject({
      count: 4,
      by_kind: {
        "abort-coordinator": { count: 1, fired: 1, recovered: 1, recovered_ms: { median: 1200, max: 1200, n: 1 } },
        "throw-alarm": { count: 2, fired: 1, skipped: 1, recovered: 0, alarms_thrown: 7, most_in_a_row: 7 },
      },
    });
    // Fewer control faults than planned ran: a failure too.
    const t = new Script();
    t.plan({ controls: 2 });
    t.send(["a"]);
    t.controlFault(
      { kind: "stale-map", n: 1, shard: "s1", hold_ms: 10_000 },
      { fired: true, recovered: true, recovered_ms: 11_000, retired_ms: 2000, published_ms: 10_500 },
    );
    t.pull([{ h: "a", l: "L1" }]);
    t.ack(["L1"]);
    expect(t.drained().failures).toEqual(["1 of the 2 planned control faults ran"]);
  });

  it("counts the keyed messages answered 503 while a Coordinator reset played out, by the point it cut", () => {
    const s = new Script();
    s.plan({ controls: 2 });
    s.send(["a"]);
    // A reset mid scale-out, and within it a keyed send of two (one keyed) answered 503, an unkeyed one, and a keyed one answered ok.
    const t = s.t;
    s.ops.push({
      op: 100,
      p: "nemesis",
      type: "invoke",
      f: "control",
      t: t + 10,
      value: { kind: "abort-coordinator", point: "abort-scale-out", n: 1 },
    });
    s.ops.push({
      op: 101,
      p: "producer-0",
      type: "invoke",
      f: "send",
      t: t + 20,
      value: { q: "faults", hs: ["k1", "u1"], ord: [["k1", "key-0", 0]] },
    });
    s.ops.push({
      op: 101,
      p: "producer-0",
      type: "unknown",
      f: "send",
      t: t + 30,
      value: { status: 503, error: "HTTP 503: no storage shard of this queue accepted the messages; retry later" },
    });
    s.ops.push({ op: 102, p: "producer-0", type: "invoke", f: "send", t: t + 40, value: { q: "faults", hs: ["u2"] } });
    s.ops.push({
      op: 102,
      p: "producer-0",
      type: "unknown",
      f: "send",
      t: t + 50,
      value: { status: 503, error: "HTTP 503" },
    });
    s.ops.push({
      op: 103,
      p: "producer-0",
      type: "invoke",
      f: "send",
      t: t + 60,
      value: { q: "faults", hs: ["k2"], ord: [["k2", "key-1", 0]] },
    });
    s.ops.push({ op: 103, p: "producer-0", type: "ok", f: "send", t: t + 70, value: { ids: ["id-k2"] } });
    s.ops.push({
      op: 100,
      p: "nemesis",
      type: "ok",
      f: "control",
      t: t + 80,
      value: { fired: true, fired_ms: 100, recovered: true, recovered_ms: 70 },
    });
    s.t = t + 80;
    s.n = 200;
    s.controlFault(
      { kind: "abort-coordinator", point: "abort-drain", n: 2, shard: "s1" },
      { fired: true, fired_ms: 100, recovered: true, recovered_ms: 900 },
    );
    s.pull([
      { h: "a", l: "L1" },
      { h: "k2", l: "L2" },
    ]);
    s.ack(["L1", "L2"]);
    const r = s.drained();
    expect(r.figures.control?.by_kind["abort-coordinator"]).toMatchObject({
      count: 2,
      keyed_answered_503: { "abort-scale-out": 1, "abort-drain": 0 },
    });
  });

  it("fails a run whose planned abort never fired", () => {
    const s = new Script();
    s.plan({ aborts: 1 });
    s.send(["a"]);
    s.abort("shard-0", "abort-append", false);
    s.pull([{ h: "a", l: "L1" }]);
    s.ack(["L1"]);
    const r = s.drained();
    expect(r.failures).toEqual(["0 of the 1 planned aborts fired"]);
  });

  it("counts an abort disarmed unfired once the load was over as skipped, not as one that failed to fire", () => {
    const s = new Script();
    s.plan({ aborts: 2 });
    s.send(["a"]);
    s.abort("shard-0", "abort-ack");
    s.pull([{ h: "a", l: "L1" }]);
    s.ack(["L1"]);
    const op = s.n++;
    s.ops.push({
      op,
      p: "nemesis",
      type: "invoke",
      f: "abort",
      t: 900,
      value: { n: 2, kind: "abort-append", shard: "shard-1" },
    });
    s.ops.push({
      op,
      p: "nemesis",
      type: "fail",
      f: "abort",
      t: 950,
      value: { fired: false, skipped: true, why: "the load was over while it waited" },
    });
    s.ops.push({
      op: s.n++,
      p: "nemesis",
      type: "ok",
      f: "skipped",
      t: 950,
      value: { kind: "abort-append", why: "the load was over while it waited" },
    });
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.aborts).toMatchObject({ count: 1, fired: 1 });
  });
});
