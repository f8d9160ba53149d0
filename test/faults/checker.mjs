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
//   outbox        each increment a producer object committed applied exactly once by the
//                 consumer objects, through shardq/outbox and shardq/inbox (outbox-checker.mjs)
//
// Valid when: nothing lost, nothing unexpected, no wrong id, no message id stored twice,
// no lease overlap while the service and the shard stayed up, no delivery after a
// confirmed ack, no ordering key's messages out of order, nothing a purge reported deleted
// delivered after it, the queues drained, and the
// fault schedule ran (every abort fired).
//
// Reading the history into records is history-records.mjs's; the sends' rules are
// send-checker.mjs's, the redeliveries' and lease overlaps' redelivery-checker.mjs's.

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {import("./history-records.mjs").Delivery} Delivery
 */

import { controlFaults } from "./control-figures.mjs";
import { checkCorruption } from "./corruption-checker.mjs";
import { abortFigures, recovery } from "./figures.mjs";
import { readRecords } from "./history-records.mjs";
import { deliveredAfterAck, moveFigures, staysOf, storedTwiceWithinStays } from "./move-checker.mjs";
import { checkIds } from "./id-checker.mjs";
import { checkOrder } from "./order-checker.mjs";
import { checkOutbox } from "./outbox-checker.mjs";
import { checkPausesAndDelays } from "./pause-delay.mjs";
import { checkPush } from "./push-checker.mjs";
import { checkPurges, purgesOf } from "./purge-checker.mjs";
import { checkQuiet } from "./quiet-phases.mjs";
import { checkReady } from "./ready-checker.mjs";
import { checkRedeliveries } from "./redelivery-checker.mjs";
import { checkSends } from "./send-checker.mjs";

/** How many examples of each anomaly a result keeps. */
const EXAMPLES = 20;

/**
 * @param {Op[]} ops
 * @param {{ toleranceMs?: number }} [opts]
 */
export function check(ops, opts = {}) {
  const tol = opts.toleranceMs ?? 250;
  const {
    sends,
    deliveries,
    pushed,
    settledFrom,
    retryAsked,
    confirmedAcks,
    mayBeAcked,
    acks,
    staleAcks,
    kills,
    starts,
    aborts,
    corrupted,
    redrives,
    sendOks,
    pullOks,
    unknownSends,
    incomplete,
    opCounts,
    drained,
    plan,
  } = readRecords(ops);

  const byH = /** @type {Map<string, Delivery[]>} */ (new Map());
  const byId = /** @type {Map<string, Delivery[]>} */ (new Map());
  const byLease = /** @type {Map<string, Delivery>} */ (new Map());
  for (const d of deliveries) {
    if (d.h !== null) push(byH, d.h, d);
    push(byId, d.id, d);
    byLease.set(d.l, d);
  }

  // Sends.
  const confirmedLeases = new Set(confirmedAcks.map((a) => a.l));
  // Purges of the dead-letter queue (purge-checker.mjs): what they deleted is not lost.
  const purgedIds = new Set(purgesOf(ops).flatMap((p) => [...p.ids]));
  const purges = checkPurges(purgesOf(ops), deliveries, retryAsked, [
    ...kills.map((k) => k.t),
    ...aborts.filter((a) => a.fired && a.ok !== null).map((a) => /** @type {number} */ (a.ok)),
  ]);
  const {
    sent,
    lost,
    lostAfterDelivery,
    recovered,
    unknownNeverDelivered,
    wrongId,
    storedTwice,
    keyedRetried,
    keyedStoredTwice,
    poison,
    neverConfirmed,
    unexpected,
  } = checkSends({
    sends,
    byH,
    deliveries,
    incomplete,
    mayBeAcked,
    confirmedLeases,
    corrupted,
    purgedIds,
    purges,
  });

  const { stays, stayOf } = staysOf(deliveries);
  const { storedTwice: storedTwiceSameId, acrossCutMove: storedTwiceAcrossCutMove } = storedTwiceWithinStays(
    deliveries,
    stayOf,
    byId,
    stays,
    redrives,
  );

  // Redeliveries and their causes; lease overlaps.
  const killTimes = kills.map((k) => k.t);
  const fired = aborts.filter((a) => a.fired && a.ok !== null);
  const { causes, overlaps, overlapsAcrossKill, overlapsAcrossAbort, cameAgain } = checkRedeliveries({
    sends,
    byH,
    byId,
    settledFrom,
    retryAsked,
    killTimes,
    fired,
    tol,
  });

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
  const outboxCheck = checkOutbox(ops);
  const figures = {
    /** @type {any} the outbox and inbox workload's (outbox-checker.mjs), null without one */
    outbox: outboxCheck.figures,
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
    poison: { sent: sent.poison, ...poison },
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
  for (const c of [
    control,
    pushCheck,
    orderCheck,
    idCheck,
    purgeCheck,
    pauseCheck,
    readyCheck,
    quietCheck,
    outboxCheck,
  ])
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
      ...outboxCheck.examples,
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
