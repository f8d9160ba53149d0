// The checker's purge half (checker.mjs calls it). The operator purges
// the dead-letter queue while a redrive of it runs (dlq-purger.mjs), and each purge answered ok
// names the ids it deleted. Rules:
//
//   gone stays gone  a message a purge reported deleted is never delivered by a pull invoked,
//                    or a push handler started, after that purge answered (before it, the
//                    message was still there). A redrive that moved it after the purge took
//                    it (the issue-28 race: purge said 100, redrive 200, the target got 300)
//                    fails the run. A delivery after a kill or a storage shard reset that fell
//                    since the message's first delivery is counted apart: a move cut off by
//                    it (stored at the target, source not settled) leaves a second copy of
//                    the id, which goes on separately (move-checker.mjs).
//   purged apart     a message never acked whose id an ok purge named was deleted by an
//                    operator: counted as purged, not lost. A purge whose answer never came
//                    (a kill, a timeout) may have deleted what was in the dead-letter queue
//                    then: a message never acked whose last delivery was in the dead-letter
//                    queue, or was its dead-lettering (a retry at `dead_letter_after`
//                    attempts), before such a purge was invoked, is counted as maybe purged,
//                    not lost. Any other message gone without an ack is lost, purges or not.
//                    The push checker asks the same of a message a queue() handler retried
//                    out (dead-lettered) that never came again (excusesPush).

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {{ id: string, q: string, a: number, l: string, inv: number, push?: boolean }} PurgeDelivery
 * @typedef {{ inv: number, ok: number, outcome: string, ids: Set<string>, deadLetterAfter: number }} Purge
 */

import { callsOf } from "./history.mjs";

/** How many examples of each anomaly a result keeps. */
const EXAMPLES = 20;

/** The purges of a history. @param {Op[]} ops @returns {Purge[]} */
export function purgesOf(ops) {
  const purges = /** @type {Purge[]} */ ([]);
  for (const { inv, done } of callsOf(ops, "purge")) {
    const deadLetterAfter = Number(inv.value?.dead_letter_after ?? Infinity);
    // One never answered may have deleted anything from its invoke on.
    if (!done) purges.push({ inv: inv.t, ok: Infinity, outcome: "unknown", ids: new Set(), deadLetterAfter });
    else
      purges.push({
        inv: inv.t,
        ok: done.t,
        outcome: done.type,
        ids: new Set(done.type === "ok" ? (done.value?.ids ?? []).map(String) : []),
        deadLetterAfter,
      });
  }
  return purges;
}

/**
 * @param {Purge[]} purges  purgesOf(ops)
 * @param {PurgeDelivery[]} deliveries  every delivery, pulled and pushed
 * @param {Set<string>} retryAsked  leases a retry was sent under
 * @param {number[]} cutAt  when a kill or a storage shard reset may have cut a move off
 */
export function checkPurges(purges, deliveries, retryAsked, cutAt) {
  const ok = purges.filter((p) => p.outcome === "ok");
  const unknown = purges.filter((p) => p.outcome === "unknown");
  /** The first ok purge that named each id. */
  const purgedBy = /** @type {Map<string, Purge>} */ (new Map());
  for (const p of ok) for (const id of p.ids) if (!purgedBy.has(id)) purgedBy.set(id, p);
  const firstSeen = /** @type {Map<string, number>} */ (new Map());
  for (const d of deliveries) firstSeen.set(d.id, Math.min(firstSeen.get(d.id) ?? Infinity, d.inv));
  const afterPurge = /** @type {object[]} */ ([]);
  let afterPurgeAcrossCut = 0;
  for (const d of deliveries) {
    const p = purgedBy.get(d.id);
    if (!p || d.inv <= p.ok) continue;
    const from = firstSeen.get(d.id) ?? -Infinity;
    if (cutAt.some((t) => t > from && t < d.inv)) afterPurgeAcrossCut++;
    else afterPurge.push({ id: d.id, q: d.q, attempts: d.a, purge_ok: p.ok, delivery_invoked: d.inv });
  }
  // Sets: the lost check and the push check may both ask of one message.
  const purged = /** @type {Set<string>} */ (new Set());
  const maybePurged = /** @type {Set<string>} */ (new Set());
  return {
    /**
     * Whether a message never acked (its sent id, its deliveries) was deleted by a purge, and
     * counts it: true excuses it from the lost ones.
     * @param {string | null} id @param {PurgeDelivery[]} ds
     */
    excuses(id, ds) {
      if (id !== null && purgedBy.has(id)) {
        purged.add(id);
        return true;
      }
      const last = [...ds].sort((x, y) => x.inv - y.inv).at(-1);
      if (!last || last.push) return false;
      const inDlq = last.q.endsWith("-dlq");
      if (!unknown.some((p) => p.inv > last.inv && (inDlq || (retryAsked.has(last.l) && last.a >= p.deadLetterAfter))))
        return false;
      maybePurged.add(last.id);
      return true;
    },
    /**
     * Whether a push message whose last delivery to a queue() handler was not an ack, and
     * that never came again, was deleted by a purge: it was dead-lettered, and an ok purge
     * answered after that delivery named it, or one never answered was invoked after a
     * delivery that dead-lettered it (a retry at `dead_letter_after` attempts). Counts it.
     * @param {string} id @param {{ start: number, attempts: number, outcome: string | null }} last
     */
    excusesPush(id, last) {
      const p = purgedBy.get(id);
      if (p && p.ok > last.start) {
        purged.add(id);
        return true;
      }
      if (last.outcome !== "acked" && unknown.some((u) => u.inv > last.start && last.attempts >= u.deadLetterAfter)) {
        maybePurged.add(id);
        return true;
      }
      return false;
    },
    result() {
      const failures = afterPurge.length
        ? [`${afterPurge.length} deliveries of messages a purge reported deleted, after it answered`]
        : [];
      return {
        failures,
        figures: {
          purges: purges.length,
          purges_ok: ok.length,
          purges_unknown: unknown.length,
          reported_deleted: ok.reduce((n, p) => n + p.ids.size, 0),
          purged: purged.size,
          maybe_purged: maybePurged.size,
          delivered_after_purge: afterPurge.length,
          delivered_after_purge_across_cut: afterPurgeAcrossCut,
        },
        examples: { delivered_after_purge: afterPurge.slice(0, EXAMPLES) },
      };
    },
  };
}
