// The fault checker's rules for the long-polling workload (test/faults/pause-delay.mjs) on
// hand-made histories: nothing leased to a pull inside a confirmed pause of delivery, a delayed
// message not delivered before its delay, a retried one not before its retry delay.
import { describe, expect, it } from "vitest";
import { PAUSE_SLACK_MS } from "../faults/pause-delay.mjs";
import { Script } from "./fault-script.ts";

type Type = "ok" | "fail" | "unknown";
const op = (s: Script, p: string, f: string, value: unknown, type: Type, outcome: unknown, dt = 10, answerMs = 5) =>
  s["op"](p, f, value, type, outcome, dt, answerMs);
const pause = (s: Script, type: Type = "ok", dt = 10) => op(s, "operator", "pause", { q: "faults" }, type, {}, dt);
const resume = (s: Script, dt = 10) => op(s, "operator", "resume", { q: "faults" }, "ok", {}, dt);

describe("the fault checker on pauses and delays under long polls", () => {
  it("fails a run where a pull answered with messages inside a confirmed pause, not one answered just after the pause or after the resume", () => {
    const bad = new Script();
    bad.send(["a", "b"]);
    pause(bad);
    // A long poll answered well inside the pause.
    bad.pull([{ h: "a", l: "L1" }], { dt: PAUSE_SLACK_MS + 500, wait: 100 });
    resume(bad, 500);
    bad.pull([{ h: "b", l: "L2" }]);
    bad.ack(["L1", "L2"]);
    const r = bad.drained();
    expect(r.failures).toEqual(["1 messages leased to pulls inside a confirmed pause of delivery"]);
    expect(r.figures.pause_delay).toMatchObject({ pauses: 1, leased_while_paused: 1 });

    const good = new Script();
    good.send(["a", "b"]);
    pause(good);
    good.pull([{ h: "a", l: "L1" }], { dt: 10 }); // within the slack: woken before the pause took effect
    resume(good, PAUSE_SLACK_MS + 500);
    pause(good, "unknown"); // not confirmed: no window
    good.pull([{ h: "b", l: "L2" }], { dt: PAUSE_SLACK_MS + 500 });
    resume(good);
    good.ack(["L1", "L2"]);
    expect(good.drained().failures).toEqual([]);
  });

  it("fails a run where a delayed message came before its delay, or a retried one before its retry delay", () => {
    const s = new Script();
    op(s, "producer-0", "send", { q: "faults", hs: ["d"], d: 3 }, "ok", { ids: ["id-d"] });
    s.pull([{ h: "d", l: "L1" }], { dt: 1000 });
    s.send(["r"]);
    s.pull([{ h: "r", l: "L2" }]);
    op(s, "consumer-0", "ack", { q: "faults", acks: [], retries: ["L2"], rd: 2 }, "ok", {
      acked: [],
      retried: ["L2"],
      stale: [],
    });
    s.pull([{ h: "r", l: "L3", a: 2 }], { dt: 500 });
    s.ack(["L1", "L3"]);
    const r = s.drained();
    expect(r.failures).toEqual([
      "1 delayed messages delivered before their delay",
      "1 retried messages delivered before their retry delay",
    ]);
    expect(r.figures.pause_delay).toMatchObject({
      delayed: 1,
      early_delayed: 1,
      retried_with_delay: 1,
      early_retried: 1,
    });

    const ok = new Script();
    op(ok, "producer-0", "send", { q: "faults", hs: ["d"], d: 3 }, "ok", { ids: ["id-d"] });
    ok.pull([{ h: "d", l: "L1" }], { dt: 3000 });
    ok.send(["r"]);
    ok.pull([{ h: "r", l: "L2" }]);
    op(ok, "consumer-0", "ack", { q: "faults", acks: [], retries: ["L2"], rd: 2 }, "ok", {
      acked: [],
      retried: ["L2"],
      stale: [],
    });
    ok.pull([{ h: "r", l: "L3", a: 2 }], { dt: 2000 });
    // Out of retries, a retried message leaves for the dead-letter queue at once: another copy, not delayed.
    ok.send(["x"]);
    ok.pull([{ h: "x", l: "L4", s: "shard-1", r: 1 }]);
    op(ok, "consumer-0", "ack", { q: "faults", acks: [], retries: ["L4"], rd: 2 }, "ok", {
      acked: [],
      retried: ["L4"],
      stale: [],
    });
    ok.pull([{ h: "x", l: "L5", s: "dlq-shard-0", r: 7 }], { q: "faults-dlq", p: "dlq-consumer-0" });
    ok.ack(["L1", "L3", "L5"]);
    expect(ok.drained().failures).toEqual([]);
  });

  it("dates a delayed send tried again from the attempt that may have stored it: the first, whose answer was lost", () => {
    const s = new Script();
    // The first attempt stored the messages and lost its answer (a reset); the second, 600 ms on, found them stored.
    op(s, "producer-0", "send", { q: "faults", hs: ["d"], d: 3, key: "k", try: 1 }, "unknown", { status: 503 });
    op(s, "producer-0", "send", { q: "faults", hs: ["d"], d: 3, key: "k", try: 2 }, "ok", { ids: ["id-d"] }, 600);
    // Due 3 s after the first attempt: pulled after that, before 3 s after the second.
    s.pull([{ h: "d", l: "L1" }], { dt: 2600 });
    s.ack(["L1"]);
    expect(s.drained().failures).toEqual([]);

    const early = new Script();
    op(early, "producer-0", "send", { q: "faults", hs: ["d"], d: 3, key: "k", try: 1 }, "unknown", { status: 503 });
    op(early, "producer-0", "send", { q: "faults", hs: ["d"], d: 3, key: "k", try: 2 }, "ok", { ids: ["id-d"] }, 600);
    early.pull([{ h: "d", l: "L1" }], { dt: 1000 });
    early.ack(["L1"]);
    expect(early.drained().failures).toEqual(["1 delayed messages delivered before their delay"]);
  });
});
