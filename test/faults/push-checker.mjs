// The checker's push half (checker.mjs calls it): deliveries through a Worker consumer's
// queue() handler, as the push consumer (test/fixtures/push-consumer/) reported them to the push sink
// (push-sink.mjs): one "push" operation per invocation, invoked when the handler started
// (the messages it was given) and completed just before it ended (what it acked and
// retried, whether it threw, hung or acked late). The sink logs a report before it
// answers and the handler awaits the answer, so a logged span [start, end] lies within
// the invocation's true span: two logged spans that overlap are two invocations that
// truly overlapped, with no tolerance needed. An invocation with no end was cut off by
// a kill (its span ends there).
//
// Each message a handler was given counts as delivered (send-checker.mjs: lost, unexpected,
// wrong id, garbled, duplicates). Beyond those, per push queue:
//
//   push overlap   a delivery of a message starting while an earlier one of it had started
//                  and not ended: two handlers holding one message at once. The consumer shard
//                  renews its lease while the handler runs (hangs and late acks included),
//                  so with the service, the storage shard and the consumer shard up this must
//                  not happen. One with a kill between the two starts, a fired consumer shard
//                  abort whose window meets that span, or a reset of a storage shard of the
//                  queue is counted apart; one without is a violation.
//   after ack      a delivery starting after an earlier delivery of the message ended having
//                  acked it (msg.ack(), ackAll(), a return without retry, an explicit ack
//                  before a throw, an ack from waitUntil), with no kill, consumer shard abort
//                  or storage shard reset of the queue between the two starts. The push
//                  consumer cannot see whether its acks were applied (the consumer shard
//                  applies them after the handler returned, and a fault in between drops
//                  them), so this is the strongest form of "nothing is delivered after a
//                  confirmed ack" that has no false positive: with none of those faults in
//                  between, an ack is applied under a lease still held (renewed until the
//                  handler returned), and nothing else can make the message come again.
//   not again      a message whose last push delivery did not ack it (retried, thrown, cut
//                  off) and that no later delivery (the dead-letter queue's) shows:
//                  at-least-once means a message comes again until a consumer acks it.
//   consumer abort every consumer shard abort tried must fire, and the planned ones run.
//
// The causes of each redelivery, the recovery after each consumer shard abort and the
// other figures come from push-figures.mjs.
import { pushFigures } from "./push-figures.mjs";

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {{ d: string, q: string, h: string | null, id: string, a: number, x: boolean, g: boolean, start: number, end: number | null,
 *   outcome: "acked" | "retried" | null, threw: boolean, hangMs: number, lateMs: number, late: "acked" | "retried" | null, ackAll: boolean, retryAll: boolean, size: number }} PushDelivery
 *   one message given to one queue() invocation (d); outcome, from the end report, null when it never came
 * @typedef {{ n: number, kind: string, index: number | null, q: string, inv: number, ok: number | null, fired: boolean }} ConsumerAbort
 * @typedef {{ kind: "kill" | "abort-consumer" | "storage-reset", at: number, abort?: ConsumerAbort }} Excuse
 */

/** How many examples of each anomaly a result keeps. */
const EXAMPLES = 20;

/**
 * The push deliveries of a history, in the order their handlers started.
 * @param {Op[]} ops
 * @returns {PushDelivery[]}
 */
export function pushDeliveries(ops) {
  /** @type {Map<number, PushDelivery[]>} */
  const open = new Map();
  /** @type {PushDelivery[]} */
  const out = [];
  for (const o of ops) {
    if (o.f !== "push") continue;
    if (o.type === "invoke") {
      const msgs = /** @type {Array<{ h?: string | null, id: string, a: number, x?: 1, g?: 1 }>} */ (
        o.value?.msgs ?? []
      );
      const ds = msgs.map((m) => ({
        d: String(o.value?.d ?? o.op),
        q: String(o.value?.q ?? ""),
        h: m.h ?? null,
        id: String(m.id),
        a: Number(m.a),
        x: m.x === 1,
        g: m.g === 1,
        start: o.t,
        end: /** @type {number | null} */ (null),
        outcome: /** @type {PushDelivery["outcome"]} */ (null),
        threw: false,
        hangMs: 0,
        lateMs: 0,
        late: /** @type {PushDelivery["late"]} */ (null),
        ackAll: false,
        retryAll: false,
        size: msgs.length,
      }));
      open.set(o.op, ds);
      out.push(...ds);
      continue;
    }
    const ds = open.get(o.op);
    open.delete(o.op);
    if (!ds) continue;
    const v = o.value ?? {};
    const acked = new Set(v.acked ?? []);
    const retried = new Set(v.retried ?? []);
    const lateAcked = new Set(v.late_acked ?? []);
    const lateRetried = new Set(v.late_retried ?? []);
    for (const d of ds) {
      d.end = o.t;
      d.outcome = retried.has(d.id) ? "retried" : acked.has(d.id) ? "acked" : null;
      d.threw = v.threw === true;
      d.hangMs = Number(v.hang_ms ?? 0);
      d.lateMs = Number(v.late_ms ?? 0);
      d.late = lateRetried.has(d.id) ? "retried" : lateAcked.has(d.id) ? "acked" : null;
      d.ackAll = v.ack_all === true;
      d.retryAll = v.retry_all === true;
    }
  }
  return out;
}

