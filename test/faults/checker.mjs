// The checker: Jepsen's total-queue checker, extended with leases. It reads a history
// (history.mjs) and nothing else. Each check is defined in full in docs/guarantees.md and,
// figure by figure, in the report (report.mjs); in short:
//
//   lost          acknowledged by a send, never acked by the end: never delivered, or gone
//                 from every queue (the queue, the dead-letter queue, back by a redrive)
//   unexpected    a delivery of a harness id never sent, or whose send certainly failed
//   wrong id      a delivery under another id than its send returned
//   duplicated    delivered more than once (a figure: at-least-once allows it), with causes
//   recovered     a send left unknown, delivered all the same
//   lease overlap two deliveries of one message whose leases were both certainly held at some
//                 moment; counted apart across a hard kill or a reset of the message's shard
//   corrupted     bodies the nemesis corrupted: quarantined, counted, never delivered after
//                 it; a delivery whose body is not what was sent (garbled) fails the run
//   stored twice  one id of a queue delivered from two stored copies in one stay
//   moves         redrives, each message's stays and dead-letterings (move-checker.mjs); a
//                 second copy left by a move cut off by a fault goes on separately
//   after ack     a delivery pulled after an ack of that message was confirmed
//   push          deliveries to a Worker consumer's queue() handler (push-checker.mjs)
//   order         ordering keys (order-checker.mjs): first deliveries in accepted order,
//                 none while an earlier message of the key is leased or waiting for a retry
//   ids           message ids (id-checker.mjs): no id answered to two messages, a chosen id
//                 answered as chosen, no acknowledged id delivered with another message's body
//   purges        of the dead-letter queue during a redrive (purge-checker.mjs): what a purge
//                 reported deleted is never delivered after it, and is counted apart from lost
//   ready         no message ready longer than 10 s while a consumer asked (ready-checker.mjs),
//                 and each quiet phase's delayed messages delivered within it (quiet-phases.mjs)
//
// Valid when: nothing lost, nothing unexpected, no wrong id, no message id stored twice,
// no lease overlap while the service and the shard stayed up, no delivery after a
// confirmed ack, no ordering key's messages out of order, nothing a purge reported deleted
// delivered after it, the queues drained, and the
// fault schedule ran (every abort fired).

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {{ h: string | null, id: string, q: string, a: number, l: string, s: string | null, r: string | null, x: boolean, g: boolean, inv: number, ok: number, vt: number, p: string,
 *   w?: number, push?: boolean, acked?: boolean }} Delivery  w: the pull's wait_time_ms (long polling); push: given to a queue() handler (inv = ok = when it started; acked: by that handler)
 * @typedef {{ n: number, kind: string, shard: string, inv: number, ok: number | null, fired: boolean }} Abort
 * @typedef {{ outcome: "invoked" | "ok" | "fail" | "unknown", id: string | null, poison: boolean, t: number, key: string | null, tries: number, before: Sent["outcome"] | null }} Sent
 */

import { controlFaults } from "./control-figures.mjs";
import { checkCorruption } from "./corruption-checker.mjs";
import { abortFigures, recovery } from "./figures.mjs";
import { deliveredAfterAck, moveFigures, staysOf, storedTwiceWithinStays } from "./move-checker.mjs";
import { checkIds } from "./id-checker.mjs";
import { leaseOverlaps } from "./lease-overlaps.mjs";
import { checkOrder } from "./order-checker.mjs";
import { checkPausesAndDelays } from "./pause-delay.mjs";
import { checkPush, pushDeliveries } from "./push-checker.mjs";
import { checkPurges, purgesOf } from "./purge-checker.mjs";
import { checkQuiet } from "./quiet-phases.mjs";
import { checkReady } from "./ready-checker.mjs";

/** How many examples of each anomaly a result keeps. */
const EXAMPLES = 20;

/**
 * @param {Op[]} ops
 * @param {{ toleranceMs?: number }} [opts]
 */
