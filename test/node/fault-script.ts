// Hand-made fault-run histories for the checker's tests (fault-checker*.test.ts).
import { check } from "../faults/checker.mjs";
import type { Op } from "../faults/history.mjs";

/** A hand-made history: each call advances the clock by `dt` ms. */
export class Script {
  ops: Op[] = [];
  t = 0;
  n = 0;
  private at(dt: number) {
    this.t += dt;
    return this.t;
  }
  private op(p: string, f: string, value: unknown, type: Op["type"], outcome: unknown, dt = 10, answerMs = 5) {
    const op = this.n++;
    this.ops.push({ op, p, type: "invoke", f, t: this.at(dt), value });
    this.ops.push({ op, p, type, f, t: this.at(answerMs), value: outcome });
  }
  send(hs: string[], type: Op["type"] = "ok", dt?: number) {
    this.op(
      "producer-0",
      "send",
      { q: "faults", hs },
      type,
      type === "ok" ? { ids: hs.map((h) => `id-${h}`) } : { error: "x" },
      dt,
    );
  }
  /** k: the ordering key the pull answered with. */
  /** wait: a long poll, answered that long after it was made (0: at once). */
  pull(
    msgs: Array<{ h: string; l: string; id?: string; s?: string; r?: number; g?: 1; a?: number; k?: string }>,
    { vt = 5000, dt = 10, q = "faults", p = "consumer-0", wait = 0 } = {},
  ) {
    const value = { q, n: 10, vt, ...(wait ? { w: wait } : {}) };
    this.op(
      p,
      "pull",
      value,
      "ok",
      {
        msgs: msgs.map((m) => ({
          h: m.h,
          id: m.id ?? `id-${m.h}`,
          a: m.a ?? 1,
          l: m.l,
          ...(m.s ? { s: m.s, r: m.r ?? 1 } : {}),
          ...(m.k ? { k: m.k } : {}),
          ...(m.g ? { g: 1 } : {}),
        })),
      },
      dt,
      wait || 5,
    );
  }
  /** The nemesis corrupting stored bodies: the message ids it corrupted. */
  corrupt(ids: string[], dt = 10) {
    this.op(
      "nemesis",
      "corrupt",
      { shard: "shard-0", want: ids.length },
      "ok",
      { ids, seqs: ids.map((_, i) => i + 1) },
      dt,
    );
  }
  ack(leases: string[], confirmed = leases, dt = 10) {
    this.op(
      "consumer-0",
      "ack",
      { q: "faults", acks: leases, retries: [] },
      "ok",
      { acked: confirmed, retried: [], stale: leases.filter((l) => !confirmed.includes(l)) },
      dt,
    );
  }
  /** A retry of these leases (no ack): the message comes again, or leaves for the dead-letter queue. */
  retry(leases: string[], { q = "faults", type = "ok" as Op["type"] } = {}) {
    this.op(
      "consumer-0",
      "ack",
      { q, acks: [], retries: leases },
      type,
      type === "ok" ? { acked: [], retried: leases, stale: [] } : { error: "x" },
    );
  }
  /** An ack answered ok whose `unsure` leases were warned that their shard did not answer (workload.mjs `unknown`): they may have applied. */
  ackUnsure(leases: string[], unsure: string[], dt = 10) {
    this.op(
      "consumer-0",
      "ack",
      { q: "faults", acks: leases, retries: [] },
      "ok",
      { acked: leases.filter((l) => !unsure.includes(l)), retried: [], stale: [], unknown: unsure },
      dt,
    );
  }
  /** A retry answered ok whose `unsure` leases were warned that their shard did not answer: retried or not, nobody knows. */
  retryUnsure(leases: string[], unsure: string[]) {
    this.op("consumer-0", "ack", { q: "faults", acks: [], retries: leases }, "ok", {
      acked: [],
      retried: leases.filter((l) => !unsure.includes(l)),
      stale: [],
      unknown: unsure,
    });
  }
  /** An ack whose answer never came (a kill): it may have applied. */
  ackUnknown(leases: string[]) {
    this.op("consumer-0", "ack", { q: "faults", acks: leases, retries: [] }, "unknown", { error: "socket hang up" });
  }
  /** The redriver moving the dead-letter queue back. */
  redrive(type: Op["type"] = "ok", moved = 1) {
    this.op(
      "redriver",
      "redrive",
      { q: "faults-dlq", to: "faults", limit: 100 },
      type,
      type === "ok" ? { moved, remaining: 0 } : { error: "HTTP 503" },
    );
  }
  /** The operator purging the dead-letter queue during a redrive (dlq-purger.mjs): the ids it reported deleted. */
  purge(ids: string[], type: Op["type"] = "ok") {
    this.op(
      "purger",
      "purge",
      { q: "faults-dlq", dead_letter_after: 3 },
      type,
      type === "ok" ? { purged: ids.length, completed: true, ids } : { error: "socket hang up" },
    );
  }
  /** A storage shard reset through the test hooks: armed at invoke, seen at completion. */
  abort(shard: string, kind = "abort-ack", fired = true, dt = 10) {
    this.op(
      "nemesis",
      "abort",
      { n: 1, kind, shard },
      fired ? "ok" : "fail",
      fired ? { fired: true } : { fired: false, error: "not reset" },
      dt,
    );
  }
  /** A push consumer's queue() invocation starting with these messages; returns it for pushEnd. */
  pushStart(msgs: Array<{ h: string; a?: number }>, dt = 10) {
    const op = this.n++;
    this.ops.push({
      op,
      p: "push-consumer",
      type: "invoke",
      f: "push",
      t: this.at(dt),
      value: { q: "faults-push", d: `d${op}`, msgs: msgs.map((m) => ({ h: m.h, id: `id-${m.h}`, a: m.a ?? 1 })) },
    });
    return op;
  }
  /** ... and ending, having acked and retried these (harness ids). */
  pushEnd(
    op: number,
    { acked = [], retried = [], threw = false }: { acked?: string[]; retried?: string[]; threw?: boolean } = {},
    dt = 10,
  ) {
    const ids = (hs: string[]) => hs.map((h) => `id-${h}`);
    this.ops.push({
      op,
      p: "push-consumer",
      type: "ok",
      f: "push",
      t: this.at(dt),
      value: { acked: ids(acked), retried: ids(retried), threw },
    });
  }
  /** A consumer shard reset through the test hooks: armed at invoke, seen at completion. */
  /** An abort that fired, or did not, or was skipped at its timeout (the load over, the queue empty). */
  consumerAbort(kind = "abort-dispatched", fired: boolean | "skipped" = true, dt = 10) {
    this.op(
      "nemesis",
      "consumer-abort",
      { n: 1, kind, q: "faults-push", consumer_shard: 0 },
      fired ? "ok" : "fail",
      fired === "skipped"
        ? { fired: false, skipped: true, why: "the queue emptied" }
        : fired
          ? { fired: true }
          : { fired: false, error: "not reset" },
      dt,
    );
  }
  /** A control-plane fault (control-faults.mjs): what it aimed at, and how it played out. */
  controlFault(value: Record<string, unknown>, result: Record<string, unknown>, dt = 10) {
    this.op("nemesis", "control", value, result.fired || result.skipped ? "ok" : "fail", result, dt);
  }
  kill(dt = 10) {
    this.op("nemesis", "kill", { n: 1 }, "ok", undefined, dt);
    this.op("nemesis", "start", { n: 1 }, "ok", { ready_ms: 100 }, 5);
  }
  drained(extra: Record<string, unknown> = {}) {
    this.ops.push({
      op: this.n++,
      p: "harness",
      type: "ok",
      f: "phase",
      t: this.at(10),
      value: { phase: "drained", drained: true, backlog: { faults: 0 }, ...extra },
    });
    return check(this.ops);
  }
  plan(value: Record<string, unknown>) {
    this.ops.push({
      op: this.n++,
      p: "harness",
      type: "ok",
      f: "phase",
      t: this.at(0),
      value: { phase: "load", kills: 0, aborts: 0, ...value },
    });
  }
}
