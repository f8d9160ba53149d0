// The checker's order half (ordered lanes; checker.mjs calls it). With
// `--ordered` some of the producers' messages carry an ordering_key, and a producer sends
// a key's messages one after another (workload.mjs). Per queue and key:
//
//   accepted order  a comes before b when a's send was answered ok (by any of its tries)
//                   before b's send was first invoked: the service accepted a before b. A
//                   send left unknown comes after the messages of its key answered ok before
//                   it was invoked, and before none: the harness gave up on it, but the
//                   service may still apply it later (a request that timed out runs on), so
//                   its place is not known. Sends in flight together (one batch, a burst,
//                   an overlap) are not ordered, as the contract says.
//   out of order    (a) b's first delivery certainly came before a's: b was granted (a pull
//                   grants between its invoke and its answer; a push delivery before its
//                   handler reported its start) before a's first pull was invoked. A push
//                   delivery's grant has no lower bound in the history, so a pushed a is
//                   judged by (b) alone. Also a batch (a pull's answer, a queue() call)
//                   holding b ahead of a.
//   not released    (b) a delivery of b, in a batch without a, granted before a could have
//                   been released: b came while a was leased or waiting for a retry (or
//                   before a's first delivery, which (a) counts too when certain). Held
//                   means from a's first delivery until its last one in the queue was acked
//                   or it was dead-lettered; no fault excuses it (the key's lease is
//                   persisted). a can be released no earlier than:
//                     - the first ack that may have applied under any of its leases (sent,
//                       not answered as stale), or the end of a push handler that acked it
//                       (acks apply after the handler returns; one cut off may have acked
//                       at its start);
//                     - if it left the queue (dead-lettered, then a later delivery
//                       elsewhere or a redrive's new copy) or its last delivery was not
//                       acked: that delivery's end, as the lease checker takes it: the
//                       first ack or retry sent under it, or its pull's invoke plus the
//                       visibility timeout less `toleranceMs` (pull); the handler's end
//                       (push); or a kill or a storage or consumer shard reset that may
//                       have ended its lease early, whichever came first.
//                   A message delivered again in the same stay was not released between.
//   wrong key       a pull answer giving a message another ordering_key than it was sent
//                   with, or one when it was sent without, in any queue: a copy a
//                   dead-lettering or a redrive moved keeps its key.
//
// Only each message's first stay in the queue it was sent to counts (a redrive stores a
// new copy, accepted anew: a redrive writes a key's messages in their order in the
// dead-letter queue, behind whatever of the key the target holds then, and which redrive
// moved which message the history does not say); a corrupted message (quarantined) orders
// nothing. `keyed_redriven` counts the keyed messages delivered again, from a queue other
// than the dead-letter queue, after their first stay: keyed dead letters that came back.

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {import("./push-checker.mjs").PushDelivery} PushDelivery
 * @typedef {{ h: string, id: string, q: string, batch: string, pos: number, low: number, up: number, a: number, push: boolean, l: string, vt: number, s: string | null, k: string | null, end: number | null, acked: boolean }} OrderDelivery
 *   one delivery: granted between low and up (pull: invoke, answer; push: -Infinity, handler start)
 * @typedef {{ h: string, q: string, key: string | null, seq: number, inv: number, acceptedBy: number, tries: number, fails: number }} OrderSend
 * @typedef {{ h: string, q: string, key: string, seq: number, inv: number, acceptedBy: number, stay: OrderDelivery[], firstLow: number, batches: Set<string>, corrupted: boolean, released: number }} Keyed
 */

/** How many examples of each anomaly a result keeps. */
const EXAMPLES = 20;

/**
 * @param {Op[]} ops
 * @param {PushDelivery[]} pushed  pushDeliveries(ops)
 * @param {{ toleranceMs?: number }} [opts]
 */