/**
 * The push checks and figures.
 * @param {Op[]} ops
 * @param {PushDelivery[]} pushed  pushDeliveries(ops)
 * @param {Array<{ id: string, q: string, ok: number }>} pulled  the pull deliveries (a dead-lettered message comes again through its queue's pull consumer)
 * @param {{ leaseMs?: number, purged?: (id: string, last: { start: number, attempts: number, outcome: string | null }) => boolean }} [opts]
 *   purged: whether a purge of the dead-letter queue deleted the message after that last delivery (purge-checker.mjs)
 */
export function checkPush(ops, pushed, pulled, opts = {}) {
  const queues = new Set(pushed.map((d) => d.q));
  /** Each kill's span, from its invoke to its completion (the process is dead by then; null: never completed). */
  /** @type {Array<{ inv: number, ok: number | null }>} */
  const spans = [];
  /** @type {ConsumerAbort[]} */
  const aborts = [];
  /** Storage shard resets aimed at a push queue: its "abort" operations that name the queue. */
  /** @type {Array<{ q: string, inv: number, ok: number | null, fired: boolean }>} */
  const resets = [];
  /** @type {Map<number, Op>} */
  const invokes = new Map();
  let plan = null;
  let skipped = 0;
  /** Messages sent to a push queue: attempted and answered ok. */
  const sent = { attempted: 0, ok: 0 };
  for (const o of ops) {
    if (o.f === "phase" && o.value?.phase === "load") plan = o.value;
    if (o.f === "consumer-abort-skipped") skipped++;
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      if (o.f === "kill") spans.push({ inv: o.t, ok: null });
      else if (o.f === "consumer-abort")
        aborts.push({
          n: o.value?.n ?? aborts.length + 1,
          kind: o.value?.kind ?? "",
          index: o.value?.consumer_shard ?? null,
          q: o.value?.q ?? "",
          inv: o.t,
          ok: null,
          fired: false,
        });
      else if (o.f === "abort" && typeof o.value?.q === "string")
        resets.push({ q: o.value.q, inv: o.t, ok: null, fired: false });
      continue;
    }
    const inv = invokes.get(o.op);
    invokes.delete(o.op);
    if (!inv) continue;
    if (o.f === "kill") {
      const k = spans.find((x) => x.inv === inv.t);
      if (k) k.ok = o.t;
    } else if (o.f === "consumer-abort" || (o.f === "abort" && typeof inv.value?.q === "string")) {
      const a = [...aborts, ...resets].find((x) => x.inv === inv.t);
      if (a) {
        a.ok = o.t;
        a.fired = o.type === "ok" && o.value?.fired === true;
        // Armed, and nothing came to fire it before the queue emptied after the load: skipped.
        if (o.type === "ok" && o.value?.skipped === true && o.f === "consumer-abort") {
          aborts.splice(aborts.indexOf(/** @type {ConsumerAbort} */ (a)), 1);
          skipped++;
        }
      }
    } else if (o.f === "send" && (inv.value?.q === plan?.pushQueue || queues.has(inv.value?.q))) {
      const n = inv.value?.hs?.length ?? 0;
      sent.attempted += n;
      if (o.type === "ok") sent.ok += n;
    }
  }
  /** When each kill began, as the figures count them. */
  const kills = spans.map((k) => k.inv);
  const fired = aborts.filter((a) => a.fired && a.ok !== null);
  const firedResets = resets.filter((a) => a.fired && a.ok !== null);

  /**
   * A fault that may end a lease between two starts of one message: a kill in between, a
   * fired consumer shard abort of the queue whose window meets the span (the latest one),
   * or a reset of a storage shard of the queue.
   * @param {string} q @param {number} from @param {number} to
   * @returns {Excuse | null}
   */
  const excuse = (q, from, to) => {
    // A kill is a span: a handler may start (and report it) while the process is being killed.
    const k = spans.find((x) => x.inv < to && (x.ok ?? Infinity) > from);
    if (k !== undefined) return { kind: "kill", at: k.inv };
    const a = fired.filter((x) => x.q === q && x.inv < to && /** @type {number} */ (x.ok) > from).at(-1);
    if (a) return { kind: "abort-consumer", at: /** @type {number} */ (a.ok), abort: a };
    const r = firedResets.find((x) => x.q === q && x.inv < to && /** @type {number} */ (x.ok) > from);
    if (r) return { kind: "storage-reset", at: /** @type {number} */ (r.ok) };
    return null;
  };
  /** A span with no end was cut off by the first kill that had not finished when it started, or is still open. @param {PushDelivery} d */
  const endOf = (d) => d.end ?? spans.find((x) => (x.ok ?? Infinity) > d.start)?.ok ?? Infinity;

  /** @type {Map<string, PushDelivery[]>} */
  const byMessage = new Map();
  for (const d of pushed) {
    const key = `${d.q}\u0000${d.id}`;
    const list = byMessage.get(key);
    if (list) list.push(d);
    else byMessage.set(key, [d]);
  }
  /** @type {Map<string, number[]>} when each message id came through a pull consumer (its dead-letter queue) */
  const pulledAt = new Map();
  // When the pull answered: one invoked before the handler started may still bring the message moved since.
  for (const d of pulled) pulledAt.set(d.id, [...(pulledAt.get(d.id) ?? []), d.ok]);

  const brief = (/** @type {PushDelivery} */ d) => ({
    invocation: d.d,
    attempts: d.a,
    start: d.start,
    end: d.end,
    outcome: d.outcome,
    threw: d.threw,
    hang_ms: d.hangMs,
    late_ms: d.lateMs,
  });
  /** @type {Array<{ q: string, id: string, h: string | null, first: object, second: object, overlapMs: number }>} */
  const overlaps = [];
  const excused = { kill: 0, "abort-consumer": 0, "storage-reset": 0 };
  /** @type {Array<{ q: string, id: string, h: string | null, acked: object, again: object }>} */
  const afterAck = [];
  /** @type {Array<{ q: string, id: string, h: string | null, last: object }>} */
  const notAgain = [];
  let deadLetteredAgain = 0;
  /** Consecutive deliveries of one message (the next push one, or its dead-letter queue's), for the causes. */
  /** @type {Array<{ a: PushDelivery, b: PushDelivery | null, bStart: number, excuse: Excuse | null }>} */
  const pairs = [];

  for (const ds of byMessage.values()) {
    ds.sort((x, y) => x.start - y.start);
    for (let i = 0; i < ds.length; i++) {
      const a = /** @type {PushDelivery} */ (ds[i]);
      for (let j = i + 1; j < ds.length; j++) {
        const b = /** @type {PushDelivery} */ (ds[j]);
        const end = endOf(a);
        if (b.start >= end) break;
        const why = excuse(a.q, a.start, b.start);
        if (why) excused[why.kind]++;
        else
          overlaps.push({
            q: a.q,
            id: a.id,
            h: a.h,
            first: brief(a),
            second: brief(b),
            overlapMs: Math.round(Math.min(end, endOf(b)) - b.start),
          });
      }
      const b = ds[i + 1];
      if (b) {
        const why = excuse(a.q, a.start, b.start);
        pairs.push({ a, b, bStart: b.start, excuse: why });
        if (a.outcome === "acked" && a.end !== null && b.start > a.end && !why)
          afterAck.push({ q: a.q, id: a.id, h: a.h, acked: brief(a), again: brief(b) });
        continue;
      }
      // The last push delivery: it acked, or the message comes again elsewhere (dead-lettered).
      const later = (pulledAt.get(a.id) ?? []).filter((t) => t > a.start);
      if (later.length) pairs.push({ a, b: null, bStart: Math.min(...later), excuse: null });
      else if (a.outcome === "acked" || opts.purged?.(a.id, { start: a.start, attempts: a.a, outcome: a.outcome }))
        continue;
      // The same stored copy (its attempts as they were: a kill or reset lost the lease that would
      // have counted) delivered before, and that delivery's dead-lettering came out of the
      // dead-letter queue: this one's is the same move, which the dead-letter queue stores once.
      else if (
        ds
          .slice(0, i)
          .some(
            (p) =>
              p.q === a.q &&
              p.a === a.a &&
              p.outcome !== "acked" &&
              (pulledAt.get(a.id) ?? []).some((t) => t > p.start),
          )
      )
        deadLetteredAgain++;
      else notAgain.push({ q: a.q, id: a.id, h: a.h, last: brief(a) });
    }
  }

  /** @type {string[]} */
  const failures = [];
  if (overlaps.length)
    failures.push(`${overlaps.length} push overlaps while up (one message in two queue() handlers at once)`);
  if (afterAck.length)
    failures.push(`${afterAck.length} push deliveries after the consumer acked the message, no fault in between`);
  if (notAgain.length)
    failures.push(`${notAgain.length} push messages not acked at their last delivery and never delivered again`);
  const tried = aborts.length;
  const planned = plan?.consumerAborts ?? null;
  if (fired.length !== tried || (planned !== null && tried + skipped !== planned)) {
    failures.push(
      `${fired.length} of the ${planned ?? tried} planned consumer shard aborts fired${skipped ? ` (${skipped} skipped: the load was over)` : ""}`,
    );
  }

  return {
    failures,
    figures: pushFigures({
      pushed,
      sent,
      pairs,
      aborts,
      kills,
      overlaps,
      excused,
      afterAck,
      notAgain: notAgain.length,
      deadLetteredAgain,
      planned,
      skipped,
      leaseMs: opts.leaseMs ?? plan?.pushLeaseMs ?? null,
    }),
    examples: {
      push_overlaps: overlaps.slice(0, EXAMPLES),
      push_after_ack: afterAck.slice(0, EXAMPLES),
      push_not_again: notAgain.slice(0, EXAMPLES),
    },
  };
}
