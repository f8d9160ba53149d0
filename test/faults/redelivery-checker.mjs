// The checker's redelivery half (checker.mjs calls it): each pull delivery of a message after
// its first, with its cause (a retry, a dead-lettering, a kill, a storage shard reset, an
// expired lease, or none of those), the lease overlaps among them (lease-overlaps.mjs), and,
// per reset, how long after it was seen each message it set free came again.

/**
 * @typedef {import("./history-records.mjs").Delivery} Delivery
 * @typedef {import("./history-records.mjs").Abort} Abort
 * @typedef {import("./history-records.mjs").Sent} Sent
 */

import { leaseOverlaps } from "./lease-overlaps.mjs";

/**
 * @param {{ sends: Map<string, Sent>, byH: Map<string, Delivery[]>, byId: Map<string, Delivery[]>, settledFrom: Map<string, number>,
 *   retryAsked: Set<string>, killTimes: number[], fired: Abort[], tol: number }} o
 *   killTimes: when each kill was invoked; fired: the aborts that fired, each answered
 */
export function checkRedeliveries({ sends, byH, byId, settledFrom, retryAsked, killTimes, fired, tol }) {
  const causes = { retried: 0, dead_lettered: 0, lease_expired: 0, kill: 0, abort: 0, other: 0 };
  const overlaps =
    /** @type {Array<{ id: string, h: string | null, first: object, second: object, overlapMs: number }>} */ ([]);
  let overlapsAcrossKill = 0;
  let overlapsAcrossAbort = 0;
  const killBetween = (/** @type {number} */ from, /** @type {number} */ to) =>
    killTimes.some((t) => t > from && t < to);
  // An abort happened somewhere between its invoke and its completion, to one shard only.
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
  return { causes, overlaps, overlapsAcrossKill, overlapsAcrossAbort, cameAgain };
}
