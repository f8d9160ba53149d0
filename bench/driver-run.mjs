// One run of a workload through the driver Worker (bench/workers/driver), measured until the
// sink (bench/workers/sink) has every message: what `compare` does for every workload the
// driver sends (w1, w1b, w2, w4, w7, and both halves of w8).
import { groupCpuSeconds } from "./scaling.mjs";
import { sleep } from "../src/kernel/sleep.ts";

/** The percentiles a run keeps of its latency distributions (for the charts). */
const CDF_POINTS = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100];

/**
 * @typedef {{ count: number, concurrency: number, batch: number, rate?: number, producer?: string, keys?: number, ordered?: boolean, refused?: string }} DriverWorkload
 * `keys`: bodies carry one of this many ordering keys and their number within it (w8); `ordered`:
 * sent as `orderingKey` too, unless `refused` (the service's answer to it, bench/ordered.mjs).
 */

/**
 * Sends `count` through the driver Worker in chunks, without waiting for the sink: the
 * simulator takes any number of undelayed messages in flight (bench/README.md, "How compare
 * measures"). Measures until all are delivered, with the CPU the system's processes used meanwhile.
 * `refused`: what the service answered when it refused `orderingKey` (the run then went on
 * without it); `sleepMs`: how long the sink's handler sleeps per batch.
 * @param {string} base @param {number} pgid @param {DriverWorkload} w @param {{ sleepMs?: number }} [o]
 */
export async function driverRun(base, pgid, w, o = {}) {
  await fetch(`${base}/sink/reset${o.sleepMs ? `?sleep_ms=${o.sleepMs}` : ""}`, { method: "POST" });
  const cpuBefore = groupCpuSeconds(pgid);
  // Each /run answers with its calls' latencies; chunks keep those answers small, and follow one another without a pause.
  const chunk = Math.min(w.count, w.rate ? 2000 : 5000);
  const latencies = /** @type {number[]} */ ([]);
  const started = performance.now();
  let sent = 0;
  /** @type {string | undefined} */
  let refused = w.ordered ? w.refused : undefined;
  while (sent < w.count) {
    const n = Math.min(chunk, w.count - sent);
    const producer = w.producer ? `&producer=${w.producer}` : "";
    // Once refused, the rest of the run sends as the unordered half does, not a refused call first each time.
    const keyed = w.keys
      ? `&keys=${w.keys}&offset=${sent}${w.ordered && refused === undefined ? "&ordered=1" : ""}`
      : "";
    const r = /** @type {any} */ (
      await (
        await fetch(
          `${base}/run?count=${n}&concurrency=${w.concurrency}&batch=${w.batch}&rate=${w.rate ?? 0}${producer}${keyed}`,
          { method: "POST" },
        )
      ).json()
    );
    if (r.error) throw new Error(`driver: ${r.error}`);
    refused ??= r.ordering_refused;
    sent += r.sent;
    latencies.push(...r.latencies);
  }
  const sendSeconds = (performance.now() - started) / 1000;
  const s = await untilDelivered(base, w.count);
  const seconds = (performance.now() - started) / 1000;
  const cpuAfter = groupCpuSeconds(pgid);
  latencies.sort((a, b) => a - b);
  /** @type {Record<string, number | null>} */
  const figures = {
    delivered_msgs_per_s: Math.round(s.distinct / seconds),
    send_msgs_per_s: Math.round(sent / sendSeconds),
    send_p50_ms: round(pct(latencies, 50)),
    send_p99_ms: round(pct(latencies, 99)),
    e2e_p50_ms: s.latency_ms.p50,
    e2e_p99_ms: s.latency_ms.p99,
    delivered: s.distinct,
    duplicates: s.duplicates,
    cpu_us_per_msg:
      cpuBefore !== null && cpuAfter !== null ? Math.round(((cpuAfter - cpuBefore) * 1e6) / w.count) : null,
    ...(w.keys
      ? { keys: w.keys, order_violations: s.order_violations ?? null, key_overlaps: s.key_overlaps ?? null }
      : {}),
    ...(w.ordered ? { ordering_sent: refused === undefined ? 1 : 0 } : {}),
  };
  /** @type {Record<string, Array<[number, number]>>} */
  const cdf = {
    send: CDF_POINTS.map((p) => /** @type {[number, number]} */ ([p, round(pct(latencies, p)) ?? 0])),
    e2e: s.latency_ms.cdf ?? [],
  };
  return { figures, cdf, ...(refused !== undefined ? { refused } : {}) };
}

/** The sink's stats once it has seen `count` distinct messages, or after two minutes. @param {string} base @param {number} count */
export async function untilDelivered(base, count) {
  const deadline = Date.now() + 120_000;
  let s = await sinkStats(base);
  while (s.distinct < count && Date.now() < deadline) {
    await sleep(50);
    s = await sinkStats(base);
  }
  return s;
}

/** What the sink received since its last reset; `batches` adds its timeline of keyed batches. @param {string} base @param {{ batches?: boolean }} [o] */
export async function sinkStats(base, o = {}) {
  return /** @type {any} */ (await (await fetch(`${base}/sink/stats${o.batches ? "?batches=1" : ""}`)).json());
}

/** @param {number[]} sorted @param {number} p */
export const pct = (sorted, p) =>
  sorted.length
    ? /** @type {number} */ (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))])
    : null;
/** @param {number | null} x @param {number} [digits] */
export const round = (x, digits = 1) => (x === null ? null : Math.round(x * 10 ** digits) / 10 ** digits);
