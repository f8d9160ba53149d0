// Workload 8 of `compare`: ordered lanes, shardq only: the simulator has no
// ordering keys. bench/README.md ("w8: ordered lanes") says what each figure is and why.
// - w8 and w8-unordered: the same sends, with `orderingKey` from many keys and without it,
//   one after the other in each run, so that the goal's ratio comes from one run's pair.
// - w8-hot: a backlog on one key, drained by a sink that sleeps per batch, against the same
//   backlog without a key drained by a consumer of max_concurrency 1 (the control).
import { api, groupCpuSeconds } from "./scaling.mjs";
import { pct, round, sinkStats, untilDelivered } from "./driver-run.mjs";
import { sleep } from "../src/kernel/sleep.ts";

/** The shapes of w8. Why sendBatch() of 100 and not w1's send()s: bench/README.md. */
export const W8 = {
  keys: 10_000,
  count: 50_000,
  concurrency: 8,
  batch: 100,
  /** w8-hot: the backlog, the sink's sleep per batch (the consumer's known handler time), the consumer's batch size. */
  hot: { count: 10_000, sleepMs: 20, batchSize: 100 },
  /**
   * Storage shards, pinned, each run on a fresh stack: the benchmark stack's minimum. On the
   * shared, autoscaling stack a scale-out landed in one run of three (its load is over the
   * autoscaler's target) and moved most keys mid-run: a measure of a hand-off, not of the pair.
   */
  shards: 4,
};

/** A body of the keyed workloads (bench/workers/driver/src/ordering.ts): its size is what Cloudflare Queues would bill. */
export const KEYED_BODY_BYTES = JSON.stringify({ i: 99_999, sent_at: Date.now(), k: `k${W8.keys - 1}`, s: 99 }).length;

/** Figures of w8's runs, beside the ones every workload has (compare's summary table). */
export const W8_METRICS = [
  "keys",
  "ordered_to_unordered",
  "ordering_sent",
  "order_violations",
  "key_overlaps",
  "batches_per_round_trip",
  "round_trip_ms",
  "gap_ms",
  "handler_ms",
  "turnaround_ms",
  "batches",
  "batch_size_p50",
  "full_batches_fraction",
  "max_concurrent_batches",
  "control_handler_ms",
  "control_turnaround_ms",
  "control_max_concurrent_batches",
];

/**
 * The workloads of w8 at full size or quick. Quick keeps five messages per key, so that the
 * order check still has something to check, with a tenth of the keys.
 * @param {boolean} quick
 */
export function w8Workloads(quick) {
  const scale = quick ? 0.1 : 1;
  const keys = Math.round(W8.keys * scale);
  const count = Math.round(W8.count * scale);
  const shape = { count, concurrency: W8.concurrency, batch: W8.batch, keys, systems: ["shardq"], pinned: W8.shards };
  const hot = { count: Math.round(W8.hot.count * (quick ? 0.2 : 1)), sleepMs: W8.hot.sleepMs };
  return [
    {
      id: "w8",
      name: `sendBatch() of ${W8.batch}, ${W8.concurrency} in flight, orderingKey from ${keys.toLocaleString("en-US")} keys (no simulator equivalent)`,
      ordered: true,
      ...shape,
    },
    // Measured by w8's runs, each paired with one of them: not run on its own.
    {
      id: "w8-unordered",
      name: "w8's sends without orderingKey, in the same run",
      ordered: false,
      pairedWith: "w8",
      ...shape,
    },
    {
      id: "w8-hot",
      name: `one key: a backlog of ${hot.count.toLocaleString("en-US")}, the sink sleeping ${hot.sleepMs} ms a batch (no simulator equivalent)`,
      count: hot.count,
      concurrency: 1,
      batch: W8.batch,
      keys: 1,
      ordered: true,
      sleepMs: hot.sleepMs,
      systems: ["shardq"],
      pinned: W8.shards,
    },
  ];
}

/** Per stack, what the service answered a first message with orderingKey. @type {Map<string, Promise<string | undefined>>} */
const refusals = new Map();

/**
 * Whether the stack's service refuses orderingKey: its words if it does. Asked once per stack,
 * with one message, before any run: a refused call is an error that wrangler dev logs with a
 * source-mapped stack, about 0.1 s of the stack's CPU, which would weigh on the ordered half
 * of every run as asking at each run's start did. A message it accepts is waited for at the
 * sink, so that it is not counted in a run.
 * @param {string} base
 */
