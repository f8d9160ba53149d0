// The check of the outbox and inbox workload (outbox-workload.mjs), from the history alone:
// for every producer, the increments its object committed (its counter at the end) were each
// applied exactly once by the consumer objects, and nothing else was. In detail, per producer
// with counter T: the seqs applied are exactly 1..T (none missing: "lost"; none above T: an
// uncommitted increment's message), each applied once (the balance counts T applications:
// "applied twice"), a keyed producer's in order, its outbox empty; and T is at least every
// total an increment was answered with (the counter itself kept what it acknowledged).

/** @typedef {import("./history.mjs").Op} Op */

/**
 * @param {Op[]} ops
 * @returns {{ failures: string[], figures: Record<string, unknown> | null, examples: Record<string, unknown[]> }}
 */
export function checkOutbox(ops) {
  const plan = ops.find((o) => o.f === "outbox-plan")?.value;
  if (!plan) return { failures: [], figures: null, examples: {} };
  const final = ops.find((o) => o.f === "final" && o.p === "outbox")?.value;
  /** @type {string[]} */
  const failures = [];
  /** @type {Array<Record<string, unknown>>} */
  const wrong = [];
  /** The highest total each producer's increments were answered with. */
  const answered = new Map();
  let ok = 0;
  let unknown = 0;
  for (const o of ops) {
    if (o.f !== "increment" || o.type === "invoke") continue;
    if (o.type === "ok") {
      ok++;
      const p = o.p.replace(/^outbox-/, "");
      answered.set(p, Math.max(answered.get(p) ?? 0, o.value.total));
    } else unknown++;
  }
  const kills = ops.filter((o) => o.f === "outbox-kill" && o.type === "ok").length;
  if (!final?.producers) {
    failures.push("outbox: the final state of the producers and accounts was never read");
    return { failures, figures: { increments_ok: ok, increments_unknown: unknown, kills }, examples: {} };
  }
  if (!final.settled) failures.push(`outbox: not settled ${Math.round(final.waited_ms / 1000)} s after the load`);
  const sum = { committed: 0, applied: 0, duplicates: 0, refused: 0, answers_lost: 0, resets: 0, keyed: 0, id_mode: 0 };
  let lost = 0;
  let twice = 0;
  let extra = 0;
  let disorder = 0;
  for (const s of final.producers) {
    const t = s.counter.total;
    const b = s.balance ?? { total: 0, distinct: 0, maxTimes: 0, minSeq: 0, maxSeq: 0, outOfOrder: 0, duplicates: 0 };
    sum.committed += t;
    sum.applied += b.distinct;
    sum.duplicates += b.duplicates;
    sum.refused += s.counter.faults.refused;
    sum.answers_lost += s.counter.faults.answersLost;
    sum.resets += s.counter.faults.resets;
    if (s.keyed) sum.keyed++;
    if (s.ids === "id") sum.id_mode++;
    const inRange = b.distinct === 0 || (b.minSeq === 1 && b.maxSeq <= t);
    const problems = [];
    if (b.distinct < t || (b.distinct > 0 && b.minSeq !== 1))
      problems.push(`${t - b.distinct} committed increments never applied`);
    if (b.total !== b.distinct || b.maxTimes > 1)
      problems.push(`${b.total - b.distinct} applications of a seq applied before`);
    if (!inRange || b.distinct > t) problems.push(`seqs applied up to ${b.maxSeq} with the counter at ${t}`);
    if (s.keyed && b.outOfOrder > 0) problems.push(`${b.outOfOrder} applied before an earlier seq of the key`);
    if (s.counter.pending > 0) problems.push(`${s.counter.pending} messages still in the outbox`);
    if ((answered.get(s.producer) ?? 0) > t)
      problems.push(`an increment was answered ${answered.get(s.producer)}, the counter is ${t}`);
    lost += Math.max(0, t - b.distinct);
    twice += Math.max(0, b.total - b.distinct);
    extra += Math.max(0, b.maxSeq - t);
    if (s.keyed) disorder += b.outOfOrder;
    if (problems.length) wrong.push({ producer: s.producer, counter: s.counter, balance: b, problems });
  }
  if (lost) failures.push(`outbox: ${lost} committed increments never applied`);
  if (twice) failures.push(`outbox: ${twice} effects applied twice`);
  if (extra) failures.push(`outbox: ${extra} messages applied beyond the committed counter`);
  if (disorder) failures.push(`outbox: ${disorder} keyed effects applied out of order`);
  if (wrong.length && !lost && !twice && !extra && !disorder)
    failures.push(`outbox: ${wrong.length} producers not as committed (${wrong.map((w) => w.producer).join(", ")})`);
  if (ok === 0) failures.push("outbox: no increment was acknowledged: the workload tested nothing");
  return {
    failures,
    figures: {
      producers: final.producers.length,
      increments_ok: ok,
      increments_unknown: unknown,
      kills,
      ...sum,
      exact: failures.length === 0,
      settled_ms: final.waited_ms,
    },
    examples: { outbox: wrong.slice(0, 20) },
  };
}
