// The checker's send half (checker.mjs calls it): what became of each message a send
// logged. Lost (acknowledged, never acked by the end), recovered (left unknown, delivered
// all the same), delivered under another id than its send returned, stored under two ids
// (a failure for one sent again with its Idempotency-Key), the poison messages'
// dead-letterings; and the deliveries nobody sent (unexpected).

/**
 * @typedef {import("./history-records.mjs").Delivery} Delivery
 * @typedef {import("./history-records.mjs").Sent} Sent
 */

/**
 * @param {{ sends: Map<string, Sent>, byH: Map<string, Delivery[]>, deliveries: Delivery[], incomplete: number, mayBeAcked: Set<string>,
 *   confirmedLeases: Set<string>, corrupted: Map<string, { inv: number, ok: number }>, purgedIds: Set<string>,
 *   purges: ReturnType<typeof import("./purge-checker.mjs").checkPurges> }} o
 *   confirmedLeases: the leases an ack was confirmed under; purgedIds, purges: the purges of the dead-letter queue (purge-checker.mjs)
 */
export function checkSends({
  sends,
  byH,
  deliveries,
  incomplete,
  mayBeAcked,
  confirmedLeases,
  corrupted,
  purgedIds,
  purges,
}) {
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

  // Deliveries nobody sent.
  const unexpected = /** @type {Array<{ h: string | null, id: string, why: string }>} */ ([]);
  for (const d of deliveries) {
    const s = d.h === null ? undefined : sends.get(d.h);
    if (d.h === null) unexpected.push({ h: null, id: d.id, why: "no harness id in the body" });
    else if (!s) unexpected.push({ h: d.h, id: d.id, why: "never sent" });
    else if (s.outcome === "fail") unexpected.push({ h: d.h, id: d.id, why: "its send certainly failed" });
  }
  return {
    sent,
    lost,
    lostAfterDelivery,
    recovered,
    unknownNeverDelivered,
    wrongId,
    storedTwice,
    keyedRetried,
    keyedStoredTwice,
    poison: {
      dead_lettered: poisonDeadLettered,
      not_dead_lettered: poisonNotDeadLettered,
      quarantined: poisonQuarantined,
      others_dead_lettered: deadLetteredOthers,
    },
    neverConfirmed,
    unexpected,
  };
}
