// The fault-injection harness (test/faults): first its checker on hand-made histories,
// one per anomaly, so it is known to see each; then the short run against `wrangler
// dev`: 3,000 messages through HTTP producers and pull consumers while the service is
// SIGKILLed three times and restarted on the same state, the queues drained, and the
// history checked. The seed is random unless SHARDQ_FAULTS_SEED is set; a failure
// prints the command that replays it. `npm run test:faults` runs the full version.
import { describe, expect, it } from "vitest";
import { check } from "../faults/checker.mjs";
import { defaultOut, defaults, replayCommand, runFaults } from "../faults/harness.mjs";
import type { Op } from "../faults/history.mjs";
import { readHistory } from "../faults/history.mjs";

/** A hand-made history: each call advances the clock by `dt` ms. */
class Script {
  ops: Op[] = [];
  t = 0;
  n = 0;
  private at(dt: number) {
    this.t += dt;
    return this.t;
  }
  private op(p: string, f: string, value: unknown, type: Op["type"], outcome: unknown, dt = 10) {
    const op = this.n++;
    this.ops.push({ op, p, type: "invoke", f, t: this.at(dt), value });
    this.ops.push({ op, p, type, f, t: this.at(5), value: outcome });
  }
  send(hs: string[], type: Op["type"] = "ok", dt?: number) {
    this.op("producer-0", "send", { q: "faults", hs }, type, type === "ok" ? { ids: hs.map((h) => `id-${h}`) } : { error: "x" }, dt);
  }
  pull(msgs: Array<{ h: string; l: string; id?: string }>, { vt = 5000, dt = 10, q = "faults", p = "consumer-0" } = {}) {
    this.op(p, "pull", { q, n: 10, vt }, "ok", { msgs: msgs.map((m) => ({ h: m.h, id: m.id ?? `id-${m.h}`, a: 1, l: m.l })) }, dt);
  }
  ack(leases: string[], confirmed = leases, dt = 10) {
    this.op("consumer-0", "ack", { q: "faults", acks: leases, retries: [] }, "ok", { acked: confirmed, retried: [], stale: leases.filter((l) => !confirmed.includes(l)) }, dt);
  }
  kill(dt = 10) {
    this.op("nemesis", "kill", { n: 1 }, "ok", undefined, dt);
    this.op("nemesis", "start", { n: 1 }, "ok", { ready_ms: 100 }, 5);
  }
  drained() {
    this.ops.push({ op: this.n++, p: "harness", type: "ok", f: "phase", t: this.at(10), value: { phase: "drained", drained: true, backlog: { faults: 0 } } });
    return check(this.ops);
  }
}

