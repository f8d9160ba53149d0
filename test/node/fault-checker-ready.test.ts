// The fault checker's readiness rules on hand-made histories: no message ready longer than 10 s
// while a consumer asked for messages (test/faults/ready-checker.mjs), each excuse taken out
// precisely, and the quiet phases' delayed messages delivered within their phase
// (test/faults/quiet-phases.mjs).
import { describe, expect, it } from "vitest";
import { EXCUSE_GRACE_MS, READY_LIMIT_MS } from "../faults/ready-checker.mjs";
import { Script } from "./fault-script.ts";

type Type = "ok" | "fail" | "unknown";
const op = (s: Script, p: string, f: string, value: unknown, type: Type, outcome: unknown, dt = 10, answerMs = 5) =>
  s["op"](p, f, value, type, outcome, dt, answerMs);
/** Long polls of one second answered empty, one after another, for `ms`: a consumer asking with room. */
const asking = (s: Script, ms: number, q = "faults") => {
  for (let t = 0; t < ms; t += 1000)
    op(s, "consumer-1", "pull", { q, n: 10, vt: 5000, w: 1000 }, "ok", { msgs: [] }, 0, 1000);
};
const TOO_LONG = `1 times a message stayed ready longer than ${READY_LIMIT_MS / 1000} s while a consumer asked for messages`;

describe("the fault checker's ready-too-long rule", () => {
  it("fails a run where a sent message stayed ready over 10 s while pulls with room kept answering, with the message and its wait as the example", () => {
    const s = new Script();
    s.send(["a"]);
    asking(s, READY_LIMIT_MS + 2000);
    s.pull([{ h: "a", l: "L1" }]);
    s.ack(["L1"]);
    const r = s.drained();
    expect(r.failures).toEqual([TOO_LONG]);
    expect(r.figures.ready).toMatchObject({ windows: 1, too_long: 1 });
    expect(r.examples.ready_too_long[0]).toMatchObject({ h: "a", q: "faults", why: "sent" });
    expect(r.examples.ready_too_long[0]?.asking_ms).toBeGreaterThan(READY_LIMIT_MS);

    // Under the limit it passes.
    const ok = new Script();
    ok.send(["a"]);
    asking(ok, READY_LIMIT_MS - 2000);
    ok.pull([{ h: "a", l: "L1" }]);
    ok.ack(["L1"]);
    expect(ok.drained().failures).toEqual([]);
  });

  it("counts only pulls that answered with room: while every pull came back full, nobody asked for more", () => {
    const s = new Script();
    const others = Array.from({ length: 14 }, (_, i) => `b${i}`);
    s.send(["a", ...others]);
    for (const b of others) {
      // In flight for a second each (a slow answer), and full.
      op(
        s,
        "consumer-1",
        "pull",
        { q: "faults", n: 1, vt: 5000 },
        "ok",
        { msgs: [{ h: b, id: `id-${b}`, a: 1, l: `L-${b}` }] },
        0,
        990,
      );
      s.ack([`L-${b}`]);
    }
    s.pull([{ h: "a", l: "L1" }]);
    s.ack(["L1"]);
    expect(s.drained().failures).toEqual([]);
  });

  it("takes out a kill up to its restart and a grace after, a pause of the queue, and a storage shard reset of the message's shard only", () => {
    const killed = new Script();
    killed.send(["a"]);
    op(killed, "nemesis", "kill", { n: 1 }, "ok", undefined, 10, 5);
    op(killed, "nemesis", "start", { n: 1 }, "ok", { ready_ms: 6000 }, 0, 6000);
    asking(killed, READY_LIMIT_MS + 2000);
    killed.pull([{ h: "a", l: "L1" }]);
    killed.ack(["L1"]);
    expect(killed.drained().failures).toEqual([]);
    expect(killed.drained().figures.ready.excused_ms.down).toBeGreaterThanOrEqual(EXCUSE_GRACE_MS - 100);

    const paused = new Script();
    paused.send(["a"]);
    op(paused, "operator", "pause", { q: "faults" }, "ok", {});
    asking(paused, READY_LIMIT_MS + 2000);
    op(paused, "operator", "resume", { q: "faults" }, "ok", {});
    paused.pull([{ h: "a", l: "L1" }]);
    paused.ack(["L1"]);
    expect(paused.drained().failures).toEqual([]);

    // A reset of another shard excuses nothing.
    const other = new Script();
    other.send(["a"]);
    op(other, "nemesis", "abort", { n: 1, kind: "abort-ack", shard: "shard-1" }, "ok", { fired: true }, 10, 4000);
    asking(other, READY_LIMIT_MS + 2000);
    other.pull([{ h: "a", l: "L1", s: "shard-0" }]);
    other.ack(["L1"]);
    expect(other.drained({}).failures).toContain(TOO_LONG);

    const same = new Script();
    same.send(["a"]);
    op(same, "nemesis", "abort", { n: 1, kind: "abort-ack", shard: "shard-0" }, "ok", { fired: true }, 10, 4000);
    asking(same, READY_LIMIT_MS + 2000);
    same.pull([{ h: "a", l: "L1", s: "shard-0" }]);
    same.ack(["L1"]);
    expect(same.drained().failures).toEqual([]);
  });

  it("waits a keyed message behind its key's previous message until that one was settled, not longer", () => {
    const keyed = (s: Script) =>
      op(
        s,
        "producer-0",
        "send",
        {
          q: "faults",
          hs: ["a1", "a2"],
          ord: [
            ["a1", "p0-k1", 1],
            ["a2", "p0-k1", 2],
          ],
        },
        "ok",
        { ids: ["id-a1", "id-a2"] },
      );
    const behind = new Script();
    keyed(behind);
    behind.pull([{ h: "a1", l: "L1", k: "p0-k1" }], { vt: 30_000 });
    asking(behind, READY_LIMIT_MS + 5000);
    behind.ack(["L1"]);
    behind.pull([{ h: "a2", l: "L2", k: "p0-k1" }]);
    behind.ack(["L2"]);
    expect(behind.drained().failures).toEqual([]);
    expect(behind.drained().figures.ready.excused_ms.ordered).toBeGreaterThan(READY_LIMIT_MS);

    // Released, it may wait no longer than any other message.
    const released = new Script();
    keyed(released);
    released.pull([{ h: "a1", l: "L1", k: "p0-k1" }], { vt: 30_000 });
    released.ack(["L1"]);
    asking(released, READY_LIMIT_MS + EXCUSE_GRACE_MS + 2000);
    released.pull([{ h: "a2", l: "L2", k: "p0-k1" }]);
    released.ack(["L2"]);
    expect(released.drained().failures).toEqual([TOO_LONG]);
  });

  it("sees a message ready again at its lease's end when it was dropped, and at its retry delay's end when retried", () => {
    const dropped = new Script();
    dropped.send(["a"]);
    dropped.pull([{ h: "a", l: "L1" }], { vt: 2000 });
    asking(dropped, READY_LIMIT_MS + 4000);
    dropped.pull([{ h: "a", l: "L2", a: 2 }]);
    dropped.ack(["L2"]);
    const r = dropped.drained();
    expect(r.failures).toEqual([TOO_LONG]);
    expect(r.examples.ready_too_long[0]).toMatchObject({ h: "a", why: "lease end" });

    // Retried with a 5 s delay: ready 5 s after the retry's answer, so 12 s of asking is 7 s of ready.
    const retried = new Script();
    retried.send(["a"]);
    retried.pull([{ h: "a", l: "L1" }]);
    op(retried, "consumer-0", "ack", { q: "faults", acks: [], retries: ["L1"], rd: 5 }, "ok", {
      acked: [],
      retried: ["L1"],
      stale: [],
    });
    asking(retried, READY_LIMIT_MS + 2000);
    retried.pull([{ h: "a", l: "L2", a: 2 }]);
    retried.ack(["L2"]);
    expect(retried.drained().failures).toEqual([]);
  });

  it("counts a push queue's message as asked for while no queue() invocation of it runs, not while one hangs", () => {
    const push = (s: Script, h: string) =>
      op(s, "producer-0", "send", { q: "faults-push", hs: [h] }, "ok", { ids: [`id-${h}`] });
    const idle = new Script();
    push(idle, "a");
    idle.t += READY_LIMIT_MS + 2000;
    idle.pushEnd(idle.pushStart([{ h: "a" }]), { acked: ["a"] });
    const r = idle.drained();
    expect(r.failures).toEqual([TOO_LONG]);
    expect(r.examples.ready_too_long[0]).toMatchObject({ h: "a", q: "faults-push" });

    const busy = new Script();
    push(busy, "b");
    const hung = busy.pushStart([{ h: "b" }]);
    push(busy, "a");
    busy.t += READY_LIMIT_MS + 2000;
    busy.pushEnd(hung, { acked: ["b"] });
    busy.pushEnd(busy.pushStart([{ h: "a" }]), { acked: ["a"] });
    expect(busy.drained().failures).toEqual([]);
  });
});

