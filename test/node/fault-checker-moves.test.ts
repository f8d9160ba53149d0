// The fault checker (test/faults/checker.mjs, move-checker.mjs) on hand-made histories of
// messages that move between queues: lost when every copy is gone without an ack, a
// redriven copy as a new stay, and delivery after ack across a cut-off redrive or dead-lettering.
import { describe, expect, it } from "vitest";
import type { Op } from "../faults/history.mjs";
import { Script } from "./fault-script.ts";

describe("the fault checker, with messages that move", () => {
  it("reports a message moved out of its queue and never acked anywhere as lost, and one acked in any queue, or under an ack left unknown, as not", () => {
    const s = new Script();
    s.send(["gone", "dead", "back", "maybe"]);
    // Retried out of the queue: "gone" is then in no queue (the issue-13 bug), the others reach an ack.
    s.pull([
      { h: "gone", l: "G1", a: 3 },
      { h: "dead", l: "D1", a: 3 },
      { h: "back", l: "B1", a: 3 },
      { h: "maybe", l: "M1" },
    ]);
    s.retry(["G1", "D1", "B1"]);
    s.pull([{ h: "dead", l: "D2" }], { q: "faults-dlq", p: "dlq-consumer-0" });
    s.ack(["D2"]);
    s.redrive("ok", 1);
    s.pull([{ h: "back", l: "B2", a: 1 }]);
    s.ack(["B2"]);
    s.ackUnknown(["M1"]);
    const r = s.drained();
    expect(r.failures).toEqual(["1 acknowledged messages lost"]);
    expect(r.examples.lost).toEqual(["gone"]);
    expect(r.figures).toMatchObject({ lost: 1, lost_after_delivery: 1 });
  });

  it("sees a redriven message's new copy as a new stay, not as its id stored twice, and counts the stays and dead-letterings", () => {
    const s = new Script();
    s.plan({ redrive: true });
    s.send(["p"]);
    s.pull([{ h: "p", l: "P1", s: "s1", r: 5, a: 1 }]);
    s.retry(["P1"]);
    s.pull([{ h: "p", l: "P2", s: "s1", r: 5, a: 2 }]);
    s.retry(["P2"]);
    s.redrive("ok", 1);
    // Back in the queue on another row, attempts from 1: a new copy.
    s.pull([{ h: "p", l: "P3", s: "s2", r: 9, a: 1 }]);
    s.retry(["P3"]);
    s.pull([{ h: "p", l: "P4", a: 1 }], { q: "faults-dlq", p: "dlq-consumer-0" });
    s.ack(["P4"]);
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.stored_twice_same_id).toBe(0);
    expect(r.figures.moves).toMatchObject({
      redrives: 1,
      redrives_ok: 1,
      moved_reported: 1,
      messages_back_after_dead_letter: 1,
      messages_dead_lettered_twice: 1,
      most_stays: 2,
    });
    // Two rows within one stay are still a message stored twice.
    const t = new Script();
    t.send(["q"]);
    t.pull([{ h: "q", l: "Q1", s: "s1", r: 5, a: 1 }]);
    t.retry(["Q1"]);
    t.pull([{ h: "q", l: "Q2", s: "s2", r: 7, a: 2 }]);
    t.ack(["Q2"]);
    expect(t.drained().failures).toEqual(["1 message ids stored twice"]);
  });

  it("excuses a second copy delivered after a confirmed ack only when the message had left a queue and a redrive was cut off since, and fails a run whose redrives all failed", () => {
    /** Dead-lettered, then a redrive `how`, its copy back in the queue dead-lettered again, and the first dead-letter copy acked before the second is pulled. */
    const run = (how: Op["type"], redriveFirst = false) => {
      const s = new Script();
      s.plan({ redrive: true });
      s.send(["m"]);
      if (redriveFirst) s.redrive("unknown");
      s.redrive("ok", 0);
      s.pull([{ h: "m", l: "L1", s: "s1", r: 1, a: 3 }]);
      s.retry(["L1"]);
      s.pull([{ h: "m", l: "L2", s: "d1", r: 1, a: 1 }], { q: "faults-dlq", p: "dlq-consumer-0" });
      // The redrive stored the copy in the queue, then was cut off: its source stayed in the dead-letter queue.
      s.redrive(how);
      s.ack(["L2"]);
      s.pull([{ h: "m", l: "L3", s: "s2", r: 9, a: 1 }]);
      s.retry(["L3"]);
      s.pull([{ h: "m", l: "L4", s: "d1", r: 2, a: 1 }], { q: "faults-dlq", p: "dlq-consumer-0" });
      s.ack(["L4"]);
      return s.drained();
    };
    const cut = run("unknown");
    expect(cut.failures).toEqual([]);
    expect(cut.figures).toMatchObject({
      delivered_after_ack: 0,
      delivered_after_ack_across_cut_move: 2,
      moves: { redrives: 2, redrives_cut: 1 },
    });
    // A redrive that certainly did nothing excuses nothing; nor does one cut off before the message ever left its queue.
    expect(run("fail").failures).toEqual(["2 deliveries after a confirmed ack"]);
    const early = new Script();
    early.plan({ redrive: true });
    early.send(["m"]);
    early.redrive("unknown");
    early.redrive("ok", 0);
    early.pull([{ h: "m", l: "L1" }]);
    early.ack(["L1"]);
    early.pull([{ h: "m", l: "L2" }]);
    early.ack(["L2"]);
    expect(early.drained().failures).toEqual(["1 deliveries after a confirmed ack"]);

    const none = new Script();
    none.plan({ redrive: true });
    none.send(["m"]);
    none.redrive("fail");
    none.pull([{ h: "m", l: "L1" }]);
    none.ack(["L1"]);
    expect(none.drained().failures).toEqual(["no redrive of the dead-letter queue succeeded: the run moved nothing"]);
  });

  it("excuses the source copy of a dead-lettering a kill or a shard reset cut off, delivered after the dead-letter copy's ack, and nothing without the fault", () => {
    /** Out of retries and moved to the dead-letter queue; `cut` ends the mover before it settles the source, whose lease outlives the restart. */
    const run = (cut: (s: Script) => void, planned: Record<string, number> = {}) => {
      const s = new Script();
      s.plan({ redrive: true, ...planned });
      s.send(["m"]);
      s.redrive("ok", 0);
      s.pull([{ h: "m", l: "L1", s: "s1", r: 1, a: 3 }]);
      s.retry(["L1"]);
      cut(s);
      s.pull([{ h: "m", l: "L2", s: "d1", r: 1, a: 1 }], { q: "faults-dlq", p: "dlq-consumer-0" });
      s.ack(["L2"]);
      // The source copy's lease ran out: delivered once more, then dead-lettered again (the move is recognised there).
      s.pull([{ h: "m", l: "L3", s: "s1", r: 1, a: 4 }]);
      s.retry(["L3"]);
      return s.drained();
    };
    expect(run((s) => s.kill(), { kills: 1 }).failures).toEqual([]);
    expect(run((s) => s.kill(), { kills: 1 }).figures).toMatchObject({
      delivered_after_ack: 0,
      delivered_after_ack_across_cut_move: 1,
    });
    expect(run((s) => s.abort("s1"), { aborts: 1 }).failures).toEqual([]);
    expect(run(() => {}).failures).toEqual(["1 deliveries after a confirmed ack"]);
  });

  it("excuses it as well when the shard reset that cut the dead-lettering is seen fired only after the dead-letter copy's ack", () => {
    // The full run at seed 20261202: the harness saw the abort-ack fire a moment after the
    // dead-letter copy's ack was confirmed, though the reset had cut the move long before.
    const s = new Script();
    s.plan({ redrive: true, aborts: 1 });
    s.send(["m"]);
    s.redrive("ok", 0);
    s.pull([{ h: "m", l: "L1", s: "s1", r: 1, a: 3 }]);
    const armed = s.n++;
    s.ops.push({
      op: armed,
      p: "nemesis",
      type: "invoke",
      f: "abort",
      t: (s.t += 10),
      value: { n: 1, kind: "abort-ack", shard: "s1" },
    });
    s.retry(["L1"]);
    s.pull([{ h: "m", l: "L2", s: "d1", r: 1, a: 1 }], { q: "faults-dlq", p: "dlq-consumer-0" });
    s.ack(["L2"]);
    s.ops.push({ op: armed, p: "nemesis", type: "ok", f: "abort", t: (s.t += 5), value: { fired: true } });
    s.pull([{ h: "m", l: "L3", s: "s1", r: 1, a: 4 }]);
    s.retry(["L3"]);
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures).toMatchObject({ delivered_after_ack: 0, delivered_after_ack_across_cut_move: 1 });
  });

  it("excuses one id from two rows of one stay only when a redrive was cut off after the message left a queue", () => {
    const run = (how: Op["type"]) => {
      const s = new Script();
      s.plan({ redrive: true });
      s.send(["m"]);
      s.redrive("ok", 0);
      s.pull([{ h: "m", l: "L1", s: "s1", r: 1, a: 3 }]);
      s.retry(["L1"]);
      // Dead-lettered (row 5), redriven with the reply cut off: the copy in the queue is dead-lettered again (row 6).
      s.redrive(how);
      s.pull(
        [
          { h: "m", l: "L2", s: "d1", r: 5, a: 1 },
          { h: "m", l: "L3", s: "d1", r: 6, a: 1 },
        ],
        { q: "faults-dlq", p: "dlq-consumer-0" },
      );
      s.ack(["L2", "L3"]);
      return s.drained();
    };
    const cut = run("unknown");
    expect(cut.failures).toEqual([]);
    expect(cut.figures).toMatchObject({ stored_twice_same_id: 0, stored_twice_across_cut_move: 1 });
    expect(run("fail").failures).toEqual(["1 message ids stored twice"]);
  });
});