export function orderingRefusal(base) {
  let answer = refusals.get(base);
  if (!answer) {
    answer = (async () => {
      await fetch(`${base}/sink/reset`, { method: "POST" });
      const r = /** @type {any} */ (
        await (await fetch(`${base}/run?count=1&concurrency=1&batch=1&keys=1&ordered=1`, { method: "POST" })).json()
      );
      if (r.error) throw new Error(`driver: ${r.error}`);
      for (
        const deadline = Date.now() + 30_000;
        !r.ordering_refused && (await sinkStats(base)).distinct < 1 && Date.now() < deadline;
      )
        await sleep(50);
      return r.ordering_refused;
    })();
    refusals.set(base, answer);
  }
  return answer;
}

/** Which half of w8's pair goes first: alternating, so that neither always runs on the state the other left. @param {number} run */
export const pairOrder = (run) => (run % 2 ? [true, false] : [false, true]);

/**
 * Before w8's first pair: both halves at a tenth of the count, not measured. A stack's first
 * run pays for its start (code compiled, the queue's first writes, the ordered path's first
 * use) and w8's ratio compares two halves of one run, so neither half may pay it alone: with
 * `--only w8` the pair is the stack's first work. Then `settleMs`, as after a measured run: the
 * warm-up's last acks and deletions would otherwise be written in the first half's window.
 * @param {(w: { keys: number, count: number, ordered: boolean }) => Promise<unknown>} runOne @param {{ keys: number, count: number }} w @param {number} settleMs
 */
export async function warmUp(runOne, w, settleMs) {
  for (const ordered of [true, false]) await runOne({ ...w, count: Math.max(1000, Math.round(w.count / 10)), ordered });
  await sleep(settleMs);
}

/** The pair's ratio: ordered over unordered delivered msg/s, of one run. @param {Record<string, number | null>} ordered @param {Record<string, number | null>} unordered */
export function pairRatio(ordered, unordered) {
  const o = ordered.delivered_msgs_per_s;
  const u = unordered.delivered_msgs_per_s;
  return typeof o === "number" && typeof u === "number" && u > 0 ? round(o / u, 3) : null;
}

/**
 * w8-hot. First the key: a backlog of `count` on one key, sent with delivery paused (one call
 * at a time: one key's accepted order is its send order), then drained by the sink sleeping
 * `sleepMs` per batch; the cost block covers this part. Then the control: the same backlog
 * without the key, drained by the same sink with the consumer at max_concurrency 1 (one batch
 * in flight at a time, the service feeding it as fast as it settles them). The key's cadence
 * over the control's is `batches_per_round_trip`.
 * @param {import("./stacks.mjs").Stack} stack
 * @param {{ count: number, batch: number, sleepMs: number }} w
 * @param {() => Promise<{ stop(m: { delivered: number, workerRequests: number, bytesPerMessage: number, peakMessages: number, redeliveries?: number }): Promise<any> }>} startMeter
 * @param {(cost: any) => Record<string, number | null>} costFigures
 */
export async function hotKeyRun(stack, w, startMeter, costFigures) {
  const refused = await orderingRefusal(stack.base);
  const meter = await startMeter();
  const hot = await keyedBacklog(stack, w, true, refused);
  const cost = await meter.stop({
    delivered: hot.figures.delivered ?? 0,
    workerRequests: 0,
    bytesPerMessage: KEYED_BODY_BYTES,
    peakMessages: w.count,
    redeliveries: hot.figures.duplicates ?? 0,
  });
  const consumer = (await api(stack.base, "/queues/bench/consumers", "GET"))[0].consumer_id;
  const path = `/queues/bench/consumers/${consumer}`;
  await api(stack.base, path, "PATCH", { settings: { max_concurrency: 1 } });
  /** @type {Awaited<ReturnType<typeof keyedBacklog>>} */
  let control;
  try {
    control = await keyedBacklog(stack, w, false, undefined);
  } finally {
    await api(stack.base, path, "PATCH", { settings: { max_concurrency: null } });
  }
  const c = control.figures;
  const f = hot.figures;
  const figures = {
    ...f,
    ...costFigures(cost),
    round_trip_ms: c.gap_ms,
    control_handler_ms: c.handler_ms,
    control_turnaround_ms: c.turnaround_ms,
    control_max_concurrent_batches: c.max_concurrent_batches,
    batches_per_round_trip:
      typeof c.gap_ms === "number" && typeof f.gap_ms === "number" && f.gap_ms > 0
        ? round(c.gap_ms / f.gap_ms, 3)
        : null,
  };
  return { figures, cdf: hot.cdf, cost, ...(hot.refused !== undefined ? { refused: hot.refused } : {}) };
}