describe("the fault checker's quiet phases", () => {
  const quietRun = ({ deliverAt, phases = 1 }: { deliverAt: "in" | "after"; phases?: number }) => {
    const s = new Script();
    s.plan({ quiet: { phases, ms: 40_000 } });
    s.ops.push({
      op: s.n++,
      p: "harness",
      type: "ok",
      f: "phase",
      t: (s.t += 10),
      value: { phase: "quiet", n: 1, ms: 40_000 },
    });
    op(s, "quiet", "send", { q: "faults", hs: ["q1"], d: 28, quiet: 1 }, "ok", { ids: ["id-q1"] });
    s.t += 28_000;
    if (deliverAt === "in") s.pull([{ h: "q1", l: "L1" }]);
    s.ops.push({
      op: s.n++,
      p: "harness",
      type: "ok",
      f: "phase",
      t: (s.t += 11_000),
      value: { phase: "quiet-end", n: 1 },
    });
    if (deliverAt === "after") s.pull([{ h: "q1", l: "L1" }]);
    s.ack(["L1"]);
    return s.drained();
  };

  it("passes a phase whose delayed message was delivered within it, and fails one delivered after it ended or a planned phase that never ran", () => {
    const ok = quietRun({ deliverAt: "in" });
    expect(ok.failures).toEqual([]);
    expect(ok.figures.quiet).toMatchObject({
      phases: 1,
      planned: 1,
      delayed: 1,
      delivered_in_phase: 1,
      not_in_phase: 0,
    });

    const late = quietRun({ deliverAt: "after" });
    expect(late.failures).toEqual(["1 messages due during a quiet phase not delivered within it"]);
    expect(late.examples.quiet[0]).toMatchObject({ h: "q1", phase: 1 });

    expect(quietRun({ deliverAt: "in", phases: 2 }).failures).toEqual(["1 of the 2 planned quiet phases ran"]);
  });
});
