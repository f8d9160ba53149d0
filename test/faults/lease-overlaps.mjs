// The checker's lease-overlap rule (redelivery-checker.mjs calls it for each message's pull deliveries):
// two deliveries of one message in one queue whose leases were held at once, one granted
// (between its pull's invoke and answer) while the other was certainly held, or both
// certainly held at some moment, beyond the clock slack `tol`. Across a hard kill or a
// reset of the message's shard it is counted apart: those end leases held in memory.

/**
 * @typedef {import("./history-records.mjs").Delivery} Delivery
 * @param {Delivery[]} ds  one message's pull deliveries, sorted by answer
 * @param {{ heldUntil: (d: Delivery) => number, tol: number, killBetween: (from: number, to: number) => boolean,
 *   abortBetween: (shard: string | null, from: number, to: number) => unknown, brief: (d: Delivery) => object }} o
 */
export function leaseOverlaps(ds, { heldUntil, tol, killBetween, abortBetween, brief }) {
  const overlaps =
    /** @type {Array<{ id: string, h: string | null, first: object, second: object, overlapMs: number }>} */ ([]);
  let acrossKill = 0;
  let acrossAbort = 0;
  for (let i = 0; i < ds.length; i++) {
    for (let j = i + 1; j < ds.length; j++) {
      const a = /** @type {Delivery} */ (ds[i]);
      const b = /** @type {Delivery} */ (ds[j]);
      // Two queues hold two copies (store at the target, then settle the source): a lease is on one.
      if (a.q !== b.q) continue;
      const ea = heldUntil(a);
      const eb = heldUntil(b);
      const shared = Math.min(ea, eb) - Math.max(a.ok, b.ok);
      const grantedInB = a.inv >= b.ok && a.ok <= eb - tol;
      const grantedInA = b.inv >= a.ok && b.ok <= ea - tol;
      if (!grantedInA && !grantedInB && shared <= tol) continue;
      if (killBetween(Math.min(a.inv, b.inv), Math.max(a.ok, b.ok))) {
        acrossKill++;
        continue;
      }
      if (abortBetween(a.s, Math.min(a.inv, b.inv), Math.max(a.ok, b.ok))) {
        acrossAbort++;
        continue;
      }
      overlaps.push({
        id: a.id,
        h: a.h,
        first: brief(a),
        second: brief(b),
        overlapMs: Math.round(Math.max(shared, grantedInA ? ea - b.ok : 0, grantedInB ? eb - a.ok : 0)),
      });
    }
  }
  return { overlaps, acrossKill, acrossAbort };
}
