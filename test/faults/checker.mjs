// The checker: Jepsen's total-queue checker, extended with leases. It reads a history
// (history.mjs) and nothing else.
//
//   lost          a send the service answered ok for, whose message was never delivered
//                 (from the queue or its dead-letter queue) by the end, after draining
//   unexpected    a delivery of a harness id that was never sent, or whose send certainly
//                 failed (a 4xx, or a connection refused), or a body without a harness id
//   wrong id      a delivery of an acknowledged message under another id than its send returned
//   duplicated    a harness id delivered more than once (a figure: at-least-once allows it),
//                 with the cause of each redelivery
//   recovered     a send whose outcome was unknown, delivered all the same
//   lease overlap two deliveries of one message whose leases were both held at some moment.
//                 A delivery's lease is certainly held from the moment its pull answered
//                 until the earlier of (pull invoked + visibility timeout) and the first ack
//                 or retry sent under it, and was granted somewhere between its pull's invoke
//                 and answer. An overlap: one lease granted wholly within the other's certain
//                 span, or the two certain spans sharing more than `toleranceMs` (clock
//                 slack, also kept at the end of a span). One with a hard kill between the two pulls
//                 is counted apart (leases of fresh messages are held in the storage shard's
//                 memory, so a kill ends them); one without is a violation.
//   after ack     a delivery of a message whose pull was invoked after an ack of that
//                 message had been confirmed (the ack answered ok with no warning for it)
//
// Valid when: nothing lost, nothing unexpected, no wrong id, no lease overlap while the
// service stayed up, no delivery after a confirmed ack, the queues drained, and the fault
// schedule ran.

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {{ h: string | null, id: string, q: string, a: number, l: string, x: boolean, inv: number, ok: number, vt: number, p: string }} Delivery
 * @typedef {{ outcome: "invoked" | "ok" | "fail" | "unknown", id: string | null, poison: boolean, t: number }} Sent
 */

/** How many examples of each anomaly a result keeps. */
const EXAMPLES = 20;

/**
 * @param {Op[]} ops
 * @param {{ toleranceMs?: number }} [opts]
 */
