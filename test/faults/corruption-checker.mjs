// The checker's rules for the corrupt fault (checker.mjs): a message whose stored body
// the nemesis corrupted is never delivered from a pull invoked after the corruption,
// no delivered body is garbled, and the quarantined total the shards report is every
// corrupted message but those a consumer already held and acked after the corruption
// (deleted under its lease, never read again).

/**
 * @param {Map<string, { inv: number, ok: number }>} corrupted  message id -> when the corruption was invoked and answered
 * @param {import("./history-records.mjs").Delivery[]} deliveries
 * @param {Array<{ l: string, t: number }>} confirmedAcks
 * @param {Map<string, import("./history-records.mjs").Delivery[]>} byId
 * @param {Map<string, import("./history-records.mjs").Delivery>} byLease
 * @param {any} drained  the harness's "drained" phase, with the quarantined total it read
 */
export function checkCorruption(corrupted, deliveries, confirmedAcks, byId, byLease, drained) {
  /** @type {Array<{ id: string, h: string | null, corruptedAt: number, pulledAt: number }>} */
  const corruptDelivered = [];
  for (const [id, c] of corrupted)
    for (const d of byId.get(id) ?? [])
      if (d.inv > c.ok) corruptDelivered.push({ id, h: d.h, corruptedAt: c.inv, pulledAt: d.inv });
  const garbled = deliveries.filter((d) => d.g).map((d) => ({ id: d.id, h: d.h, by: d.p, pulledAt: d.inv }));
  const ackedAfterCorruption = new Set();
  for (const a of confirmedAcks) {
    const d = byLease.get(a.l);
    const c = d && corrupted.get(d.id);
    if (d && c && d.inv < c.ok && a.t > c.inv) ackedAfterCorruption.add(d.id);
  }
  const quarantine = {
    corrupted: corrupted.size,
    expected: corrupted.size - ackedAfterCorruption.size,
    reported: /** @type {number | null} */ (drained?.quarantined ?? null),
    never_delivered: [...corrupted.keys()].filter((id) => !byId.has(id)).length,
    delivered_after_corruption: corruptDelivered.length,
    garbled_deliveries: garbled.length,
  };
  return { corruptDelivered, garbled, quarantine };
}