export function checkOrder(ops, pushed, opts = {}) {
  const tol = opts.toleranceMs ?? 250;
  const { sends, deliveries, acks, retries, faults, corrupted } = read(ops, pushed);
  /** When a fault that may end a lease granted from `from` on happened, at the earliest. */
  const faultFrom = (/** @type {number} */ from, /** @type {OrderDelivery} */ d) =>
    Math.min(
      ...faults
        .filter(
          (f) =>
            f.ok >= from &&
            (f.kind === "kill" ||
              (f.kind === "abort" && (d.push || d.s === null || f.shard === d.s)) ||
              (f.kind === "consumer" && d.push)),
        )
        .map((f) => Math.max(f.inv, from)),
    );
  /** The earliest a delivery's lease may have ended, as the lease checker's heldUntil (push: the handler's end). */
  const leaseEnd = (/** @type {OrderDelivery} */ d) =>
    d.push ? (d.end ?? d.up) : Math.min(acks.get(d.l) ?? Infinity, retries.get(d.l) ?? Infinity, d.low + d.vt - tol);
  const ackedFrom = (/** @type {OrderDelivery} */ d) =>
    d.push ? (d.acked ? (d.end ?? d.up) : Infinity) : (acks.get(d.l) ?? Infinity);

  const byH = /** @type {Map<string, OrderDelivery[]>} */ (new Map());
  for (const d of deliveries) {
    const ds = byH.get(d.h);
    if (ds) ds.push(d);
    else byH.set(d.h, [d]);
  }
  const wrongKey = /** @type {Array<{ h: string, q: string, sent: string | null, delivered: string | null }>} */ ([]);
  const groups = /** @type {Map<string, Keyed[]>} */ (new Map());
  let keyedSent = 0;
  let keyedRedriven = 0;
  let unknownDelivered = 0;
  for (const s of sends.values()) {
    if (s.tries === s.fails) continue;
    const ds = (byH.get(s.h) ?? []).sort((x, y) => x.up - y.up || x.low - y.low);
    // The first stay: deliveries from the queue it was sent to until it shows up elsewhere or its attempts go down (a redrive's copy).
    const stay = [];
    for (const d of ds) {
      if (d.q !== s.q || d.a < (stay.at(-1)?.a ?? 0)) break;
      stay.push(d);
    }
    for (const d of ds) if (!d.push && d.k !== s.key) wrongKey.push({ h: s.h, q: d.q, sent: s.key, delivered: d.k });
    if (s.key === null) continue;
    keyedSent++;
    if (ds.slice(stay.length).some((d) => !d.q.endsWith("-dlq"))) keyedRedriven++;
    if (stay.length && s.acceptedBy === Infinity) unknownDelivered++;
    const last = stay.at(-1);
    // Released by an ack that may have applied; or, gone elsewhere or never acked at its last delivery, by its end.
    let released = Math.min(...stay.map(ackedFrom));
    if (last && (stay.length < ds.length || ackedFrom(last) === Infinity))
      released = Math.min(released, leaseEnd(last), faultFrom(last.push ? s.inv : last.low, last));
    const m = {
      h: s.h,
      q: s.q,
      key: s.key,
      seq: s.seq,
      inv: s.inv,
      acceptedBy: s.acceptedBy,
      stay,
      firstLow: Math.min(...stay.map((d) => d.low)),
      batches: new Set(ds.map((d) => d.batch)),
      corrupted: ds.some((d) => corrupted.has(d.id)),
      released,
    };
    const g = `${s.q}\u0000${s.key}`;
    const group = groups.get(g);
    if (group) group.push(m);
    else groups.set(g, [m]);
  }

  const outOfOrder = /** @type {object[]} */ ([]);
  const notReleased = /** @type {object[]} */ ([]);
  let pairs = 0;
  const brief = (/** @type {OrderDelivery} */ d) =>
    d.push
      ? { batch: d.batch, attempts: d.a, handler_start: d.up, handler_end: d.end }
      : {
          batch: d.batch,
          attempts: d.a,
          pull_invoked: d.low,
          pull_ok: d.up,
          visibility_ms: d.vt,
          lease_end: leaseEnd(d),
        };
  const who = (/** @type {Keyed} */ m) => ({
    h: m.h,
    seq: m.seq,
    send_invoked: m.inv,
    send_ok: Number.isFinite(m.acceptedBy) ? m.acceptedBy : null,
  });
  /** What a was doing when b's delivery e was granted, as far as the history tells (for the examples). */
  const stateOf = (/** @type {Keyed} */ a, /** @type {OrderDelivery} */ e) => {
    if (e.up < a.firstLow) return "not delivered yet";
    const d = a.stay.filter((x) => x.up <= (e.push ? e.up : e.low)).at(-1);
    if (!d) return "being delivered";
    if (e.up <= leaseEnd(d)) return "leased";
    return (e.push ? e.up : e.low) >= leaseEnd(d) ? "waiting for a retry" : "leased or waiting for a retry";
  };
  for (const group of groups.values()) {
    const preds = group
      .filter((m) => Number.isFinite(m.acceptedBy) && m.stay.length && !m.corrupted)
      .sort((x, y) => x.acceptedBy - y.acceptedBy);
    const succs = group.filter((m) => m.stay.length).sort((x, y) => x.inv - y.inv);
    /** The messages accepted before b's send, latest release first. */
    const byRelease = /** @type {Keyed[]} */ ([]);
    /** Among them, the one whose first delivery began last. */
    let latestFirst = /** @type {Keyed | null} */ (null);
    let i = 0;
    for (const b of succs) {
      while (i < preds.length && /** @type {Keyed} */ (preds[i]).acceptedBy < b.inv) {
        const a = /** @type {Keyed} */ (preds[i++]);
        // Binary search: a key may have thousands of messages.
        let lo = 0;
        let hi = byRelease.length;
        while (lo < hi) {
          const mid = (lo + hi) >> 1;
          if (/** @type {Keyed} */ (byRelease[mid]).released >= a.released) lo = mid + 1;
          else hi = mid;
        }
        byRelease.splice(lo, 0, a);
        if (!latestFirst || a.firstLow > latestFirst.firstLow) latestFirst = a;
      }
      pairs += i;
      const first = /** @type {OrderDelivery} */ (b.stay[0]);
      if (latestFirst && first.up < latestFirst.firstLow) {
        outOfOrder.push({
          q: b.q,
          key: b.key,
          why: "first delivered before an earlier message of its key",
          earlier: { ...who(latestFirst), first: brief(/** @type {OrderDelivery} */ (latestFirst.stay[0])) },
          later: { ...who(b), first: brief(first) },
        });
      }
      for (const e of b.stay) {
        // Sharing a batch with a is allowed (in order: checked below).
        const a = byRelease.find((x) => !x.batches.has(e.batch));
        if (!a || e.up >= a.released) continue;
        notReleased.push({
          q: b.q,
          key: b.key,
          state: stateOf(a, e),
          earlier: {
            ...who(a),
            released_from: Number.isFinite(a.released) ? a.released : null,
            deliveries: a.stay.map(brief),
          },
          later: { ...who(b), delivery: brief(e) },
        });
        break;
      }
    }
  }

  // Within one batch, a key's messages in their accepted order.
  const batches = /** @type {Map<string, Array<{ m: Keyed, pos: number }>>} */ (new Map());
  for (const group of groups.values()) {
    for (const m of group) {
      for (const d of m.stay) {
        const held = batches.get(d.batch);
        if (held) held.push({ m, pos: d.pos });
        else batches.set(d.batch, [{ m, pos: d.pos }]);
      }
    }
  }
  let batchesOutOfOrder = 0;
  for (const [batch, held] of batches) {
    held.sort((x, y) => x.pos - y.pos);
    const bad = held.flatMap(({ m: x }, j) =>
      held
        .slice(j + 1)
        .filter(({ m: y }) => y.key === x.key && y.acceptedBy < x.inv)
        .map(({ m: y }) => ({ x, y })),
    );
    if (!bad.length) continue;
    batchesOutOfOrder++;
    const { x, y } = /** @type {{ x: Keyed, y: Keyed }} */ (bad[0]);
    outOfOrder.push({
      q: x.q,
      key: x.key,
      why: "ahead of an earlier message of its key in one batch",
      batch,
      earlier: who(y),
      later: who(x),
    });
  }

  const failures = /** @type {string[]} */ ([]);
  const firstOut = outOfOrder.length - batchesOutOfOrder;
  if (firstOut)
    failures.push(`${firstOut} messages of an ordering key first delivered before an earlier message of their key`);
  if (batchesOutOfOrder)
    failures.push(`${batchesOutOfOrder} batches holding messages of one ordering key out of their order`);
  if (notReleased.length)
    failures.push(
      `${notReleased.length} messages delivered while an earlier message of their key was leased or waiting for a retry`,
    );
  if (wrongKey.length)
    failures.push(`${wrongKey.length} pulled messages with another ordering_key than they were sent with`);
  return {
    failures,
    figures: {
      keys: groups.size,
      messages: keyedSent,
      delivered: [...groups.values()].reduce((n, g) => n + g.filter((m) => m.stay.length).length, 0),
      unknown_delivered: unknownDelivered,
      ordered_pairs: pairs,
      first_out_of_order: firstOut,
      batches_out_of_order: batchesOutOfOrder,
      delivered_while_held: notReleased.length,
      wrong_key: wrongKey.length,
      keyed_redriven: keyedRedriven,
    },
    examples: {
      order_out_of_order: outOfOrder.slice(0, EXAMPLES),
      order_while_held: notReleased.slice(0, EXAMPLES),
      order_wrong_key: wrongKey.slice(0, EXAMPLES),
    },
  };
}

