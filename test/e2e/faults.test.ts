// The fault-injection harness (test/faults): first its checker on hand-made histories,
// one per anomaly, so it is known to see each; then the short run against `wrangler
// dev`: 3,000 messages through HTTP producers and pull consumers while the service is
// SIGKILLed three times and restarted on the same state, single storage shards are
// reset four times through the test hooks (after an append is durable and before its
// reply, and at an ack) and five stored bodies are corrupted, the queues drained, and
// the history checked. The seed is random unless SHARDQ_FAULTS_SEED is set; a failure
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
  pull(msgs: Array<{ h: string; l: string; id?: string; s?: string; r?: number; g?: 1 }>, { vt = 5000, dt = 10, q = "faults", p = "consumer-0" } = {}) {
    this.op(p, "pull", { q, n: 10, vt }, "ok", { msgs: msgs.map((m) => ({ h: m.h, id: m.id ?? `id-${m.h}`, a: 1, l: m.l, ...(m.s ? { s: m.s, r: m.r ?? 1 } : {}), ...(m.g ? { g: 1 } : {}) })) }, dt);
  }
  /** The nemesis corrupting stored bodies: the message ids it corrupted. */
  corrupt(ids: string[], dt = 10) {
    this.op("nemesis", "corrupt", { shard: "shard-0", want: ids.length }, "ok", { ids, seqs: ids.map((_, i) => i + 1) }, dt);
  }
  ack(leases: string[], confirmed = leases, dt = 10) {
    this.op("consumer-0", "ack", { q: "faults", acks: leases, retries: [] }, "ok", { acked: confirmed, retried: [], stale: leases.filter((l) => !confirmed.includes(l)) }, dt);
  }
  /** A storage shard reset through the test hooks: armed at invoke, seen at completion. */
  abort(shard: string, kind = "abort-ack", fired = true, dt = 10) {
    this.op("nemesis", "abort", { n: 1, kind, shard }, fired ? "ok" : "fail", fired ? { fired: true } : { fired: false, error: "not reset" }, dt);
  }
  kill(dt = 10) {
    this.op("nemesis", "kill", { n: 1 }, "ok", undefined, dt);
    this.op("nemesis", "start", { n: 1 }, "ok", { ready_ms: 100 }, 5);
  }
  drained(extra: Record<string, unknown> = {}) {
    this.ops.push({ op: this.n++, p: "harness", type: "ok", f: "phase", t: this.at(10), value: { phase: "drained", drained: true, backlog: { faults: 0 }, ...extra } });
    return check(this.ops);
  }
  plan(value: Record<string, unknown>) {
    this.ops.push({ op: this.n++, p: "harness", type: "ok", f: "phase", t: this.at(0), value: { phase: "load", kills: 0, aborts: 0, ...value } });
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

  it("counts two leases held at once across a reset of the shard holding them apart, but not across a reset of another shard", () => {
    const s = new Script();
    s.send(["a", "b"]);
    s.pull([{ h: "a", l: "L1", s: "shard-0", r: 1 }, { h: "b", l: "L2", s: "shard-1", r: 1 }], { vt: 5000 });
    s.abort("shard-0");
    s.pull([{ h: "a", l: "L3", s: "shard-0", r: 1 }, { h: "b", l: "L4", s: "shard-1", r: 1 }], { dt: 500, p: "consumer-1" });
    s.ack(["L3", "L4"]);
    const r = s.drained();
    expect(r.figures.leases_ended_by_abort).toBe(1);
    expect(r.figures.duplicated.redelivery_causes).toMatchObject({ abort: 1 });
    expect(r.figures.lease_overlaps).toBe(1);
    expect(r.examples.lease_overlaps[0]).toMatchObject({ h: "b" });
    expect(r.figures.aborts).toMatchObject({ count: 1, fired: 1 });
    expect(r.valid).toBe(false);
  });

  it("reports one message id delivered from two rows as stored twice (an append retried after a lost reply, not skipped)", () => {
    const s = new Script();
    s.send(["a", "b"], "unknown");
    s.pull([{ h: "a", l: "L1", s: "shard-0", r: 7 }, { h: "b", l: "L2", s: "shard-0", r: 8 }]);
    s.ack(["L1", "L2"]);
    s.pull([{ h: "a", l: "L3", s: "shard-0", r: 9 }], { dt: 100 });
    s.ack(["L3"]);
    const r = s.drained();
    expect(r.figures.stored_twice_same_id).toBe(1);
    expect(r.examples.stored_twice_same_id[0]).toMatchObject({ id: "id-a", rows: ["shard-0#7", "shard-0#9"] });
    expect(r.failures.join()).toMatch(/stored twice/);
    // The same message again from its one row (a redelivery) is no such thing.
    const t = new Script();
    t.send(["a"]);
    t.pull([{ h: "a", l: "L1", s: "shard-0", r: 7 }], { vt: 1000 });
    t.pull([{ h: "a", l: "L2", s: "shard-0", r: 7 }], { dt: 2000 });
    t.ack(["L2"]);
    expect(t.drained().figures.stored_twice_same_id).toBe(0);
  });

  it("reports a batch sent again with its Idempotency-Key and stored under two ids, and takes the second try's ok as the acknowledgement", () => {
    const s = new Script();
    const keyed = (type: Op["type"], ids?: string[], n = 1) => {
      const op = s.n++;
      s.ops.push({ op, p: "producer-0", type: "invoke", f: "send", t: (s.t += 10), value: { q: "faults", hs: ["a", "b"], key: "k1", try: n } });
      s.ops.push({ op, p: "producer-0", type, f: "send", t: (s.t += 5), value: ids ? { ids } : { status: 503, error: "x" } });
    };
    keyed("unknown");
    keyed("ok", ["id-a", "id-b"], 2);
    s.pull([{ h: "a", l: "L1", id: "id-a" }, { h: "b", l: "L2", id: "id-b" }, { h: "b", l: "L3", id: "id-b2" }]);
    s.ack(["L1", "L2", "L3"]);
    const r = s.drained();
    expect(r.figures.sent).toMatchObject({ attempted: 2, ok: 2, unknown: 0 });
    expect(r.figures.idempotent_retries).toEqual({ messages: 2, delivered: 2, stored_under_two_ids: 1 });
    expect(r.examples.idempotent_stored_twice[0]).toMatchObject({ h: "b", key: "k1" });
    expect(r.failures.join()).toMatch(/Idempotency-Key stored under two ids/);
  });

  it("treats corrupted messages never delivered again as quarantined, not lost, when the shards report them all", () => {
    const s = new Script();
    s.plan({ corruptions: 1 });
    s.send(["a", "b", "c"]);
    s.corrupt(["id-a", "id-b"]);
    s.pull([{ h: "c", l: "L1" }]);
    s.ack(["L1"]);
    const r = s.drained({ quarantined: 2 });
    expect(r.failures).toEqual([]);
    expect(r.figures.lost).toBe(0);
    expect(r.figures.quarantine).toMatchObject({ corrupted: 2, expected: 2, reported: 2, never_delivered: 2, delivered_after_corruption: 0 });
  });

  it("reports a corrupted message delivered after its corruption, a garbled body, and a quarantined total that does not match", () => {
    const s = new Script();
    s.plan({ corruptions: 1 });
    s.send(["a", "b", "c"]);
    s.corrupt(["id-a", "id-b"]);
    s.pull([{ h: "a", l: "L1" }, { h: "c", l: "L2", g: 1 }]);
    s.ack(["L1", "L2"]);
    const r = s.drained({ quarantined: 1 });
    expect(r.figures.quarantine).toMatchObject({ delivered_after_corruption: 1, garbled_deliveries: 1, reported: 1, expected: 2 });
    expect(r.examples.corrupted_delivered[0]).toMatchObject({ id: "id-a" });
    expect(r.failures).toEqual([
      "1 deliveries with a garbled body",
      "1 deliveries of a corrupted message after its corruption",
      "1 messages reported quarantined, not the 2 corrupted",
    ]);
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

  it("fails a run whose queues did not drain", () => {
    const s = new Script();
    s.send(["a"]);
    s.pull([{ h: "a", l: "L1" }]);
    s.ops.push({ op: 99, p: "harness", type: "ok", f: "phase", t: 1000, value: { phase: "drained", drained: false, backlog: { faults: 1 } } });
    const r = check(s.ops);
    expect(r.failures.join()).toMatch(/did not drain/);
  });
});

describe("hard kills of wrangler dev and storage shard resets under load", () => {
  it("loses no acknowledged message across 3 SIGKILLs and 4 shard resets, quarantines the bodies corrupted at rest, stores nothing twice, delivers nothing unexpected, never after a confirmed ack, with exclusive leases", { timeout: 300_000 }, async () => {
    const d = defaults("short");
    const seed = process.env.SHARDQ_FAULTS_SEED ? Number(process.env.SHARDQ_FAULTS_SEED) : d.seed;
    const o = { ...d, seed, out: defaultOut("short", seed), log: (line: string) => console.log(line) };
    const replay = `replay: ${replayCommand(o)} (history and report in ${o.out})`;
    const { result, meta } = await runFaults(o);
    const f = result.figures;
    expect(f.kills.count, replay).toBe(3);
    expect(f.aborts.by_kind, replay).toEqual({ "abort-append": { count: 2, fired: 2 }, "abort-ack": { count: 2, fired: 2 } });
    expect(f.stored_twice_same_id, replay).toBe(0);
    // Corrupted at rest: quarantined and reported, never delivered, never garbled, not lost.
    expect(f.quarantine.corrupted, replay).toBeGreaterThan(0);
    expect(f.quarantine, replay).toMatchObject({ reported: f.quarantine.expected, delivered_after_corruption: 0, garbled_deliveries: 0 });
    expect(f.idempotent_retries.stored_under_two_ids, replay).toBe(0);
    expect(f.sent.ok, replay).toBeGreaterThan(2000);
    expect(f.lost, replay).toBe(0);
    expect(f.unexpected, replay).toBe(0);
    expect(f.wrong_id, replay).toBe(0);
    expect(f.delivered_after_ack, replay).toBe(0);
    expect(f.lease_overlaps, replay).toBe(0);
    expect(f.drained?.drained, replay).toBe(true);
    expect(f.poison.not_dead_lettered, replay).toBe(0);
    expect(result.failures, replay).toEqual([]);
    expect(meta.total_s).toBeLessThan(120);

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