export function check(ops, opts = {}) {
  const tol = opts.toleranceMs ?? 250;
  /** @type {Map<number, Op>} */
  const invokes = new Map();
  /** @type {Map<string, Sent>} */
  const sends = new Map();
  /** @type {Delivery[]} */
  const deliveries = [];
  /** first ack or retry sent under a lease: lease fingerprint -> t */
  /** @type {Map<string, number>} */
  const settledFrom = new Map();
  /** @type {Set<string>} */
  const retryAsked = new Set();
  /** @type {Array<{ l: string, t: number }>} */
  const confirmedAcks = [];
  /** @type {Array<{ n: number, t: number, dead: number | null }>} */
  const kills = [];
  /** @type {Array<{ n: number, inv: number, ok: number | null, readyMs: number | null }>} */
  const starts = [];
  /** @type {number[]} */
  const sendOks = [];
  /** @type {number[]} */
  const pullOks = [];
  /** @type {Array<{ t: number, n: number }>} */
  const unknownSends = [];
  /** @type {any} */
  let drained = null;
  /** @type {any} */
  let plan = null;
  const opCounts = /** @type {Record<string, Record<string, number>>} */ ({});
  const acks = { asked: 0, confirmed: 0, retriesConfirmed: 0, stale: 0, unknown: 0, failed: 0 };

  for (const o of ops) {
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      if (o.f === "send") {
        const poison = new Set(o.value?.x ?? []);
        for (const h of o.value?.hs ?? []) sends.set(h, { outcome: "invoked", id: null, poison: poison.has(h), t: o.t });
      } else if (o.f === "ack") {
        for (const l of [...(o.value?.acks ?? []), ...(o.value?.retries ?? [])]) if (!settledFrom.has(l)) settledFrom.set(l, o.t);
        for (const l of o.value?.retries ?? []) retryAsked.add(l);
        acks.asked += (o.value?.acks?.length ?? 0) + (o.value?.retries?.length ?? 0);
      } else if (o.f === "kill") {
        kills.push({ n: o.value?.n ?? kills.length + 1, t: o.t, dead: null });
      } else if (o.f === "start") {
        starts.push({ n: o.value?.n ?? starts.length + 1, inv: o.t, ok: null, readyMs: null });
      }
      continue;
    }
    const inv = invokes.get(o.op);
    invokes.delete(o.op);
    if (o.f === "phase") {
      if (o.value?.phase === "drained") drained = o.value;
      if (o.value?.phase === "load") plan = o.value;
      continue;
    }
    (opCounts[o.f] ??= {})[o.type] = (opCounts[o.f]?.[o.type] ?? 0) + 1;
    if (!inv) continue;
    if (o.f === "send") {
      const hs = /** @type {string[]} */ (inv.value?.hs ?? []);
      hs.forEach((h, i) => {
        const s = sends.get(h);
        if (!s) return;
        s.outcome = o.type === "invoke" ? "invoked" : o.type;
        s.t = o.t;
        if (o.type === "ok") s.id = o.value?.ids?.[i] ?? null;
      });
      if (o.type === "ok") sendOks.push(o.t);
      if (o.type === "unknown") unknownSends.push({ t: o.t, n: hs.length });
    } else if (o.f === "pull") {
      if (o.type !== "ok") continue;
      pullOks.push(o.t);
      for (const m of o.value?.msgs ?? []) {
        deliveries.push({ h: m.h ?? null, id: m.id, q: inv.value?.q, a: m.a, l: m.l, x: m.x === 1, inv: inv.t, ok: o.t, vt: inv.value?.vt, p: o.p });
      }
    } else if (o.f === "ack") {
      if (o.type === "ok") {
        for (const l of o.value?.acked ?? []) confirmedAcks.push({ l, t: o.t });
        acks.confirmed += o.value?.acked?.length ?? 0;
        acks.retriesConfirmed += o.value?.retried?.length ?? 0;
        acks.stale += o.value?.stale?.length ?? 0;
      } else {
        const n = (inv.value?.acks?.length ?? 0) + (inv.value?.retries?.length ?? 0);
        if (o.type === "unknown") acks.unknown += n;
        else acks.failed += n;
      }
    } else if (o.f === "kill") {
      const k = kills.find((x) => x.t === inv.t);
      if (k) k.dead = o.t;
    } else if (o.f === "start") {
      const s = starts.find((x) => x.inv === inv.t);
      if (s && o.type === "ok") {
        s.ok = o.t;
        s.readyMs = o.value?.ready_ms ?? Math.round(o.t - inv.t);
      }
    }
  }
  // A send still open when the history ended may or may not have been stored.
  let incomplete = 0;
  for (const s of sends.values()) {
    if (s.outcome === "invoked") {
      s.outcome = "unknown";
      incomplete++;
    }
  }

  /** @type {Map<string, Delivery[]>} */
  const byH = new Map();
  /** @type {Map<string, Delivery[]>} */
  const byId = new Map();
  /** @type {Map<string, Delivery>} */
  const byLease = new Map();
  for (const d of deliveries) {
    if (d.h !== null) push(byH, d.h, d);
    push(byId, d.id, d);
    byLease.set(d.l, d);
  }

  // Sends.
  const sent = { attempted: sends.size, ok: 0, fail: 0, unknown: 0, incomplete, poison: 0 };
  /** @type {string[]} */
  const lost = [];
  let recovered = 0;
  let unknownNeverDelivered = 0;
  /** @type {Array<{ h: string, sent: string, delivered: string }>} */
  const wrongId = [];
  let storedTwice = 0;
  let poisonDeadLettered = 0;
  let poisonNotDeadLettered = 0;
  let deadLetteredOthers = 0;
  let neverConfirmed = 0;
  const confirmedLeases = new Set(confirmedAcks.map((a) => a.l));
  for (const [h, s] of sends) {
    sent[s.outcome === "invoked" ? "unknown" : s.outcome]++;
    const ds = byH.get(h) ?? [];
    if (s.outcome === "ok") {
      if (s.poison) sent.poison++;
      if (ds.length === 0) lost.push(h);
      for (const d of ds) if (s.id !== null && d.id !== s.id) wrongId.push({ h, sent: s.id, delivered: d.id });
    } else if (s.outcome === "unknown") {
      if (ds.length > 0) recovered++;
      else unknownNeverDelivered++;
    }
    if (ds.length === 0) continue;
    if (new Set(ds.map((d) => d.id)).size > 1) storedTwice++;
    const dlq = ds.some((d) => d.q.endsWith("-dlq"));
    if (s.poison && s.outcome === "ok") dlq ? poisonDeadLettered++ : poisonNotDeadLettered++;
    else if (!s.poison && dlq) deadLetteredOthers++;
    if (!ds.some((d) => confirmedLeases.has(d.l))) neverConfirmed++;
  }

  // Deliveries nobody sent.
  /** @type {Array<{ h: string | null, id: string, why: string }>} */
  const unexpected = [];
  for (const d of deliveries) {
    const s = d.h === null ? undefined : sends.get(d.h);
    if (d.h === null) unexpected.push({ h: null, id: d.id, why: "no harness id in the body" });
    else if (!s) unexpected.push({ h: d.h, id: d.id, why: "never sent" });
    else if (s.outcome === "fail") unexpected.push({ h: d.h, id: d.id, why: "its send certainly failed" });
  }

  // Redeliveries and their causes; lease overlaps.
  const causes = { retried: 0, dead_lettered: 0, lease_expired: 0, kill: 0, other: 0 };
  /** @type {Array<{ id: string, h: string | null, first: object, second: object, overlapMs: number }>} */
  const overlaps = [];
  let overlapsAcrossKill = 0;
  const killTimes = kills.map((k) => k.t);
  const killBetween = (/** @type {number} */ from, /** @type {number} */ to) => killTimes.some((t) => t > from && t < to);
  const heldUntil = (/** @type {Delivery} */ d) => Math.min(d.inv + d.vt, settledFrom.get(d.l) ?? Infinity);
  const brief = (/** @type {Delivery} */ d) => ({ q: d.q, by: d.p, attempts: d.a, pull_invoked: d.inv, pull_ok: d.ok, visibility_ms: d.vt, settle_sent: settledFrom.get(d.l) ?? null });
  for (const ds of byId.values()) {
    if (ds.length < 2) continue;
    ds.sort((a, b) => a.ok - b.ok || a.inv - b.inv);
    for (let i = 1; i < ds.length; i++) {
      const a = /** @type {Delivery} */ (ds[i - 1]);
      const b = /** @type {Delivery} */ (ds[i]);
      if (a.q !== b.q) causes.dead_lettered++;
      else if (retryAsked.has(a.l)) causes.retried++;
      else if (killBetween(a.inv, b.ok)) causes.kill++;
      else if (b.inv + tol >= a.inv + a.vt) causes.lease_expired++;
      else causes.other++;
    }
    for (let i = 0; i < ds.length; i++) {
      for (let j = i + 1; j < ds.length; j++) {
        const a = /** @type {Delivery} */ (ds[i]);
        const b = /** @type {Delivery} */ (ds[j]);
        // Held at once: one granted (between its pull's invoke and answer) while the
        // other was certainly held, or both certainly held at some moment.
        const ea = heldUntil(a);
        const eb = heldUntil(b);
        const shared = Math.min(ea, eb) - Math.max(a.ok, b.ok);
        const grantedInB = a.inv >= b.ok && a.ok <= eb - tol;
        const grantedInA = b.inv >= a.ok && b.ok <= ea - tol;
        if (!grantedInA && !grantedInB && shared <= tol) continue;
        if (killBetween(Math.min(a.inv, b.inv), Math.max(a.ok, b.ok))) {
          overlapsAcrossKill++;
          continue;
        }
        overlaps.push({ id: a.id, h: a.h, first: brief(a), second: brief(b), overlapMs: Math.round(Math.max(shared, grantedInA ? ea - b.ok : 0, grantedInB ? eb - a.ok : 0)) });
      }
    }
  }

  // Deliveries after a confirmed ack.
  /** @type {Array<{ id: string, h: string | null, ackedAt: number, pulledAt: number, by: string }>} */
  const afterAck = [];
  for (const { l, t } of confirmedAcks) {
    const acked = byLease.get(l);
    if (!acked) continue;
    for (const d of byId.get(acked.id) ?? []) {
      if (d.inv > t) afterAck.push({ id: d.id, h: d.h, ackedAt: t, pulledAt: d.inv, by: d.p });
    }
  }

  const duplicated = [...byH.values()].filter((ds) => ds.length > 1);
  const figures = {
    sent,
    delivered: {
      deliveries: deliveries.length,
      distinct: byH.size,
      from_dead_letter_queue: deliveries.filter((d) => d.q.endsWith("-dlq")).length,
    },
    lost: lost.length,
    unexpected: unexpected.length,
    wrong_id: wrongId.length,
    recovered,
    unknown_never_delivered: unknownNeverDelivered,
    duplicated: {
      messages: duplicated.length,
      extra_deliveries: duplicated.reduce((n, ds) => n + ds.length - 1, 0),
      stored_twice: storedTwice,
      redelivery_causes: causes,
    },
    lease_overlaps: overlaps.length,
    leases_ended_by_kill: overlapsAcrossKill,
    delivered_after_ack: afterAck.length,
    poison: { sent: sent.poison, dead_lettered: poisonDeadLettered, not_dead_lettered: poisonNotDeadLettered, others_dead_lettered: deadLetteredOthers },
    acks: { ...acks, messages_never_confirmed: neverConfirmed },
    operations: opCounts,
    kills: recovery(kills, starts, sendOks, pullOks, unknownSends),
    drained,
    plan,
  };

  /** @type {string[]} */
  const failures = [];
  if (sent.ok === 0) failures.push("no send was acknowledged: the run tested nothing");
  if (lost.length) failures.push(`${lost.length} acknowledged messages lost`);
  if (unexpected.length) failures.push(`${unexpected.length} unexpected deliveries`);
  if (wrongId.length) failures.push(`${wrongId.length} deliveries under another id than the send returned`);
  if (overlaps.length) failures.push(`${overlaps.length} lease overlaps while the service was up`);
  if (afterAck.length) failures.push(`${afterAck.length} deliveries after a confirmed ack`);
  if (!drained?.drained) failures.push(`the queues did not drain (backlog ${JSON.stringify(drained?.backlog ?? null)})`);
  if (plan && kills.length !== plan.kills) failures.push(`${kills.length} of the ${plan.kills} planned kills ran`);

  return {
    valid: failures.length === 0,
    failures,
    figures,
    examples: {
      lost: lost.slice(0, EXAMPLES),
      unexpected: unexpected.slice(0, EXAMPLES),
      wrong_id: wrongId.slice(0, EXAMPLES),
      lease_overlaps: overlaps.slice(0, EXAMPLES),
      delivered_after_ack: afterAck.slice(0, EXAMPLES),
    },
  };
}

