// The checker's timing figures per fault (checker.mjs): how the service recovered from
// each hard kill and each storage shard reset. Kept apart from the anomalies, which are
// the checker's verdict; these only describe.

/**
 * @typedef {import("./history-records.mjs").Delivery} Delivery
 * @typedef {import("./history-records.mjs").Abort} Abort
 */

/**
 * Per kill: how long the restart took to be ready, and to the first send and the first
 * pull that succeeded after it (what clients see), and the sends left unknown by it.
 * @param {Array<{ n: number, t: number, dead: number | null }>} kills
 * @param {Array<{ n: number, inv: number, ok: number | null, readyMs: number | null }>} starts
 * @param {number[]} sendOks @param {number[]} pullOks
 * @param {Array<{ t: number, n: number }>} unknownSends
 */
export function recovery(kills, starts, sendOks, pullOks, unknownSends) {
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
      unknown_send_messages: unknownSends
        .filter((u) => u.t >= k.t && u.t <= Math.min(next, (s?.ok ?? next) + 1000))
        .reduce((n, u) => n + u.n, 0),
    };
  });
  const stat = statOf;
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
 * Per abort: when it was armed, how long until the shard was seen reset, the sends left
 * unknown and the acks with leases not applied while it was armed (up to a second after
 * the reset was seen), and the recovery time: how long after the reset was seen the
 * messages it set free came again (the last one; redeliveries of leases it ended or
 * acks it did not apply, and first deliveries of the sends it left unknown).
 * @param {Abort[]} aborts
 * @param {Array<{ t: number, n: number }>} unknownSends @param {Array<{ t: number, n: number }>} staleAcks
 * @param {Map<Abort, number[]>} cameAgain
 */
export function abortFigures(aborts, unknownSends, staleAcks, cameAgain) {
  const each = aborts.map((a) => {
    const end = (a.ok ?? a.inv) + 1000;
    const sum = (/** @type {Array<{ t: number, n: number }>} */ xs) =>
      xs.filter((x) => x.t >= a.inv && x.t <= end).reduce((n, x) => n + x.n, 0);
    const again = cameAgain.get(a) ?? [];
    return {
      n: a.n,
      kind: a.kind,
      shard: a.shard,
      at_ms: Math.round(a.inv),
      fired: a.fired,
      armed_to_reset_ms: a.fired && a.ok !== null ? Math.round(a.ok - a.inv) : null,
      unknown_send_messages: sum(unknownSends),
      acks_not_applied: sum(staleAcks),
      messages_came_again: again.length,
      // Seen by polling every 25 ms: a message may come again before the reset is seen.
      reset_to_last_came_again_ms: again.length ? Math.max(0, Math.round(Math.max(...again))) : null,
    };
  });
  const kinds = [...new Set(aborts.map((a) => a.kind))];
  return {
    count: aborts.length,
    fired: aborts.filter((a) => a.fired).length,
    by_kind: Object.fromEntries(
      kinds.map((k) => [
        k,
        { count: each.filter((e) => e.kind === k).length, fired: each.filter((e) => e.kind === k && e.fired).length },
      ]),
    ),
    unknown_send_messages: each.reduce((n, e) => n + e.unknown_send_messages, 0),
    acks_not_applied: each.reduce((n, e) => n + e.acks_not_applied, 0),
    messages_came_again: each.reduce((n, e) => n + e.messages_came_again, 0),
    reset_to_last_came_again_ms: statOf(each.map((e) => e.reset_to_last_came_again_ms)),
    each,
  };
}

/** Median, max and count of the known values; null when none is. @param {Array<number | null>} xs */
export function statOf(xs) {
  const v = /** @type {number[]} */ (xs.filter((x) => x !== null)).sort((a, b) => a - b);
  if (!v.length) return null;
  return {
    median: /** @type {number} */ (v[Math.floor((v.length - 1) / 2)]),
    max: /** @type {number} */ (v[v.length - 1]),
    n: v.length,
  };
}
