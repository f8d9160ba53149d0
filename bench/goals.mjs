// Issue 17's goals, read off a report's rows (medians over the runs), each marked met or not met.
// Throughput against the simulator's plain w1: w1 on shardq at least 1.2x, w1b (w1 through
// batchingQueue) at least 3x. Latency against the simulator at the same steady rate, at any
// shard count (w4, w7-1, w7-12): end-to-end p50 at most 2x the simulator's and at most 100 ms,
// p99 at most 3x.

/** @typedef {{ median: number }} Stat */
/** @typedef {{ workload: string, metric: string, simulator: Stat | null, shardq: Stat | null }} Row */

/** @param {Row[]} rows */
export function goalsMarkdown(rows) {
  const median = (/** @type {string} */ w, /** @type {string} */ metric, /** @type {"simulator" | "shardq"} */ system) => rows.find((r) => r.workload === w && r.metric === metric)?.[system]?.median;
  const verdict = (/** @type {boolean} */ ok) => (ok ? "met" : "not met");
  const base = median("w1", "delivered_msgs_per_s", "simulator");
  const throughput = /** @type {Array<[string, number]>} */ ([["w1", 1.2], ["w1b", 3]]).flatMap(([w, goal]) => {
    const x = median(w, "delivered_msgs_per_s", "shardq");
    return base && x ? [`- ${w} on shardq: ${round(x / base)}x the simulator's w1 (goal ${goal}x: ${verdict(x / base >= goal)})`] : [];
  });
  const latency = ["w4", "w7-1", "w7-12"].flatMap((w) => {
    const p50 = median(w, "e2e_p50_ms", "shardq");
    const p99 = median(w, "e2e_p99_ms", "shardq");
    const s50 = median(w, "e2e_p50_ms", "simulator");
    const s99 = median(w, "e2e_p99_ms", "simulator");
    if (p50 === undefined || p99 === undefined || !s50 || !s99) return [];
    return [
      `- ${w}: e2e p50 ${p50} ms, ${round(p50 / s50)}x the simulator's ${s50} ms (goal at most 2x and 100 ms: ${verdict(p50 <= 2 * s50 && p50 <= 100)}); ` +
        `p99 ${p99} ms, ${round(p99 / s99)}x its ${s99} ms (goal at most 3x: ${verdict(p99 <= 3 * s99)})`,
    ];
  });
  return [
    ...(throughput.length ? ["### Throughput against the simulator's w1", "", ...throughput] : []),
    ...(latency.length ? [...(throughput.length ? [""] : []), "### Latency against the simulator, at any shard count", "", ...latency] : []),
  ].join("\n");
}

/** @param {number} x */
const round = (x) => Math.round(x * 100) / 100;