describe("the fault checker", () => {
  it("passes a history where every acknowledged message was delivered and acked once", () => {
    const s = new Script();
    s.send(["a", "b"]);
    s.pull([{ h: "a", l: "L1" }, { h: "b", l: "L2" }]);
    s.ack(["L1", "L2"]);
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures).toMatchObject({ lost: 0, unexpected: 0, duplicated: { messages: 0 }, lease_overlaps: 0, delivered_after_ack: 0 });
  });

  it("reports an acknowledged message never delivered as lost, and an unknown send never delivered as nothing", () => {
    const s = new Script();
    s.send(["a"]);
    s.send(["b"], "unknown");
    const r = s.drained();
    expect(r.valid).toBe(false);
    expect(r.figures.lost).toBe(1);
    expect(r.examples.lost).toEqual(["a"]);
    expect(r.figures.unknown_never_delivered).toBe(1);
  });

  it("reports deliveries of messages never sent, or whose send certainly failed, as unexpected; an unknown send delivered as recovered", () => {
    const s = new Script();
    s.send(["f"], "fail");
    s.send(["u"], "unknown");
    s.pull([{ h: "ghost", l: "L1" }, { h: "f", l: "L2" }, { h: "u", l: "L3" }]);
    s.ack(["L1", "L2", "L3"]);
    const r = s.drained();
    expect(r.figures.unexpected).toBe(2);
    expect(r.figures.recovered).toBe(1);
    expect(r.valid).toBe(false);
  });

  it("counts a redelivery after the lease expired as a duplicate, not a violation", () => {
    const s = new Script();
    s.send(["a"]);
    s.pull([{ h: "a", l: "L1" }], { vt: 1000 });
    s.pull([{ h: "a", l: "L2" }], { dt: 2000, p: "consumer-1" });
    s.ack(["L2"]);
    const r = s.drained();
    expect(r.failures).toEqual([]);
    expect(r.figures.duplicated).toMatchObject({ messages: 1, extra_deliveries: 1, redelivery_causes: { lease_expired: 1 } });
  });

  it("reports two leases of one message held at once as an overlap, unless a kill came between them", () => {
    const s = new Script();
    s.send(["a", "b"]);
    s.pull([{ h: "a", l: "L1" }], { vt: 5000 });
    s.pull([{ h: "a", l: "L2" }], { dt: 1000, p: "consumer-1" });
    s.pull([{ h: "b", l: "L3" }], { vt: 5000 });
    s.kill();
    s.pull([{ h: "b", l: "L4" }], { dt: 1000, p: "consumer-1" });
    s.ack(["L2", "L4"]);
    const r = s.drained();
    expect(r.figures.lease_overlaps).toBe(1);
    expect(r.examples.lease_overlaps[0]).toMatchObject({ h: "a" });
    expect(r.figures.leases_ended_by_kill).toBe(1);
    expect(r.valid).toBe(false);
  });

  it("reports a delivery after a confirmed ack, and not one after an ack the service refused", () => {
    const s = new Script();
    s.send(["a", "b"]);
    s.pull([{ h: "a", l: "L1" }, { h: "b", l: "L2" }], { vt: 1000 });
    s.ack(["L1", "L2"], ["L1"]);
    s.pull([{ h: "a", l: "L3" }, { h: "b", l: "L4" }], { dt: 2000 });
    const r = s.drained();
    expect(r.figures.delivered_after_ack).toBe(1);
    expect(r.examples.delivered_after_ack[0]).toMatchObject({ h: "a" });
    expect(r.valid).toBe(false);
  });

  it("fails a run whose queues did not drain", () => {
    const s = new Script();
    s.send(["a"]);
    s.pull([{ h: "a", l: "L1" }]);
    s.ops.push({ op: 99, p: "harness", type: "ok", f: "phase", t: 1000, value: { phase: "drained", drained: false, backlog: { faults: 1 } } });
    const r = check(s.ops);
    expect(r.failures.join()).toMatch(/did not drain/);
  });
});

describe("hard kills of wrangler dev under load", () => {
  it("loses no acknowledged message across 3 SIGKILLs, delivers nothing unexpected, never after a confirmed ack, with exclusive leases", { timeout: 300_000 }, async () => {
    const d = defaults("short");
    const seed = process.env.SHARDQ_FAULTS_SEED ? Number(process.env.SHARDQ_FAULTS_SEED) : d.seed;
    const o = { ...d, seed, out: defaultOut("short", seed), log: (line: string) => console.log(line) };
    const replay = `replay: ${replayCommand(o)} (history and report in ${o.out})`;
    const { result, meta } = await runFaults(o);
    const f = result.figures;
    expect(f.kills.count, replay).toBe(3);
    expect(f.sent.ok, replay).toBeGreaterThan(2000);
    expect(f.lost, replay).toBe(0);
    expect(f.unexpected, replay).toBe(0);
    expect(f.wrong_id, replay).toBe(0);
    expect(f.delivered_after_ack, replay).toBe(0);
    expect(f.lease_overlaps, replay).toBe(0);
    expect(f.drained?.drained, replay).toBe(true);
    expect(f.poison.not_dead_lettered, replay).toBe(0);
    expect(result.failures, replay).toEqual([]);
    expect(meta.total_s).toBeLessThan(240);

    // The checker sees a loss in this very history: drop one delivery of a message
    // delivered once, and it is reported lost.
    const ops = await readHistory(`${o.out}/history.jsonl`);
    const sentOk = new Set<string>();
    const sends = new Map<number, string[]>();
    const counts = new Map<string, number>();
    for (const op of ops) {
      if (op.f === "send" && op.type === "invoke") sends.set(op.op, op.value.hs);
      if (op.f === "send" && op.type === "ok") for (const h of sends.get(op.op) ?? []) sentOk.add(h);
      if (op.f === "pull" && op.type === "ok") for (const m of op.value.msgs) counts.set(m.h, (counts.get(m.h) ?? 0) + 1);
    }
    const once = (m: { h: string; x?: 1 }) => sentOk.has(m.h) && counts.get(m.h) === 1 && !m.x;
    const victim = ops.find((op) => op.f === "pull" && op.type === "ok" && op.value.msgs.some(once));
    expect(victim).toBeDefined();
    const h: string = victim!.value.msgs.find(once).h;
    victim!.value.msgs = victim!.value.msgs.filter((m: { h: string }) => m.h !== h);
    const broken = check(ops);
    expect(broken.valid).toBe(false);
    expect(broken.examples.lost).toEqual([h]);
  });
});