/** @typedef {ReturnType<typeof check>} CheckResult */

/**
 * Per kill: how long the restart took to be ready, and to the first send and the first
 * pull that succeeded after it (what clients see), and the sends left unknown by it.
 * @param {Array<{ n: number, t: number, dead: number | null }>} kills
 * @param {Array<{ n: number, inv: number, ok: number | null, readyMs: number | null }>} starts
 * @param {number[]} sendOks @param {number[]} pullOks
 * @param {Array<{ t: number, n: number }>} unknownSends
 */
function recovery(kills, starts, sendOks, pullOks, unknownSends) {
  const firstAfter = (/** @type {number[]} */ ts, /** @type {number} */ t) => ts.find((x) => x > t) ?? null;
  const each = kills.map((k, i) => {
    const s = starts.find((x) => x.n === k.n);
    const next = kills[i + 1]?.t ?? Infinity;
    const dead = k.dead ?? k.t;
    const send = firstAfter(sendOks, dead);
    const pull = firstAfter(pullOks, dead);
    const within = (/** @type {number | null} */ t) => (t !== null && t < next ? t : null);
    const sendAt = within(send);
    const pullAt = within(pull);
    return {
      n: k.n,
      at_ms: Math.round(k.t),
      ready_ms: s?.readyMs ?? null,
      restart_to_first_send_ms: s && sendAt !== null ? Math.round(sendAt - s.inv) : null,
      restart_to_first_pull_ms: s && pullAt !== null ? Math.round(pullAt - s.inv) : null,
      kill_to_first_send_ms: sendAt !== null ? Math.round(sendAt - k.t) : null,
      unknown_send_messages: unknownSends.filter((u) => u.t >= k.t && u.t <= Math.min(next, (s?.ok ?? next) + 1000)).reduce((n, u) => n + u.n, 0),
    };
  });
  const stat = (/** @type {Array<number | null>} */ xs) => {
    const v = /** @type {number[]} */ (xs.filter((x) => x !== null)).sort((a, b) => a - b);
    if (!v.length) return null;
    return { median: /** @type {number} */ (v[Math.floor((v.length - 1) / 2)]), max: /** @type {number} */ (v[v.length - 1]), n: v.length };
  };
  return {
    count: kills.length,
    ready_ms: stat(each.map((e) => e.ready_ms)),
    restart_to_first_send_ms: stat(each.map((e) => e.restart_to_first_send_ms)),
    restart_to_first_pull_ms: stat(each.map((e) => e.restart_to_first_pull_ms)),
    kill_to_first_send_ms: stat(each.map((e) => e.kill_to_first_send_ms)),
    each,
  };
}


/**
 * @template K, V
 * @param {Map<K, V[]>} map @param {K} key @param {V} value
 */
function push(map, key, value) {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
