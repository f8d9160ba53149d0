// `npm run bench -- compare [--quick]`: shardq and miniflare's Cloudflare Queues
// simulator side by side, on this machine, in one run. The same driver Worker sends
// and the same sink Worker consumes on both (bench/workers); each system runs in its
// own `wrangler dev` on loopback. Workloads repeat, interleaving the two systems, and
// the report gives medians with min and max: bench/results/<date>.json, .md and .svg.
// Beside them: what each shardq run would cost at Cloudflare's list prices (bench/cost.mjs),
// and the ceiling, one storage shard alone on this machine (bench/ceiling.mjs).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { freePort, ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";
import { ceiling, ceilingMarkdown } from "./ceiling.mjs";
import { goalsMarkdown } from "./goals.mjs";
import { startShardq } from "./stacks.mjs";
import { latencyChart, throughputChart, timelineChart } from "./charts.mjs";
import { costDelta, costFigures, costMarkdown, costModel, readCost } from "./cost.mjs";
import { load } from "./load.mjs";
import { driverRun, sinkStats } from "./driver-run.mjs";
import {
  hotKeyRun,
  KEYED_BODY_BYTES,
  orderingRefusal,
  pairOrder,
  pairRatio,
  W8_METRICS,
  w8Workloads,
  warmUp,
} from "./ordered.mjs";
import { autoscaleRun, backlogRun, groupCpuSeconds, W6, w6Markdown, w6Vars } from "./scaling.mjs";
import { sleep } from "../src/kernel/sleep.ts";

export const COMPARE_HELP = `npm run bench -- compare [--quick] [--repeats N] [--only w1,w4,...] [--out DIR]
  Measures the ceiling (npm run bench -- ceiling) first, then starts shardq (service + sink consumer)
  and miniflare's Queues simulator (producer + the same sink), runs the workloads on both, interleaved,
  and writes bench/results/<date>.{json,md,svg}, with what each shardq run costs at list prices.
  --quick      small counts, one repeat and a short ceiling, for a CI smoke run
  --repeats N  runs of each workload per system (default 3)
  --only LIST  only these workloads (w1, w1b, w2 to w8; w5 means every backlog size, w8 its pair and its hot key); w4 needs w1, which sets its rate
  --out DIR    where the results go (default bench/results)`;

const TOKEN = "shardq-local-dev-token";
const HEADERS = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
/** w7: a steady rate this machine holds with room to spare at any shard count, sent to queues pinned at these shard counts. */
const W7_RATE = 1000;
const W7_SHARDS = [1, 12];
/** The body the driver Worker sends (bench/workers/driver): its size is what Cloudflare Queues would bill. */
const DRIVER_BODY_BYTES = JSON.stringify({ i: 99_999, sent_at: Date.now() }).length;
/** The load tester's body in w3 (bench/load.mjs, default --size 64). */
const LOAD_BODY_BYTES = JSON.stringify({ pad: "x".repeat(64), sent_at: Date.now() }).length;
/** After the last delivery, the time its acks take to reach the storage shards before the counters are read. */
const SETTLE_MS = 1500;

