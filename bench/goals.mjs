// The latency and throughput goals, read off a report's rows (medians over the runs), each marked met or not met.
// Throughput against the simulator's plain w1: w1 on shardq at least 1.2x, w1b (w1 through
// batchingQueue) at least 3x. Latency against the simulator at the same steady rate, at any
// shard count (w4, w7-1, w7-12): end-to-end p50 at most 2x the simulator's and at most 100 ms,
// p99 at most 3x.
// The ordered lanes' (w8, bench/ordered.mjs): ordered sends and deliveries at least 0.5x
// the unordered ones of the same runs, and a hot key at least 1 batch per consumer round trip.
// Neither is judged on runs where the service refused orderingKey or did not keep a key's
// order: those say what they measured instead.

/** @typedef {{ median: number, min?: number, max?: number, n?: number }} Stat */
/** @typedef {{ workload: string, metric: string, simulator: Stat | null, shardq: Stat | null }} Row */

/** @param {Row[]} rows */
export function goalsMarkdown(rows) {
  const median = (
    /** @type {string} */ w,
    /** @type {string} */ metric,
    /** @type {"simulator" | "shardq"} */ system,
  ) => rows.find((r) => r.workload === w && r.metric === metric)?.[system]?.median;
  const base = median("w1", "delivered_msgs_per_s", "simulator");
  const throughput = /** @type {Array<[string, number]>} */ ([
    ["w1", 1.2],
    ["w1b", 3],
  ]).flatMap(([w, goal]) => {
    const x = median(w, "delivered_msgs_per_s", "shardq");
    return base && x
      ? [`- ${w} on shardq: ${round(x / base)}x the simulator's w1 (goal ${goal}x: ${verdict(x / base >= goal)})`]
      : [];
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
  const ordered = orderedGoals(rows);
  return [
    ...(throughput.length ? ["### Throughput against the simulator's w1", "", ...throughput] : []),
    ...(latency.length
      ? [...(throughput.length ? [""] : []), "### Latency against the simulator, at any shard count", "", ...latency]
      : []),
    ...(ordered.length
      ? [...(throughput.length || latency.length ? [""] : []), "### Ordered lanes", "", ...ordered]
      : []),
  ].join("\n");
}

/**
 * The two goals of ordered lanes, from w8's rows (shardq only). A run where the service refused
 * orderingKey sent without it (ordering_sent 0); a run whose sink saw a key's messages out of
 * order or two batches of one key at once did not get ordering either, and neither did w8's
 * pair when its hot key did not.
 * @param {Row[]} rows
 */
function orderedGoals(rows) {
  const stat = (/** @type {string} */ w, /** @type {string} */ metric) =>
    rows.find((r) => r.workload === w && r.metric === metric)?.shardq ?? undefined;
  const range = (/** @type {Stat | undefined} */ s) =>
    s ? `${s.median}${s.n && s.n > 1 ? ` (${s.min}–${s.max})` : ""}` : "–";
  /** Why the goal cannot be judged on these runs, or null when every run was ordered. @param {string} w */
  const unordered = (w) => {
    const sent = stat(w, "ordering_sent");
    if (!sent) return null;
    if ((sent.max ?? sent.median) === 0)
      return "the service refused orderingKey in every run, so they all sent without it";
    if ((sent.min ?? sent.median) === 0) return "the service refused orderingKey in some runs";
    const late = stat(w, "order_violations")?.max ?? 0;
    if (late > 0) return `the sink received up to ${late} messages after a later one of their key in a run`;
    const overlaps = stat(w, "key_overlaps")?.max ?? 0;
    if (w === "w8-hot" && overlaps > 0) return `the key was in up to ${overlaps + 1} batches at once`;
    return null;
  };
  const lines = [];
  const ratio = stat("w8", "ordered_to_unordered");
  if (ratio) {
    const fig = (/** @type {string} */ m) => `${range(stat("w8", m))} against ${range(stat("w8-unordered", m))}`;
    const keys = stat("w8", "keys")?.median;
    // A key's messages are 10,000 apart in w8, which unordered delivery seldom reorders: the hot key is the check that tells.
    const hotWhy = unordered("w8-hot");
    const why = unordered("w8") ?? (hotWhy ? `in w8-hot ${hotWhy}` : null);
    lines.push(
      `- w8, ${keys?.toLocaleString("en-US") ?? "?"} keys: delivered ${fig("delivered_msgs_per_s")} msg/s unordered in the same runs, ` +
        `ordered / unordered ${range(ratio)} (goal at least 0.5: ${why ? `not measured, ${why}` : verdict(ratio.median >= 0.5)}); ` +
        `CPU ${fig("cpu_us_per_msg")} µs per message, e2e p50 ${fig("e2e_p50_ms")} ms, p99 ${fig("e2e_p99_ms")} ms, rows written per message ${fig("rows_written_per_msg")}`,
    );
  }
  const hot = stat("w8-hot", "batches_per_round_trip");
  if (hot) {
    const f = (/** @type {string} */ m) => range(stat("w8-hot", m));
    const why =
      unordered("w8-hot") ??
      ((stat("w8-hot", "control_max_concurrent_batches")?.max ?? 1) > 1
        ? "the control had more than one batch at a time"
        : null);
    lines.push(
      `- w8-hot, one key: ${f("batches_per_round_trip")} batches per consumer round trip (goal at least 1: ${why ? `not measured, ${why}` : verdict(hot.median >= 1)}); ` +
        `a batch every ${f("gap_ms")} ms against the round trip's ${f("round_trip_ms")} ms (handler ${f("handler_ms")} ms, then ${f("turnaround_ms")} ms to the next batch, ` +
        `${f("control_turnaround_ms")} ms in the control); ${f("batch_size_p50")} messages a batch (median), full batches ${f("full_batches_fraction")} of all but the last`,
    );
  }
  return lines;
}

/** @param {boolean} ok */
const verdict = (ok) => (ok ? "met" : "not met");

/** @param {number} x */
const round = (x) => Math.round(x * 100) / 100;
