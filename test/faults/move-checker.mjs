// The checker's view of messages that move between queues (dead-lettering, a redrive):
// a message's stays in the queues it lives in, the figures of the moves, and the two
// checks moves change: one id stored twice (within a stay), and a delivery after a
// confirmed ack (a cut-off redrive may leave two copies that go on separately).

/** @typedef {import("./history-records.mjs").Delivery} Delivery */
/**
 * Each message's stays: runs of its deliveries in one queue other than a dead-letter
 * queue, in time order. A stay ends when the message is delivered from another queue or
 * when its attempts go down: a redrive stores a new copy whose attempts start again,
 * while a lease lost to a reset or a kill delivers the same copy at the same attempts.
 * @param {Delivery[]} deliveries
 */
export function staysOf(deliveries) {
  /** @type {Map<string, Delivery[]>} */
  const byMessage = new Map();
  for (const d of deliveries) {
    const key = d.h ?? `id:${d.id}`;
    byMessage.set(key, [...(byMessage.get(key) ?? []), d]);
  }
  /** @type {Map<Delivery, number>} */
  const stayOf = new Map();
  /**
   * Per message: its stays, how many times it left one for the dead-letter queue or a stay
   * elsewhere, and when it was first seen about to leave (the last delivery of its first stay).
   */
  /** @type {Map<string, { stays: number, deadLettered: number, firstLeftAt: number }>} */
  const stays = new Map();
  for (const [key, ds] of byMessage) {
    ds.sort((a, b) => a.ok - b.ok || a.inv - b.inv);
    let n = 0;
    let left = 0;
    let firstLeftAt = Infinity;
    /** @type {Delivery | null} */
    let prev = null;
    for (const d of ds) {
      const dlq = d.q.endsWith("-dlq");
      if (prev && (prev.q !== d.q || (!dlq && d.a < prev.a))) {
        // Leaving a stay for anywhere is a dead-lettering; arriving in a new stay is a redrive.
        if (!prev.q.endsWith("-dlq")) left++;
        firstLeftAt = Math.min(firstLeftAt, prev.inv);
      }
      if (!dlq && (!prev || prev.q !== d.q || d.a < prev.a)) n++;
      stayOf.set(d, n);
      prev = d;
    }
    stays.set(key, { stays: n, deadLettered: left, firstLeftAt });
  }
  return { stays, stayOf };
}

/**
 * @param {Array<{ inv: number, ok: number, outcome: string, moved: number }>} redrives
 * @param {Map<string, { stays: number, deadLettered: number, firstLeftAt: number }>} stays
 */
export function moveFigures(redrives, stays) {
  const all = [...stays.values()];
  return {
    redrives: redrives.length,
    redrives_ok: redrives.filter((r) => r.outcome === "ok").length,
    redrives_cut: redrives.filter((r) => r.outcome !== "ok" && r.outcome !== "fail").length,
    moved_reported: redrives.reduce((n, r) => n + r.moved, 0),
    messages_back_after_dead_letter: all.filter((x) => x.stays > 1).length,
    messages_dead_lettered_twice: all.filter((x) => x.deadLettered >= 2).length,
    most_stays: all.reduce((m, x) => Math.max(m, x.stays), 0),
  };
}

/**
 * One message id of a queue delivered from two stored copies (shard and copy) within one stay. One
 * is counted apart (`acrossCutMove`) when the message had left a queue and a redrive was
 * cut off after that and before the second row was first delivered: the redrive's copy
 * may have come back to the queue its source still sits in (dead-lettered again), so the
 * two copies meet there (at-least-once).
 * @param {Delivery[]} deliveries @param {Map<Delivery, number>} stayOf @param {Map<string, Delivery[]>} byId
 * @param {Map<string, { firstLeftAt: number }>} stays @param {Array<{ inv: number, outcome: string }>} redrives
 */
export function storedTwiceWithinStays(deliveries, stayOf, byId, stays, redrives) {
  /** Per queue, id and stay: each row and when it was first delivered. */
  const rowsOf = /** @type {Map<string, Map<string, number>>} */ (new Map());
  for (const d of deliveries) {
    if (d.s === null || d.r === null) continue;
    const key = `${d.q}\u0000${d.id}\u0000${stayOf.get(d)}`;
    const rows = rowsOf.get(key) ?? new Map();
    const row = `${d.s}#${d.r}`;
    rows.set(row, Math.min(rows.get(row) ?? Infinity, d.ok));
    rowsOf.set(key, rows);
  }
  const cutMoves = redrives.filter((r) => r.outcome !== "ok" && r.outcome !== "fail");
  const storedTwice = /** @type {Array<{ q: string, id: string, h: string | null, rows: string[] }>} */ ([]);
  let acrossCutMove = 0;
  for (const [key, rows] of rowsOf) {
    if (rows.size < 2) continue;
    const [q, id] = /** @type {[string, string, string]} */ (key.split("\u0000"));
    const h = byId.get(id)?.[0]?.h ?? null;
    const left = stays.get(h ?? `id:${id}`)?.firstLeftAt ?? Infinity;
    const second = [...rows.values()].sort((a, b) => a - b)[1] ?? Infinity;
    if (cutMoves.some((r) => r.inv > left && r.inv < second)) acrossCutMove++;
    else storedTwice.push({ q, id, h, rows: [...rows.keys()] });
  }
  return { storedTwice, acrossCutMove };
}

/**
 * Deliveries of a message whose pull was invoked after an ack of it was confirmed. One is
 * counted apart (`acrossCutMove`) when the message had left a queue and a move was cut off
 * after that and before the ack: a redrive that failed (a kill, a reset, a 5xx), or a
 * dead-lettering a kill or a storage shard reset (`faultTimes`) cut between storing the
 * message at the target and settling its source (`faultWindows`: from when each fault may
 * have struck to when it surely had). Its copies were stored at the target,
 * its source not settled, and the two go on separately (at-least-once; docs/guarantees.md,
 * "Moves"). A kept dead-letter lease outlives a restart (ordered lanes store theirs), so
 * the source copy may come again well after the dead-letter queue's copy was acked.
 * @param {Array<{ l: string, t: number }>} confirmedAcks @param {Map<string, Delivery>} byLease @param {Map<string, Delivery[]>} byId
 * @param {Map<string, { firstLeftAt: number }>} stays @param {Array<{ inv: number, outcome: string }>} redrives
 * @param {Array<[number, number]>} [faultWindows]
 */
export function deliveredAfterAck(confirmedAcks, byLease, byId, stays, redrives, faultWindows = []) {
  const afterAck =
    /** @type {Array<{ id: string, h: string | null, ackedAt: number, pulledAt: number, by: string }>} */ ([]);
  let acrossCutMove = 0;
  const cutMoves = redrives.filter((r) => r.outcome !== "ok" && r.outcome !== "fail");
  for (const { l, t } of confirmedAcks) {
    const acked = byLease.get(l);
    if (!acked) continue;
    for (const d of byId.get(acked.id) ?? []) {
      if (d.inv <= t) continue;
      const left = stays.get(d.h ?? `id:${d.id}`)?.firstLeftAt ?? Infinity;
      if (cutMoves.some((r) => r.inv > left && r.inv < t) || faultWindows.some(([from, to]) => to > left && from < t))
        acrossCutMove++;
      else afterAck.push({ id: d.id, h: d.h, ackedAt: t, pulledAt: d.inv, by: d.p });
    }
  }
  return { afterAck, acrossCutMove };
}
