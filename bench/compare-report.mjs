// The report of `npm run bench -- compare`: the runs summed up (per workload and figure, each
// system's median with min and max, and shardq's ratio to the simulator), its Markdown with
// the cost, w6, ceiling and goals sections, the charts, and the results files.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { ceilingMarkdown } from "./ceiling.mjs";
import { latencyChart, throughputChart, timelineChart } from "./charts.mjs";
import { costMarkdown } from "./cost.mjs";
import { goalsMarkdown } from "./goals.mjs";
import { W8_METRICS } from "./ordered.mjs";
import { W6, w6Markdown } from "./scaling.mjs";

/**
 * Writes the results of a run into `outDir`: <date>.json (the runs and the summary), .md and
 * the charts; returns the files and the summary's rows.
 * @param {string} outDir
 * @param {{ quick: boolean, repeats: number, limit: Parameters<typeof summarize>[3], workloads: Parameters<typeof summarize>[0], runs: any[], timelines: any[] }} r
 */
export function writeResults(outDir, { quick, repeats, limit, workloads, runs, timelines }) {
  const report = summarize(workloads, runs, quick, limit);
  mkdirSync(outDir, { recursive: true });
  const stamp = new Date().toISOString().slice(0, 19).replace(/[:T]/g, "-");
  const files = {
    json: join(outDir, `${stamp}.json`),
    md: join(outDir, `${stamp}.md`),
    svg: join(outDir, `${stamp}.svg`),
  };
  writeFileSync(
    files.json,
    `${JSON.stringify({ date: new Date().toISOString(), quick, repeats, ceiling: limit, workloads, runs, timelines, summary: report.rows }, null, 2)}\n`,
  );
  const charts = writeCharts(join(outDir, stamp), report.rows, runs, timelines);
  writeFileSync(files.md, `${report.markdown}\n${charts}\n`);
  console.log(`\n${report.markdown}\nwritten: ${files.json}, ${files.md} and its charts`);
  return { files, rows: report.rows };
}

/**
 * Writes the Markdown and SVG of a results JSON again (after a change to how they are drawn).
 * @param {string} jsonFile
 */
export function rerender(jsonFile) {
  const data = JSON.parse(readFileSync(jsonFile, "utf8"));
  const report = summarize(data.workloads, data.runs, data.quick, data.ceiling ?? null);
  const stem = jsonFile.replace(/\.json$/, "");
  const charts = writeCharts(stem, report.rows, data.runs, data.timelines ?? []);
  writeFileSync(`${stem}.md`, `${report.markdown}\n${charts}\n`);
  data.summary = report.rows;
  writeFileSync(jsonFile, `${JSON.stringify(data, null, 2)}\n`);
}

/**
 * Writes the charts next to the report and returns the Markdown that shows them:
 * throughput per workload, latency distributions (w1, w4), shards and throughput over
 * time (w6, the median run by peak shards).
 * @param {string} stem @param {any[]} rows @param {any[]} runs @param {any[]} timelines
 */
function writeCharts(stem, rows, runs, timelines) {
  const name = basename(stem);
  const md = [];
  writeFileSync(`${stem}.svg`, throughputChart(rows));
  md.push(`![throughput](${name}.svg)`);
  for (const w of ["w1", "w1b", "w4"]) {
    /** @type {Array<{ label: string, system: string, dashed?: boolean, points: Array<[number, number]> }>} */
    const series = [];
    for (const system of ["simulator", "shardq"]) {
      // The run with the median send p50 stands for its system.
      const mine = runs
        .filter((r) => r.workload === w && r.system === system && r.cdf)
        .sort((a, b) => (a.figures.send_p50_ms ?? 0) - (b.figures.send_p50_ms ?? 0));
      const run = mine[mine.length >> 1];
      if (!run) continue;
      series.push({ label: `${system} send()`, system, points: run.cdf.send });
      if (run.cdf.e2e?.length)
        series.push({ label: `${system} end to end`, system, dashed: true, points: run.cdf.e2e });
    }
    if (!series.length) continue;
    writeFileSync(
      `${stem}-${w}-latency.svg`,
      latencyChart(`${w}: latency distribution (percentile by ms, log scale)`, series),
    );
    md.push(`![${w} latency](${name}-${w}-latency.svg)`);
  }
  const w6 = timelines.filter((t) => t.workload === "w6").sort((a, b) => peakShards(a.samples) - peakShards(b.samples));
  const mid = w6[w6.length >> 1];
  if (mid) {
    // Runs before the load had a stop phase recorded neither what was offered nor when it stopped.
    const chart =
      mid.stopped_at === undefined
        ? timelineChart("w6: storage shards and throughput over time", mid.samples)
        : timelineChart(
            `w6: storage shards against ${W6.rate} msg/s offered to shards of ${W6.capacity} msg/s`,
            mid.samples,
            { rate: W6.rate, needed: Math.ceil(W6.rate / W6.capacity), stoppedAt: mid.stopped_at },
          );
    writeFileSync(`${stem}-w6-autoscaling.svg`, chart);
    md.push(`![w6 autoscaling](${name}-w6-autoscaling.svg)`);
  }
  return md.join("\n");
}