/** @param {string[]} argv */
export async function compare(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      quick: { type: "boolean", default: false },
      repeats: { type: "string" },
      only: { type: "string" },
      out: { type: "string" },
    },
  });
  const quick = o.quick;
  const repeats = Number(o.repeats ?? (quick ? 1 : 3));
  if (!Number.isInteger(repeats) || repeats < 1 || repeats > 10)
    throw new Error("--repeats must be an integer from 1 to 10");
  const outDir = o.out ?? join(ROOT, "bench", "results");
  const scale = quick ? 0.1 : 1;
  /** @typedef {{ id: string, name: string, count: number, concurrency: number, batch: number, systems: string[], rate?: number, seconds?: number, backlog?: number, producer?: string, pinned?: number, keys?: number, ordered?: boolean, sleepMs?: number, pairedWith?: string }} Workload */
  const only = o.only === undefined ? null : new Set(o.only.split(",").map((s) => s.trim()));
  for (const id of only ?? [])
    if (!/^(w[1-8]|w1b)$/.test(id)) throw new Error(`--only: unknown workload "${id}" (w1, w1b, w2 to w8)`);
  if (only?.has("w4") && !only.has("w1")) throw new Error("--only: w4 needs w1, which measures the rate w4 sends at");
  const workloads = /** @type {Workload[]} */ (
    [
      {
        id: "w1",
        name: "send() from a Worker, 256 in flight",
        count: Math.round(20_000 * scale),
        concurrency: 256,
        batch: 1,
        systems: ["simulator", "shardq"],
      },
      // w1's sends through shardq/producer's batchingQueue, on both: the helper wraps any Queue binding.
      {
        id: "w1b",
        name: "w1 through batchingQueue (shardq/producer)",
        count: Math.round(20_000 * scale),
        concurrency: 256,
        batch: 1,
        producer: "batching",
        systems: ["simulator", "shardq"],
      },
      {
        id: "w2",
        name: "sendBatch() of 100",
        count: Math.round(50_000 * scale),
        concurrency: 8,
        batch: 100,
        systems: ["simulator", "shardq"],
      },
      {
        id: "w3",
        name: "HTTP POST of single messages (no simulator equivalent)",
        count: Math.round(5_000 * scale),
        concurrency: 32,
        batch: 1,
        systems: ["shardq"],
      },
      // Its rate is set once w1 has measured shardq's maximum: half of it, for 30 s (3 s quick).
      {
        id: "w4",
        name: "send() at half of shardq's w1 maximum",
        count: 0,
        concurrency: 256,
        batch: 1,
        rate: 0,
        seconds: quick ? 3 : 30,
        systems: ["simulator", "shardq"],
      },
      ...(quick ? [1_000, 10_000] : [1_000, 100_000, 1_000_000]).map((backlog) => ({
        id: `w5-${backlog >= 1e6 ? `${backlog / 1e6}M` : `${backlog / 1e3}k`}`,
        name: `consuming a backlog of ${backlog.toLocaleString("en-US")} (no simulator equivalent)`,
        backlog,
        count: backlog,
        concurrency: 8,
        batch: 100,
        systems: ["shardq"],
      })),
      // A load phase long enough to show the rate held within 30 s, then a stop phase until the queue is back at its minimum.
      {
        id: "w6",
        name: `send() at ${W6.rate} msg/s against shards of ${W6.capacity} msg/s from ${W6.minShards}, then none (no simulator equivalent)`,
        count: 0,
        concurrency: 0,
        batch: 1,
        rate: W6.rate,
        seconds: quick ? 12 : 45,
        systems: ["shardq"],
      },
      ...W7_SHARDS.map((shards) => ({
        id: `w7-${shards}`,
        name: `send() at ${W7_RATE} msg/s for ${quick ? 3 : 20} s, shardq pinned at ${shards} storage shard${shards === 1 ? "" : "s"}`,
        count: W7_RATE * (quick ? 3 : 20),
        concurrency: 256,
        batch: 1,
        rate: W7_RATE,
        seconds: quick ? 3 : 20,
        pinned: shards,
        systems: ["simulator", "shardq"],
      })),
      // Ordered lanes: bench/ordered.mjs.
      ...w8Workloads(quick),
    ].filter((w) => !only || only.has(/^w[578]-/.test(w.id) ? w.id.slice(0, 2) : w.id))
  );

  // Alone on the machine, before either system starts.
  const limit = await ceiling({ seconds: quick ? 3 : 10 });
  console.log(`ceiling: ${JSON.stringify(limit)}`);

  const work = mkdtempSync(join(tmpdir(), "shardq-compare-"));
  const env = { WRANGLER_REGISTRY_PATH: join(work, "registry") };
  const stacks = /** @type {Record<string, Stack>} */ ({});
  try {
    const simPort = await freePort();
    const sim = await startWrangler({
      args: [
        "-c",
        "bench/workers/driver/wrangler.simulator.toml",
        "-c",
        "bench/workers/sink/wrangler.simulator.toml",
        "--port",
        String(simPort),
        "--ip",
        "127.0.0.1",
        "--persist-to",
        join(work, "sim"),
        "--inspector-port",
        "0",
      ],
      readyUrl: `http://127.0.0.1:${simPort}/ready`,
      env,
    });
    stacks.simulator = {
      base: `http://127.0.0.1:${simPort}`,
      pid: /** @type {number} */ (sim.pid),
      queueId: null,
      stop: () => sim.stop(),
    };
    stacks.shardq = await startShardq({ work, env, file: "wrangler.bench.toml", name: "shardq" });
    // Workload 6 runs on its own shardq, with the per-shard capacity limit on and its minimum of shards to start.
    // Each run on fresh state: a queue that scaled out in the run before would start with its shards.
    const autoscaling = (/** @type {number} */ run) =>
      startShardq({ work, env, file: "wrangler.bench-w6.toml", vars: w6Vars(), name: `shardq-w6-${run}` });
    /** @type {Array<{ workload: string, system: string, run: number, samples: unknown[], stopped_at?: number | null, decisions?: unknown[] }>} */
    const timelines = [];

    /** @type {Array<{ workload: string, system: string, run: number, figures: Record<string, number | null>, cost?: ReturnType<typeof costModel> }>} */
    const runs = [];
    for (const w of workloads) {
      // Measured within the runs of the workload it is paired with.
      if (w.pairedWith) continue;
      if (w.id === "w4") {
        const w1 = runs
          .filter((r) => r.workload === "w1" && r.system === "shardq")
          .map((r) => r.figures.delivered_msgs_per_s ?? 0);
        w.rate = Math.max(1, Math.round((stats(w1)?.median ?? 100) / 2));
        w.count = w.rate * /** @type {number} */ (w.seconds);
        w.name = `send() at ${w.rate} msg/s (half of shardq's w1) for ${w.seconds} s`;
      }
      for (let run = 1; run <= repeats; run++) {
        for (const system of w.systems) {
          // A workload pinned at a shard count runs on its own shardq, on fresh state, whose queue has exactly that many shards whatever the load.
          const pinned = String(w.pinned);
          const own =
            w.pinned && system === "shardq"
              ? await startShardq({
                  work,
                  env,
                  file: "wrangler.bench-pinned.toml",
                  vars: { SHARDS_PER_REGION: pinned, MAX_SHARDS_PER_REGION: pinned },
                  name: `shardq-${w.id}-${run}`,
                })
              : null;
          const stack = own ?? /** @type {Stack} */ (stacks[system]);
          /** @type {{ figures: Record<string, number | null>, cdf?: Record<string, Array<[number, number]>>, cost?: ReturnType<typeof costModel> }} */
          let result;
          try {
            if (w.id === "w3") {
              const meter = await startMeter(stack);
              const figures = await httpRun(stack.base, w);
              const cost = await meter.stop({
                delivered: figures.delivered ?? 0,
                workerRequests: figures.sent ?? 0,
                bytesPerMessage: LOAD_BODY_BYTES,
                peakMessages: w.count,
              });
              result = { figures: { ...figures, ...costFigures(cost) }, cost };
            } else if (w.id.startsWith("w5")) {
              // The whole life of the backlog: filled (sendBatch of 100, delivery paused), then drained.
              const meter = await startMeter(stack);
              const figures = await backlogRun(stack.base, stack.pid, /** @type {number} */ (w.backlog));
              const cost = await meter.stop({
                delivered: figures.delivered ?? 0,
                workerRequests: 0,
                bytesPerMessage: DRIVER_BODY_BYTES,
                peakMessages: /** @type {number} */ (w.backlog),
              });
              result = { figures: { ...figures, ...costFigures(cost) }, cost };
            } else if (w.id === "w6") {
              const fresh = await autoscaling(run);
              try {
                const meter = await startMeter(fresh);
                const r = await autoscaleRun(fresh.base, {
                  rate: /** @type {number} */ (w.rate),
                  seconds: /** @type {number} */ (w.seconds),
                });
                timelines.push({
                  workload: w.id,
                  system,
                  run,
                  samples: r.samples,
                  stopped_at: r.figures.stopped_at_s,
                  decisions: r.decisions,
                });
                const cost = await meter.stop({
                  delivered: r.figures.delivered ?? 0,
                  workerRequests: 0,
                  bytesPerMessage: DRIVER_BODY_BYTES,
                  peakMessages: r.figures.sent ?? 0,
                });
                result = { figures: { ...r.figures, ...costFigures(cost) }, cost };
              } finally {
                await fresh.stop();
              }
            } else if (w.id === "w8") {
              // Both halves in this run, ordered and unordered, the ratio from this pair.
              const refused = await orderingRefusal(stack.base);
              if (run === 1 || own)
                await warmUp(
                  (x) => driverRun(stack.base, stack.pid, { ...w, ...x, refused }),
                  /** @type {{ keys: number, count: number }} */ (w),
                  SETTLE_MS,
                );
              /** @type {Awaited<ReturnType<typeof shardqRun>> | undefined} */
              let mine;
              /** @type {Awaited<ReturnType<typeof shardqRun>> | undefined} */
              let unordered;
              for (const ordered of pairOrder(run)) {
                if (ordered) mine = await shardqRun(stack, { ...w, ordered, refused });
                else unordered = await shardqRun(stack, { ...w, ordered });
              }
              if (!mine || !unordered) throw new Error("w8: a half of the pair did not run");
              runs.push({ workload: "w8-unordered", system, run, ...unordered });
              console.log(`w8-unordered ${system} run ${run}: ${JSON.stringify(unordered.figures)}`);
              result = {
                ...mine,
                figures: { ...mine.figures, ordered_to_unordered: pairRatio(mine.figures, unordered.figures) },
              };
            } else if (w.id === "w8-hot") {
              result = await hotKeyRun(
                stack,
                /** @type {{ count: number, batch: number, sleepMs: number }} */ (w),
                () => startMeter(stack),
                costFigures,
              );
            } else if (own) {
              const meter = await startMeter(own);
              const r = await driverRun(own.base, own.pid, w);
              const cost = await meter.stop({
                delivered: r.figures.delivered ?? 0,
                workerRequests: 0,
                bytesPerMessage: DRIVER_BODY_BYTES,
                peakMessages: w.count,
                redeliveries: r.figures.duplicates ?? 0,
              });
              result = {
                ...r,
                figures: { ...r.figures, ...costFigures(cost), shards_at_start: await activeShards(own.base) },
                cost,
              };
            } else if (system === "shardq") result = await shardqRun(stack, w);
            else result = await driverRun(stack.base, stack.pid, w);
          } finally {
            await own?.stop();
          }
          runs.push({ workload: w.id, system, run, ...result });
          console.log(`${w.id} ${system} run ${run}: ${JSON.stringify(result.figures)}`);
          if ("refused" in result)
            console.log(`${w.id}: the service refused orderingKey, so this run sent without it: ${result.refused}`);
        }
      }
    }
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
  } finally {
    for (const s of Object.values(stacks)) await s.stop();
    rmSync(work, { recursive: true, force: true });
  }
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

