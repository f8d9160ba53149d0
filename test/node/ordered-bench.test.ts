// w8's figures and goal lines (bench/ordered.mjs, bench/goals.mjs), from made-up runs: no
// stack is started. The benchmark itself runs in compare.test.ts.
import { describe, expect, it } from "vitest";
import { goalsMarkdown } from "../../bench/goals.mjs";
import { pairRatio, timelineFigures } from "../../bench/ordered.mjs";

type Figures = Record<string, number | [number, number]>;
/** A summary row per figure, as compare-report.mjs's summarize() makes them, shardq only: one run, or [min, max] of three. */
function rows(byWorkload: Record<string, Record<string, number | [number, number]>>) {
  return Object.entries(byWorkload).flatMap(([workload, figures]) =>
    Object.entries(figures).map(([metric, v]) => {
      const [min, max] = Array.isArray(v) ? v : [v, v];
      return {
        workload,
        metric,
        simulator: null,
        shardq: { median: Array.isArray(v) ? (min + max) / 2 : v, min, max, n: Array.isArray(v) ? 3 : 1 },
      };
    }),
  );
}
const pair = (ordered: Record<string, number>, extra: Figures = {}) => ({
  w8: {
    keys: 10_000,
    delivered_msgs_per_s: 9000,
    ordered_to_unordered: ordered.ratio!,
    ordering_sent: ordered.sent!,
    order_violations: ordered.late ?? 0,
    cpu_us_per_msg: 50,
    e2e_p50_ms: 120,
    e2e_p99_ms: 300,
    rows_written_per_msg: 0.03,
    ...extra,
  },
  "w8-unordered": {
    delivered_msgs_per_s: 15000,
    cpu_us_per_msg: 35,
    e2e_p50_ms: 100,
    e2e_p99_ms: 200,
    rows_written_per_msg: 0.02,
    order_violations: 20_000,
  },
});
const hot = (f: Figures) => ({
  "w8-hot": {
    ordering_sent: 1,
    order_violations: 0,
    key_overlaps: 0,
    control_max_concurrent_batches: 1,
    gap_ms: 25,
    round_trip_ms: 25,
    handler_ms: 21,
    turnaround_ms: 4,
    control_turnaround_ms: 4,
    batch_size_p50: 100,
    full_batches_fraction: 1,
    ...f,
  },
});

describe("w8's goals", () => {
  it("judges the ratio of the same runs' pair when every run sent the key and the sink saw each key in order", () => {
    expect(goalsMarkdown(rows(pair({ ratio: 0.6, sent: 1 })))).toMatch(
      /w8, 10,000 keys: .*ordered \/ unordered 0\.6 .*\(goal at least 0\.5: met\)/,
    );
    expect(goalsMarkdown(rows(pair({ ratio: 0.4, sent: 1 })))).toContain("(goal at least 0.5: not met)");
  });

  it("does not judge runs where the service refused orderingKey or did not keep a key's order", () => {
    expect(goalsMarkdown(rows(pair({ ratio: 0.9, sent: 0 })))).toContain(
      "not measured, the service refused orderingKey in every run",
    );
    const some = rows(pair({ ratio: 0.9, sent: 1 }));
    some.find((r) => r.metric === "ordering_sent")!.shardq!.min = 0;
    expect(goalsMarkdown(some)).toContain("not measured, the service refused orderingKey in some runs");
    expect(goalsMarkdown(rows(pair({ ratio: 0.9, sent: 1, late: 12 })))).toContain(
      "not measured, the sink received up to 12 messages after a later one of their key",
    );
    // w8's keys seldom come close enough for unordered delivery to reorder them: the hot key's run is the check.
    const ignored = goalsMarkdown(
      rows({ ...pair({ ratio: 0.9, sent: 1 }), ...hot({ batches_per_round_trip: 1.7, key_overlaps: 6 }) }),
    );
    expect(ignored).toContain("(goal at least 0.5: not measured, in w8-hot the key was in up to 7 batches at once)");
  });

  it("judges the hot key's batches per round trip, unless the key was in two batches at once or the control was not one at a time", () => {
    expect(goalsMarkdown(rows(hot({ batches_per_round_trip: 1.01 })))).toMatch(
      /w8-hot, one key: 1\.01 batches per consumer round trip \(goal at least 1: met\); a batch every 25 ms against the round trip's 25 ms/,
    );
    expect(goalsMarkdown(rows(hot({ batches_per_round_trip: [0.98, 1.04] })))).toContain(
      "w8-hot, one key: 1.01 (0.98–1.04) batches per consumer round trip (goal at least 1: met)",
    );
    expect(goalsMarkdown(rows(hot({ batches_per_round_trip: 0.03, gap_ms: 1025 })))).toContain(
      "(goal at least 1: not met)",
    );
    expect(goalsMarkdown(rows(hot({ batches_per_round_trip: 1.7, key_overlaps: 6 })))).toContain(
      "not measured, the key was in up to 7 batches at once",
    );
    expect(goalsMarkdown(rows(hot({ batches_per_round_trip: 1, control_max_concurrent_batches: 3 })))).toContain(
      "not measured, the control had more than one batch at a time",
    );
  });

  it("prints nothing for ordered lanes when w8 did not run", () => {
    expect(goalsMarkdown([])).not.toContain("Ordered lanes");
  });
});

describe("w8's figures", () => {
  it("reads a key's cadence off the sink's timeline: means over the drain, a batch still running counted in the gaps only", () => {
    const f = timelineFigures(
      [
        [46, 66, 100],
        [0, 20, 100],
        [23, 43, 100],
        [1090, -1, 40],
      ],
      100,
    );
    // Starts 0, 23, 46, 1090: gaps 23, 23, 1044; returns at 20, 43, 66: turnarounds 3, 3, 1024; the last one still running.
    expect(f).toEqual({
      batches: 4,
      gap_ms: 363.3,
      handler_ms: 20,
      turnaround_ms: 343.3,
      batch_size_p50: 100,
      full_batches_fraction: 1,
    });
    expect(
      timelineFigures(
        [
          [0, 20, 100],
          [25, 45, 60],
          [50, 70, 100],
          [75, 95, 30],
        ],
        100,
      ).full_batches_fraction,
    ).toBe(0.667);
  });

  it("takes the pair's ratio from one run's halves", () => {
    expect(pairRatio({ delivered_msgs_per_s: 6000 }, { delivered_msgs_per_s: 12000 })).toBe(0.5);
    expect(pairRatio({ delivered_msgs_per_s: 6000 }, { delivered_msgs_per_s: 0 })).toBeNull();
  });
});