/**
 * @param {Array<{ id: string, name: string, systems: string[] }>} workloads
 * @param {Array<{ workload: string, system: string, figures: Record<string, number | null>, cost?: any }>} runs
 * @param {boolean} quick
 * @param {{ batch: import("./ceiling.mjs").CeilingRun, single: import("./ceiling.mjs").CeilingRun } | null} limit  the ceiling
 */
function summarize(workloads, runs, quick, limit) {
  const metrics = [
    "delivered_msgs_per_s",
    "ceiling_fraction",
    "send_msgs_per_s",
    "send_p50_ms",
    "send_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "cpu_us_per_msg",
    "usd_per_million",
    "cq_usd_per_million",
    "usd_ratio_vs_cq",
    "duration_usd_per_million_upper_bound",
    "do_requests_per_msg",
    "do_rpcs_per_msg",
    "rows_written_per_msg",
    "storage_rows_written_per_msg",
    "rows_read_per_msg",
    "shards_at_start",
    "shards_peak",
    "send_errors",
    "shards_needed",
    "hold_90_after_s",
    "accepted_msgs_per_s",
    "refused_with_room",
    "shard_refusals",
    "drain_to_min_s",
    "retired_s",
    "duplicates",
    "missing",
    ...W8_METRICS,
  ];
  // Every run's throughput as a fraction of what one storage shard takes alone (batches of 100).
  for (const r of runs) {
    if (r.system !== "shardq") continue;
    const d = r.figures.delivered_msgs_per_s;
    if (limit && typeof d === "number" && limit.batch.msgs_per_s > 0)
      r.figures.ceiling_fraction = round(d / limit.batch.msgs_per_s, 3);
  }
  /** @type {Array<{ workload: string, name: string, metric: string, simulator: Stat | null, shardq: Stat | null, ratio: number | null }>} */
  const rows = [];
  for (const w of workloads) {
    for (const metric of metrics) {
      const stat = (/** @type {string} */ system) =>
        stats(runs.filter((r) => r.workload === w.id && r.system === system).map((r) => r.figures[metric]));
      const sim = stat("simulator");
      const sq = stat("shardq");
      if (!sim && !sq) continue;
      rows.push({
        workload: w.id,
        name: w.name,
        metric,
        simulator: sim,
        shardq: sq,
        ratio: sim && sq && sim.median ? round(sq.median / sim.median, 2) : null,
      });
    }
  }
  const cell = (/** @type {Stat | null} */ s) => (s ? `${s.median} (${s.min}–${s.max})` : "–");
  const lines = [
    `## shardq vs Cloudflare Queues simulator${quick ? " (quick run)" : ""}`,
    "",
    "Medians over the runs, (min–max). Throughput counts messages delivered to the sink's queue() handler; ratio = shardq / simulator. " +
      "ceiling_fraction: delivered msg/s over the ceiling's (one storage shard alone, batches of 100). Cost figures: shardq's, at Cloudflare's list prices (bench/README.md, \"Cost model\").",
    "",
    "| workload | figure | simulator | shardq | ratio |",
    "| --- | --- | --- | --- | --- |",
    ...rows.map(
      (r) =>
        `| ${r.workload}: ${r.name} | ${r.metric} | ${cell(r.simulator)} | ${cell(r.shardq)} | ${r.ratio ?? "–"} |`,
    ),
    ...[costMarkdown(workloads, runs), w6Markdown(runs), limit ? ceilingMarkdown(limit) : "", goalsMarkdown(rows)]
      .filter(Boolean)
      .flatMap((section) => ["", section]),
  ];
  return { rows, markdown: lines.join("\n") };
}

/** @typedef {{ median: number, min: number, max: number, n: number }} Stat */
/** @param {Array<number | null | undefined>} values @returns {Stat | null} */
export function stats(values) {
  const v = /** @type {number[]} */ (values.filter((x) => typeof x === "number")).sort((a, b) => a - b);
  if (!v.length) return null;
  const mid = v.length >> 1;
  const median = v.length % 2 ? (v[mid] ?? 0) : ((v[mid - 1] ?? 0) + (v[mid] ?? 0)) / 2;
  return {
    median: /** @type {number} */ (round(median, 3)),
    min: /** @type {number} */ (v[0]),
    max: /** @type {number} */ (v[v.length - 1]),
    n: v.length,
  };
}

/** @param {Array<{ shards: number }>} samples */
const peakShards = (samples) => Math.max(0, ...samples.map((s) => s.shards));
/** @param {number | null} x @param {number} [digits] */
const round = (x, digits = 1) => (x === null ? null : Math.round(x * 10 ** digits) / 10 ** digits);
