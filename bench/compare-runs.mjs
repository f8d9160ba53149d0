// The runs compare makes on a shardq stack, each with what it cost: the meter (every object's
// counters, the stack's CPU and the wall time over a run), a driver workload on the shared
// stack, w3's HTTP POSTs, and the storage shards a queue has.
import { costDelta, costModel, costFigures, readCost } from "./cost.mjs";
import { driverRun, sinkStats } from "./driver-run.mjs";
import { load } from "./load.mjs";
import { KEYED_BODY_BYTES } from "./ordered.mjs";
import { groupCpuSeconds } from "./scaling.mjs";
import { sleep } from "../src/kernel/sleep.ts";

const TOKEN = "shardq-local-dev-token";
const HEADERS = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
/** The body the driver Worker sends (bench/workers/driver): its size is what Cloudflare Queues would bill. */
export const DRIVER_BODY_BYTES = JSON.stringify({ i: 99_999, sent_at: Date.now() }).length;
/** The load tester's body in w3 (bench/load.mjs, default --size 64). */
export const LOAD_BODY_BYTES = JSON.stringify({ pad: "x".repeat(64), sent_at: Date.now() }).length;
/** After the last delivery, the time its acks take to reach the storage shards before the counters are read. */
export const SETTLE_MS = 1500;

/** @typedef {import("./stacks.mjs").Stack} Stack */

/**
 * A driver workload on the shared shardq stack, with its cost and the storage shards it
 * started with (a queue still scaled out from the workload before has more).
 * @param {Stack} stack @param {import("./driver-run.mjs").DriverWorkload} w
 */
export async function shardqRun(stack, w) {
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
export async function startMeter(stack) {
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
 * HTTP POSTs from this process, through the load tester, then the wait for their delivery
 * (what the cost of the run covers).
 * @param {string} base @param {{ count: number, concurrency: number }} w
 */
export async function httpRun(base, w) {
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
export async function activeShards(base) {
  const res = /** @type {any} */ (
    await (await fetch(`${base}/shardq/accounts/local/queues/bench/shards`, { headers: HEADERS })).json()
  );
  return res.result.shards.filter((/** @type {{ state: string }} */ s) => s.state === "active").length;
}