export function check(ops, opts = {}) {
  const tol = opts.toleranceMs ?? 250;
  const invokes = /** @type {Map<number, Op>} */ (new Map());
  const sends = /** @type {Map<string, Sent>} */ (new Map());
  const deliveries = /** @type {Delivery[]} */ ([]);
  /** first ack or retry sent under a lease: lease fingerprint -> t */
  const settledFrom = /** @type {Map<string, number>} */ (new Map());
  const retryAsked = /** @type {Set<string>} */ (new Set());
  const confirmedAcks = /** @type {Array<{ l: string, t: number }>} */ ([]);
  const kills = /** @type {Array<{ n: number, t: number, dead: number | null }>} */ ([]);
  const starts = /** @type {Array<{ n: number, inv: number, ok: number | null, readyMs: number | null }>} */ ([]);
  const aborts = /** @type {Abort[]} */ ([]);
  /** Corrupted message ids: when the corruption was invoked and answered. */
  const corrupted = /** @type {Map<string, { inv: number, ok: number }>} */ (new Map());
  /** Acks answered ok with some leases not applied: when, and how many. */
  const staleAcks = /** @type {Array<{ t: number, n: number }>} */ ([]);
  const sendOks = /** @type {number[]} */ ([]);
  const pullOks = /** @type {number[]} */ ([]);
  const unknownSends = /** @type {Array<{ t: number, n: number }>} */ ([]);
  /** @type {any} */
  let drained = null;
  /** @type {any} */
  let plan = null;
  const opCounts = /** @type {Record<string, Record<string, number>>} */ ({});
  const acks = { asked: 0, confirmed: 0, retriesConfirmed: 0, stale: 0, unknown: 0, failed: 0 };
  /** Leases an ack may have applied under: confirmed, or answered unknown, or never answered. */
  const mayBeAcked = /** @type {Set<string>} */ (new Set());
  /** Acks not answered yet: op -> the leases they name. */
  const openAcks = /** @type {Map<number, string[]>} */ (new Map());
  const redrives = /** @type {Array<{ inv: number, ok: number, outcome: string, moved: number }>} */ ([]);

  for (const o of ops) {
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      if (o.f === "send") {
        const poison = new Set(o.value?.x ?? []);
        for (const h of o.value?.hs ?? []) {
          // A second try with the same Idempotency-Key: what the first did still counts.
          const first = sends.get(h);
          sends.set(h, {
            outcome: "invoked",
            id: first?.id ?? null,
            poison: poison.has(h),
            t: o.t,
            key: o.value?.key ?? null,
            tries: (first?.tries ?? 0) + 1,
            before: first?.outcome ?? null,
          });
        }
      } else if (o.f === "ack") {
        for (const l of [...(o.value?.acks ?? []), ...(o.value?.retries ?? [])])
          if (!settledFrom.has(l)) settledFrom.set(l, o.t);
        for (const l of o.value?.retries ?? []) retryAsked.add(l);
        openAcks.set(o.op, o.value?.acks ?? []);
        acks.asked += (o.value?.acks?.length ?? 0) + (o.value?.retries?.length ?? 0);
      } else if (o.f === "kill") {
        kills.push({ n: o.value?.n ?? kills.length + 1, t: o.t, dead: null });
      } else if (o.f === "start") {
        starts.push({ n: o.value?.n ?? starts.length + 1, inv: o.t, ok: null, readyMs: null });
      } else if (o.f === "abort") {
        aborts.push({
          n: o.value?.n ?? aborts.length + 1,
          kind: o.value?.kind ?? "abort",
          shard: o.value?.shard ?? "",
          inv: o.t,
          ok: null,
          fired: false,
        });
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
        // Tries merged: ok if one was; else unknown if one may have stored; else failed.
        s.outcome =
          o.type === "ok" || s.before === "ok"
            ? "ok"
            : o.type === "unknown" || s.before === "unknown" || s.before === "invoked"
              ? "unknown"
              : "fail";
        s.t = o.t;
        if (o.type === "ok") s.id = o.value?.ids?.[i] ?? null;
      });
      if (o.type === "ok") sendOks.push(o.t);
      if (o.type === "unknown") unknownSends.push({ t: o.t, n: hs.length });
    } else if (o.f === "pull") {
      if (o.type !== "ok") continue;
      pullOks.push(o.t);
      for (const m of o.value?.msgs ?? []) {
        deliveries.push({
          h: m.h ?? null,
          id: m.id,
          q: inv.value?.q,
          a: m.a,
          l: m.l,
          s: m.s ?? null,
          r: m.r ?? null,
          x: m.x === 1,
          g: m.g === 1,
          inv: inv.t,
          ok: o.t,
          vt: inv.value?.vt,
          w: inv.value?.w ?? 0,
          p: o.p,
        });
      }
    } else if (o.f === "redrive") {
      redrives.push({ inv: inv.t, ok: o.t, outcome: o.type, moved: o.type === "ok" ? Number(o.value?.moved ?? 0) : 0 });
    } else if (o.f === "ack") {
      const named = openAcks.get(o.op) ?? [];
      openAcks.delete(o.op);
      if (o.type === "unknown") for (const l of named) mayBeAcked.add(l);
      if (o.type === "ok") {
        for (const l of o.value?.acked ?? []) mayBeAcked.add(l);
        for (const l of o.value?.acked ?? []) confirmedAcks.push({ l, t: o.t });
        acks.confirmed += o.value?.acked?.length ?? 0;
        acks.retriesConfirmed += o.value?.retried?.length ?? 0;
        acks.stale += o.value?.stale?.length ?? 0;
        // Warned that the shard did not answer: applied or not, nobody knows. Only an ack can
        // have ended the message; a retry left unknown (even one that dead-letters) leaves it somewhere.
        const asAcks = new Set(named);
        for (const l of o.value?.unknown ?? []) if (asAcks.has(l)) mayBeAcked.add(l);
        acks.unknown += o.value?.unknown?.length ?? 0;
        if (o.value?.stale?.length) staleAcks.push({ t: o.t, n: o.value.stale.length });
      } else {
        const n = (inv.value?.acks?.length ?? 0) + (inv.value?.retries?.length ?? 0);
        if (o.type === "unknown") acks.unknown += n;
        else acks.failed += n;
      }
    } else if (o.f === "kill") {
      const k = kills.find((x) => x.t === inv.t);
      if (k) k.dead = o.t;
    } else if (o.f === "corrupt") {
      if (o.type === "ok") for (const id of o.value?.ids ?? []) corrupted.set(id, { inv: inv.t, ok: o.t });
    } else if (o.f === "abort") {
      const a = aborts.find((x) => x.inv === inv.t);
      // Disarmed unfired after the load was over: a skipped fault (its "skipped" note counts it), not an attempt.
      if (a && o.value?.skipped === true) aborts.splice(aborts.indexOf(a), 1);
      else if (a) {
        a.ok = o.t;
        a.fired = o.type === "ok" && o.value?.fired === true;
      }
    } else if (o.f === "start") {
      const s = starts.find((x) => x.inv === inv.t);
      if (s && o.type === "ok") {
        s.ok = o.t;
        s.readyMs = o.value?.ready_ms ?? Math.round(o.t - inv.t);
      }
    }
  }
  // An ack still open when the history ended may have applied.
  for (const named of openAcks.values()) for (const l of named) mayBeAcked.add(l);
  // A send still open when the history ended may or may not have been stored.
  let incomplete = 0;
  for (const s of sends.values()) {
    if (s.outcome === "invoked") {
      s.outcome = "unknown";
      incomplete++;
    }
  }
  // A message a queue() handler was given is delivered; leases and acks are push-checker.mjs's.
  const pushed = pushDeliveries(ops);
  for (const d of pushed) {
    deliveries.push({
      h: d.h,
      id: d.id,
      q: d.q,
      a: d.a,
      l: `push:${d.d}:${d.id}`,
      s: null,
      r: null,
      x: d.x,
      g: d.g,
      inv: d.start,
      ok: d.start,
      vt: 0,
      p: "push-consumer",
      push: true,
      acked: d.outcome === "acked",
    });
  }

  const byH = /** @type {Map<string, Delivery[]>} */ (new Map());
  const byId = /** @type {Map<string, Delivery[]>} */ (new Map());
  const byLease = /** @type {Map<string, Delivery>} */ (new Map());
  for (const d of deliveries) {
    if (d.h !== null) push(byH, d.h, d);
    push(byId, d.id, d);
    byLease.set(d.l, d);
  }

  // Sends.
  const sent = { attempted: sends.size, ok: 0, fail: 0, unknown: 0, incomplete, poison: 0 };
  const lost = /** @type {string[]} */ ([]);
  let lostAfterDelivery = 0;
  let recovered = 0;
  let unknownNeverDelivered = 0;
  const wrongId = /** @type {Array<{ h: string, sent: string, delivered: string }>} */ ([]);
  let storedTwice = 0;
  let keyedRetried = 0;
  const keyedStoredTwice = /** @type {Array<{ h: string, key: string, ids: string[] }>} */ ([]);
  let poisonDeadLettered = 0;
  let poisonNotDeadLettered = 0;
  let poisonQuarantined = 0;
  let deadLetteredOthers = 0;
  let neverConfirmed = 0;
  const confirmedLeases = new Set(confirmedAcks.map((a) => a.l));
  // Purges of the dead-letter queue (purge-checker.mjs): what they deleted is not lost.
  const purgedIds = new Set(purgesOf(ops).flatMap((p) => [...p.ids]));
  const purges = checkPurges(purgesOf(ops), deliveries, retryAsked, [
    ...kills.map((k) => k.t),
    ...aborts.filter((a) => a.fired && a.ok !== null).map((a) => /** @type {number} */ (a.ok)),
  ]);
  for (const [h, s] of sends) {
    sent[s.outcome === "invoked" ? "unknown" : s.outcome]++;
    const ds = byH.get(h) ?? [];
    if (s.outcome === "ok") {
      if (s.poison) sent.poison++;
      // Gone without an ack: every copy was settled some other way, or never stored.
      if (
        !ds.some((d) => mayBeAcked.has(d.l) || d.acked) &&
        !(s.id !== null && corrupted.has(s.id)) &&
        !purges.excuses(s.id, ds)
      ) {
        lost.push(h);
        if (ds.length > 0) lostAfterDelivery++;
      }
      for (const d of ds) if (s.id !== null && d.id !== s.id) wrongId.push({ h, sent: s.id, delivered: d.id });
    } else if (s.outcome === "unknown") {
      if (ds.length > 0) recovered++;
      else unknownNeverDelivered++;
    }
    if (ds.length === 0) continue;
    if (new Set(ds.filter((d) => !d.q.endsWith("-dlq")).map((d) => d.id)).size > 1) {
      storedTwice++;
      // Sent again with its Idempotency-Key, it had to be stored once, under the ids of the first.
      if (s.key !== null && s.tries > 1)
        keyedStoredTwice.push({ h, key: s.key, ids: [...new Set(ds.map((d) => d.id))] });
    }
    if (s.key !== null && s.tries > 1) keyedRetried++;
    const dlq = ds.some((d) => d.q.endsWith("-dlq"));
    // A corrupted one is quarantined before it runs out of retries.
    // One a purge of the dead-letter queue named was there: dead-lettered, then deleted before a delivery.
    if (s.poison && s.outcome === "ok")
      s.id !== null && corrupted.has(s.id)
        ? poisonQuarantined++
        : dlq || (s.id !== null && purgedIds.has(s.id))
          ? poisonDeadLettered++
          : poisonNotDeadLettered++;
    else if (!s.poison && dlq) deadLetteredOthers++;
    if (!ds.some((d) => confirmedLeases.has(d.l) || d.acked)) neverConfirmed++;
  }

  const { stays, stayOf } = staysOf(deliveries);
  const { storedTwice: storedTwiceSameId, acrossCutMove: storedTwiceAcrossCutMove } = storedTwiceWithinStays(
    deliveries,
    stayOf,
    byId,
    stays,
    redrives,
  );

  // Deliveries nobody sent.
  const unexpected = /** @type {Array<{ h: string | null, id: string, why: string }>} */ ([]);
  for (const d of deliveries) {
    const s = d.h === null ? undefined : sends.get(d.h);
    if (d.h === null) unexpected.push({ h: null, id: d.id, why: "no harness id in the body" });
    else if (!s) unexpected.push({ h: d.h, id: d.id, why: "never sent" });
    else if (s.outcome === "fail") unexpected.push({ h: d.h, id: d.id, why: "its send certainly failed" });
  }

  // Redeliveries and their causes; lease overlaps.
  const causes = { retried: 0, dead_lettered: 0, lease_expired: 0, kill: 0, abort: 0, other: 0 };
  const overlaps =
    /** @type {Array<{ id: string, h: string | null, first: object, second: object, overlapMs: number }>} */ ([]);
  let overlapsAcrossKill = 0;
  let overlapsAcrossAbort = 0;
  const killTimes = kills.map((k) => k.t);
  const killBetween = (/** @type {number} */ from, /** @type {number} */ to) =>
    killTimes.some((t) => t > from && t < to);
  // An abort happened somewhere between its invoke and its completion, to one shard only.
  const fired = aborts.filter((a) => a.fired && a.ok !== null);
  const abortBetween = (/** @type {string | null} */ shard, /** @type {number} */ from, /** @type {number} */ to) =>
    shard === null
      ? undefined
      : fired.find((a) => a.shard === shard && a.inv < to && /** @type {number} */ (a.ok) > from);
  /** Per abort: how long after it was seen each message it set free came again (redelivered, or first delivered from an unknown send). */
  const cameAgain = /** @type {Map<Abort, number[]>} */ (new Map());
  const cameAgainAfter = (/** @type {Abort | undefined} */ a, /** @type {number} */ t) => {
    if (a) cameAgain.set(a, [...(cameAgain.get(a) ?? []), t - /** @type {number} */ (a.ok)]);
  };
  const heldUntil = (/** @type {Delivery} */ d) => Math.min(d.inv + d.vt, settledFrom.get(d.l) ?? Infinity);
  const brief = (/** @type {Delivery} */ d) => ({
    q: d.q,
    by: d.p,
    attempts: d.a,
    pull_invoked: d.inv,
    pull_ok: d.ok,
    visibility_ms: d.vt,
    settle_sent: settledFrom.get(d.l) ?? null,
  });
  for (const all of byId.values()) {
    // Pull leases only: push-checker.mjs has its own causes and overlaps.
    const ds = all.filter((d) => !d.push);
    if (ds.length < 2) continue;
    ds.sort((a, b) => a.ok - b.ok || a.inv - b.inv);
    for (let i = 1; i < ds.length; i++) {
      const a = /** @type {Delivery} */ (ds[i - 1]);
      const b = /** @type {Delivery} */ (ds[i]);
      if (a.q !== b.q) causes.dead_lettered++;
      else if (retryAsked.has(a.l)) causes.retried++;
      else if (killBetween(a.inv, b.ok)) causes.kill++;
      else if (abortBetween(a.s, a.inv, b.ok)) {
        causes.abort++;
        cameAgainAfter(abortBetween(a.s, a.inv, b.ok), b.ok);
      }
      // A long-polling pull's lease may have been granted as late as its answer.
      else if ((b.w ? b.ok : b.inv) + tol >= a.inv + a.vt) causes.lease_expired++;
      else causes.other++;
    }
    const found = leaseOverlaps(ds, { heldUntil, tol, killBetween, abortBetween, brief });
    overlaps.push(...found.overlaps);
    overlapsAcrossKill += found.acrossKill;
    overlapsAcrossAbort += found.acrossAbort;
  }

  // A message of a send left unknown while an abort-append was armed came when first delivered.
  for (const [h, s] of sends) {
    const first = byH.get(h)?.[0];
    if (s.outcome !== "unknown" || !first || first.s === null) continue;
    const a = fired.find(
      (x) =>
        x.kind === "abort-append" && x.shard === first.s && s.t >= x.inv && s.t <= /** @type {number} */ (x.ok) + 1000,
    );
    cameAgainAfter(a, Math.min(...(byH.get(h) ?? []).map((d) => d.ok)));
  }

  // Corrupted messages: never delivered after the corruption, never garbled, all counted.
  const { corruptDelivered, garbled, quarantine } = checkCorruption(
    corrupted,
    deliveries,
    confirmedAcks,
    byId,
    byLease,
    drained,
  );

  // Deliveries after a confirmed ack, but for copies a cut-off redrive or dead-lettering left behind.
  // When a fault may have cut a move: a kill at its time; a shard reset at some moment between
  // arming it and seeing it fired (its ok time can be well after the reset itself).
  const cutWindows = /** @type {Array<[number, number]>} */ ([
    ...killTimes.map((t) => [t, t]),
    ...fired.map((a) => [a.inv, /** @type {number} */ (a.ok)]),
  ]);
  const { afterAck, acrossCutMove: afterAckAcrossCutMove } = deliveredAfterAck(
    confirmedAcks,
    byLease,
    byId,
    stays,
    redrives,
    cutWindows,
  );

  const duplicated = [...byH.values()].filter((ds) => ds.length > 1);
  const control = controlFaults(ops);
  const pushCheck = checkPush(
    ops,
    pushed,
    deliveries.filter((d) => !d.push),
    { purged: (id, last) => purges.excusesPush(id, last) },
  );
  const orderCheck = checkOrder(ops, pushed, { toleranceMs: tol });
  const idCheck = checkIds(ops, deliveries);
  const purgeCheck = purges.result();
  // Pauses of delivery while pulls wait, delayed and retried messages under long polls (pause-delay.mjs).
  const pauseCheck = checkPausesAndDelays(ops);
  const readyCheck = checkReady(ops);
  const quietCheck = checkQuiet(ops);
  const figures = {
    sent,
    delivered: {
      deliveries: deliveries.length,
      distinct: byH.size,
      from_dead_letter_queue: deliveries.filter((d) => d.q.endsWith("-dlq")).length,
    },
    lost: lost.length,
    lost_after_delivery: lostAfterDelivery,
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
    stored_twice_same_id: storedTwiceSameId.length,
    stored_twice_across_cut_move: storedTwiceAcrossCutMove,
    quarantine,
    idempotent_retries: {
      messages: [...sends.values()].filter((s) => s.key !== null && s.tries > 1).length,
      delivered: keyedRetried,
      stored_under_two_ids: keyedStoredTwice.length,
    },
    lease_overlaps: overlaps.length,
    leases_ended_by_kill: overlapsAcrossKill,
    leases_ended_by_abort: overlapsAcrossAbort,
    delivered_after_ack: afterAck.length,
    delivered_after_ack_across_cut_move: afterAckAcrossCutMove,
    moves: moveFigures(redrives, stays),
    poison: {
      sent: sent.poison,
      dead_lettered: poisonDeadLettered,
      not_dead_lettered: poisonNotDeadLettered,
      quarantined: poisonQuarantined,
      others_dead_lettered: deadLetteredOthers,
    },
    acks: { ...acks, messages_never_confirmed: neverConfirmed },
    operations: opCounts,
    kills: recovery(kills, starts, sendOks, pullOks, unknownSends),
    aborts: abortFigures(aborts, unknownSends, staleAcks, cameAgain),
    control: control.figures,
    push: pushCheck.figures,
    order: orderCheck.figures,
    ids: idCheck.figures,
    purges: purgeCheck.figures,
    pause_delay: pauseCheck.figures,
    ready: readyCheck.figures,
    quiet: quietCheck.figures,
    drained,
    plan,
  };

  const failures = /** @type {string[]} */ ([]);
  if (sent.ok === 0) failures.push("no send was acknowledged: the run tested nothing");
  if (lost.length) failures.push(`${lost.length} acknowledged messages lost`);
  if (unexpected.length) failures.push(`${unexpected.length} unexpected deliveries`);
  if (wrongId.length) failures.push(`${wrongId.length} deliveries under another id than the send returned`);
  if (storedTwiceSameId.length) failures.push(`${storedTwiceSameId.length} message ids stored twice`);
  if (garbled.length) failures.push(`${garbled.length} deliveries with a garbled body`);
  if (corruptDelivered.length)
    failures.push(`${corruptDelivered.length} deliveries of a corrupted message after its corruption`);
  if (plan?.corruptions && quarantine.reported !== quarantine.expected)
    failures.push(`${quarantine.reported} messages reported quarantined, not the ${quarantine.expected} corrupted`);
  if (keyedStoredTwice.length)
    failures.push(`${keyedStoredTwice.length} messages sent again with their Idempotency-Key stored under two ids`);
  if (overlaps.length) failures.push(`${overlaps.length} lease overlaps while the service was up`);
  if (afterAck.length) failures.push(`${afterAck.length} deliveries after a confirmed ack`);
  if (!drained?.drained)
    failures.push(`the queues did not drain (backlog ${JSON.stringify(drained?.backlog ?? null)})`);
  if (plan && kills.length !== plan.kills) failures.push(`${kills.length} of the ${plan.kills} planned kills ran`);
  // Every abort tried must fire; one skipped because the load was over is counted, not failed.
  const skipped = ops.filter((o) => o.f === "skipped").length;
  if (plan && (fired.length !== aborts.length || aborts.length + skipped !== (plan.aborts ?? 0)))
    failures.push(
      `${fired.length} of the ${plan.aborts ?? 0} planned aborts fired${skipped ? ` (${skipped} skipped: the load was over)` : ""}`,
    );
  // Each rule kept in its own module (the control-plane faults: each fired, or was skipped for a stated reason, and the service recovered).
  for (const c of [control, pushCheck, orderCheck, idCheck, purgeCheck, pauseCheck, readyCheck, quietCheck])
    failures.push(...c.failures);
  if (plan?.redrive && !redrives.some((r) => r.outcome === "ok"))
    failures.push("no redrive of the dead-letter queue succeeded: the run moved nothing");
  if (plan?.controls && (control.figures?.count ?? 0) !== plan.controls)
    failures.push(`${control.figures?.count ?? 0} of the ${plan.controls} planned control faults ran`);

  return {
    valid: failures.length === 0,
    failures,
    figures,
    examples: {
      lost: lost.slice(0, EXAMPLES),
      unexpected: unexpected.slice(0, EXAMPLES),
      wrong_id: wrongId.slice(0, EXAMPLES),
      stored_twice_same_id: storedTwiceSameId.slice(0, EXAMPLES),
      idempotent_stored_twice: keyedStoredTwice.slice(0, EXAMPLES),
      garbled: garbled.slice(0, EXAMPLES),
      corrupted_delivered: corruptDelivered.slice(0, EXAMPLES),
      lease_overlaps: overlaps.slice(0, EXAMPLES),
      delivered_after_ack: afterAck.slice(0, EXAMPLES),
      ...pushCheck.examples,
      ...orderCheck.examples,
      ...idCheck.examples,
      ...purgeCheck.examples,
      pause_delay: pauseCheck.examples,
      ready_too_long: readyCheck.examples,
      quiet: quietCheck.examples,
    },
  };
}

/** @typedef {ReturnType<typeof check>} CheckResult */

/**
 * @template K, V
 * @param {Map<K, V[]>} map @param {K} key @param {V} value
 */
function push(map, key, value) {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
