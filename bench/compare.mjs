// `npm run bench -- compare [--quick]`: shardq and miniflare's Cloudflare Queues
// simulator side by side, on this machine, in one run. The same driver Worker sends
// and the same sink Worker consumes on both (bench/workers); each system runs in its
// own `wrangler dev` on loopback. Workloads (compare-workloads.mjs) repeat, interleaving the
// two systems, and the report (compare-report.mjs) gives medians with min and max:
// bench/results/<date>.json, .md and .svg.
// Beside them: what each shardq run would cost at Cloudflare's list prices (bench/cost.mjs),
// and the ceiling, one storage shard alone on this machine (bench/ceiling.mjs).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { freePort, ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";
import { ceiling } from "./ceiling.mjs";
import { stats, writeResults } from "./compare-report.mjs";
import {
  activeShards,
  DRIVER_BODY_BYTES,
  httpRun,
  LOAD_BODY_BYTES,
  SETTLE_MS,
  shardqRun,
  startMeter,
} from "./compare-runs.mjs";
import { compareWorkloads } from "./compare-workloads.mjs";
import { startShardq } from "./stacks.mjs";
import { costFigures } from "./cost.mjs";
import { driverRun } from "./driver-run.mjs";
import { hotKeyRun, orderingRefusal, pairOrder, pairRatio, warmUp } from "./ordered.mjs";
import { autoscaleRun, backlogRun, w6Vars } from "./scaling.mjs";

export const COMPARE_HELP = `npm run bench -- compare [--quick] [--repeats N] [--only w1,w4,...] [--out DIR]
  Measures the ceiling (npm run bench -- ceiling) first, then starts shardq (service + sink consumer)
  and miniflare's Queues simulator (producer + the same sink), runs the workloads on both, interleaved,
  and writes bench/results/<date>.{json,md,svg}, with what each shardq run costs at list prices.
  --quick      small counts, one repeat and a short ceiling, for a CI smoke run
  --repeats N  runs of each workload per system (default 3)
  --only LIST  only these workloads (w1, w1b, w2 to w8; w5 means every backlog size, w8 its pair and its hot key); w4 needs w1, which sets its rate
  --out DIR    where the results go (default bench/results)`;

/** @typedef {import("./stacks.mjs").Stack} Stack */

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
  const only = o.only === undefined ? null : new Set(o.only.split(",").map((s) => s.trim()));
  const workloads = compareWorkloads(quick, only);

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

    /** @type {Array<{ workload: string, system: string, run: number, figures: Record<string, number | null>, cost?: ReturnType<typeof import("./cost.mjs").costModel> }>} */
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
          /** @type {{ figures: Record<string, number | null>, cdf?: Record<string, Array<[number, number]>>, cost?: ReturnType<typeof import("./cost.mjs").costModel> }} */
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
    return writeResults(outDir, { quick, repeats, limit, workloads, runs, timelines });
  } finally {
    for (const s of Object.values(stacks)) await s.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