/** @typedef {import("./stacks.mjs").Stack} Stack */

/**
 * A driver workload on the shared shardq stack, with its cost and the storage shards it
 * started with (a queue still scaled out from the workload before has more).
 * @param {Stack} stack @param {import("./driver-run.mjs").DriverWorkload} w
 */
async function shardqRun(stack, w) {
  const shardsAtStart = await activeShards(stack.base);
  const meter = await startMeter(stack);
  const r = await driverRun(stack.base, stack.pid, w);
  const cost = await meter.stop({
    delivered: r.figures.delivered ?? 0,
    workerRequests: 0,
    bytesPerMessage: w.keys ? KEYED_BODY_BYTES : DRIVER_BODY_BYTES,
    peakMessages: w.count,
    redeliveries: r.figures.duplicates ?? 0,
  });
  return { ...r, figures: { ...r.figures, ...costFigures(cost), shards_at_start: shardsAtStart }, cost };
}

/**
 * Starts measuring what a workload costs on a shardq stack: every object's counters (GET /cost
 * of the driver Worker), the CPU of the stack's processes and the wall time. stop() takes what
 * the run delivered and returns its cost block (bench/cost.mjs).
 * @param {Stack} stack
 */
async function startMeter(stack) {
  const queueId = stack.queueId;
  if (!queueId) throw new Error("only a shardq stack has a cost to read");
  const before = await readCost(stack.base, queueId);
  const cpu0 = groupCpuSeconds(stack.pid);
  const started = performance.now();
  return {
    /** @param {{ delivered: number, workerRequests: number, bytesPerMessage: number, peakMessages: number, redeliveries?: number }} m */
    async stop(m) {
      const seconds = (performance.now() - started) / 1000;
      const cpu1 = groupCpuSeconds(stack.pid);
      // The last batch's acks reach its storage shard after the sink has counted it.
      await sleep(SETTLE_MS);
      const after = await readCost(stack.base, queueId);
      return costModel({
        delta: costDelta(before, after),
        seconds,
        cpuSeconds: cpu0 !== null && cpu1 !== null ? cpu1 - cpu0 : null,
        ...m,
      });
    },
  };
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
 * HTTP POSTs from this process, through the load tester, then the wait for their delivery
 * (what the cost of the run covers).
 * @param {string} base @param {{ count: number, concurrency: number }} w
 */
async function httpRun(base, w) {
  const start = (await sinkStats(base)).distinct;
  const f = await load([
    "--url",
    `${base}/shardq`,
    "--queue",
    "bench",
    "--count",
    String(w.count),
    "--concurrency",
    String(w.concurrency),
    "--consumer-stats",
    `${base}/sink/stats`,
  ]);
  const deadline = Date.now() + 60_000;
  let delivered = (await sinkStats(base)).distinct - start;
  while (delivered < f.sent && Date.now() < deadline) {
    await sleep(100);
    delivered = (await sinkStats(base)).distinct - start;
  }
  return {
    send_msgs_per_s: f.throughput_msgs_per_s,
    send_p50_ms: f.send_latency_ms.p50,
    send_p99_ms: f.send_latency_ms.p99,
    sent: f.sent,
    delivered,
  };
}

/** The queue's active storage shards, from its Coordinator's map. @param {string} base */
async function activeShards(base) {
  const res = /** @type {any} */ (
    await (await fetch(`${base}/shardq/accounts/local/queues/bench/shards`, { headers: HEADERS })).json()
  );
  return res.result.shards.filter((/** @type {{ state: string }} */ s) => s.state === "active").length;
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
function stats(values) {
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