/**
 * Fills the queue with `count` messages on one key (delivery paused), resumes delivery and
 * waits for the sink to have them all; the figures of its timeline.
 * @param {import("./stacks.mjs").Stack} stack @param {{ count: number, batch: number, sleepMs: number }} w
 * @param {boolean} ordered @param {string | undefined} refused  the service's refusal of orderingKey, if it refused it
 */
async function keyedBacklog({ base, pid }, w, ordered, refused) {
  await fetch(`${base}/sink/reset?sleep_ms=${w.sleepMs}`, { method: "POST" });
  await api(base, "/queues/bench", "PATCH", { settings: { delivery_paused: true } });
  try {
    for (let sent = 0; sent < w.count;) {
      const n = Math.min(5000, w.count - sent);
      const key = ordered && refused === undefined ? "&ordered=1" : "";
      const r = /** @type {any} */ (
        await (
          await fetch(`${base}/run?count=${n}&concurrency=1&batch=${w.batch}&keys=1&offset=${sent}${key}`, {
            method: "POST",
          })
        ).json()
      );
      if (r.error) throw new Error(`driver: ${r.error}`);
      refused ??= r.ordering_refused;
      sent += r.sent;
    }
  } finally {
    await api(base, "/queues/bench", "PATCH", { settings: { delivery_paused: false } });
  }
  const cpu0 = groupCpuSeconds(pid);
  const started = performance.now();
  let s = await untilDelivered(base, w.count);
  const seconds = (performance.now() - started) / 1000;
  const cpu1 = groupCpuSeconds(pid);
  // The last batch's handler is still sleeping when its messages are counted: its end is part of the timeline.
  for (
    const until = Date.now() + 10 * w.sleepMs + 1000;
    (s = await sinkStats(base, { batches: true })).running_batches > 0 && Date.now() < until;
  )
    await sleep(w.sleepMs);
  const figures = {
    delivered: s.distinct,
    duplicates: s.duplicates,
    delivered_msgs_per_s: Math.round(s.distinct / seconds),
    e2e_p50_ms: s.latency_ms.p50,
    e2e_p99_ms: s.latency_ms.p99,
    cpu_us_per_msg:
      cpu0 !== null && cpu1 !== null && s.distinct ? Math.round(((cpu1 - cpu0) * 1e6) / s.distinct) : null,
    order_violations: s.order_violations,
    key_overlaps: s.key_overlaps,
    max_concurrent_batches: s.max_concurrent_batches,
    ...timelineFigures(s.batches, W8.hot.batchSize),
    ...(ordered ? { ordering_sent: refused === undefined ? 1 : 0 } : {}),
  };
  return { figures, cdf: { e2e: s.latency_ms.cdf ?? [] }, ...(ordered && refused !== undefined ? { refused } : {}) };
}

/**
 * The cadence of a run's batches, from the sink's timeline ([start, end, messages] per batch,
 * its own clock, whole ms): `gap_ms` from one batch's start to the next's, `handler_ms` from a
 * batch's start to its return, `turnaround_ms` from its return to the next batch's start (the
 * ack's way back, the service's settling and next lease, the next dispatch). Means over the
 * run, not medians: a median of whole ms moves in steps of 1 ms, 4 % of a 25 ms gap, and a
 * wait in a few gaps (a timer, an alarm) is what the figure must not hide. Batch sizes: the
 * median, and the share of full batches but the last.
 * @param {Array<[number, number, number]>} batches @param {number} batchSize
 */
export function timelineFigures(batches, batchSize) {
  const b = [...batches].sort((x, y) => x[0] - y[0]);
  const mean = (/** @type {number[]} */ v) => (v.length ? round(v.reduce((a, x) => a + x, 0) / v.length) : null);
  /** Each batch with the one that started next. */
  const pairs = b
    .slice(1)
    .map((next, i) => /** @type {[[number, number, number], [number, number, number]]} */ ([b[i], next]));
  const sizes = b.map((x) => x[2]);
  const notLast = sizes.slice(0, -1);
  return {
    batches: b.length,
    gap_ms: mean(pairs.map(([x, next]) => next[0] - x[0])),
    // A handler still running when the timeline was read (end -1) has no time yet.
    handler_ms: mean(b.filter((x) => x[1] >= 0).map((x) => x[1] - x[0])),
    turnaround_ms: mean(pairs.filter(([x]) => x[1] >= 0).map(([x, next]) => next[0] - x[1])),
    batch_size_p50: pct(
      sizes.sort((x, y) => x - y),
      50,
    ),
    full_batches_fraction: notLast.length
      ? round(notLast.filter((n) => n >= batchSize).length / notLast.length, 3)
      : null,
  };
}