/**
 * What the order check needs from a history: sends, deliveries (pulled and pushed),
 * when an ack or retry that may have applied was first sent under each lease, the faults
 * that may end a lease, and the corrupted message ids.
 * @param {Op[]} ops @param {PushDelivery[]} pushed
 */
function read(ops, pushed) {
  const invokes = /** @type {Map<number, Op>} */ (new Map());
  const sends = /** @type {Map<string, OrderSend>} */ (new Map());
  const deliveries = /** @type {OrderDelivery[]} */ ([]);
  const acks = /** @type {Map<string, number>} */ (new Map());
  const retries = /** @type {Map<string, number>} */ (new Map());
  const earliest = (/** @type {Map<string, number>} */ m, /** @type {string} */ l, /** @type {number} */ t) =>
    m.set(l, Math.min(m.get(l) ?? Infinity, t));
  const faults =
    /** @type {Array<{ kind: "kill" | "abort" | "consumer", shard: string | null, inv: number, ok: number }>} */ ([]);
  const corrupted = /** @type {Set<string>} */ (new Set());
  for (const o of ops) {
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      if (o.f === "send") {
        const ord = new Map(
          (o.value?.ord ?? []).map((/** @type {[string, string, number]} */ [h, key, seq]) => [h, { key, seq }]),
        );
        for (const h of o.value?.hs ?? []) {
          // A second try with the same Idempotency-Key: the first's invoke places the message.
          const s = sends.get(h) ?? {
            h,
            q: o.value?.q,
            key: ord.get(h)?.key ?? null,
            seq: ord.get(h)?.seq ?? 0,
            inv: o.t,
            acceptedBy: Infinity,
            tries: 0,
            fails: 0,
          };
          s.tries++;
          sends.set(h, s);
        }
      }
      // A kill may end leases from its invoke on; until it completes (or for good, if it never does).
      if (o.f === "kill") faults.push({ kind: "kill", shard: null, inv: o.t, ok: Infinity });
      continue;
    }
    const inv = invokes.get(o.op);
    invokes.delete(o.op);
    if (!inv) continue;
    if (o.f === "send") {
      for (const h of inv.value?.hs ?? []) {
        const s = /** @type {OrderSend} */ (sends.get(h));
        if (o.type === "ok") s.acceptedBy = Math.min(s.acceptedBy, o.t);
        if (o.type === "fail") s.fails++;
      }
    } else if (o.f === "pull" && o.type === "ok") {
      (o.value?.msgs ?? []).forEach((/** @type {any} */ m, /** @type {number} */ pos) => {
        if (m.h == null) return;
        deliveries.push({
          h: m.h,
          id: String(m.id),
          q: inv.value?.q,
          batch: `pull ${o.op}`,
          pos,
          low: inv.t,
          up: o.t,
          a: Number(m.a),
          push: false,
          l: m.l,
          vt: Number(inv.value?.vt),
          s: m.s ?? null,
          k: m.k ?? null,
          end: null,
          acked: false,
        });
      });
    } else if (o.f === "ack") {
      // Named as stale in an ok answer: certainly not applied.
      const stale = new Set(o.type === "ok" ? (o.value?.stale ?? []) : []);
      for (const l of inv.value?.acks ?? []) if (!stale.has(l)) earliest(acks, l, inv.t);
      for (const l of inv.value?.retries ?? []) if (!stale.has(l)) earliest(retries, l, inv.t);
    } else if (o.f === "kill") {
      const k = faults.find((f) => f.kind === "kill" && f.inv === inv.t);
      if (k) k.ok = o.t;
    } else if ((o.f === "abort" || o.f === "consumer-abort") && o.type === "ok" && o.value?.fired === true) {
      faults.push({
        kind: o.f === "abort" ? "abort" : "consumer",
        shard: inv.value?.shard ?? null,
        inv: inv.t,
        ok: o.t,
      });
    } else if (o.f === "corrupt" && o.type === "ok") {
      for (const id of o.value?.ids ?? []) corrupted.add(String(id));
    }
  }
  // Acks and retries never answered may have applied.
  for (const o of invokes.values()) {
    if (o.f !== "ack") continue;
    for (const l of o.value?.acks ?? []) earliest(acks, l, o.t);
    for (const l of o.value?.retries ?? []) earliest(retries, l, o.t);
  }
  const pos = /** @type {Map<string, number>} */ (new Map());
  for (const d of pushed) {
    if (d.h === null) continue;
    const at = pos.get(d.d) ?? 0;
    pos.set(d.d, at + 1);
    // Acked, or cut off (it may have acked): released once the handler returned, at the earliest.
    deliveries.push({
      h: d.h,
      id: d.id,
      q: d.q,
      batch: `push ${d.d}`,
      pos: at,
      low: -Infinity,
      up: d.start,
      a: d.a,
      push: true,
      l: `push:${d.d}:${d.id}`,
      vt: 0,
      s: null,
      k: null,
      end: d.end,
      acked: d.end === null || d.outcome !== "retried",
    });
  }
  return { sends, deliveries, acks, retries, faults, corrupted };
}
