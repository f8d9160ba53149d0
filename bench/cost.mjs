// The benchmark's cost model ("Cost model" in bench/README.md): what a run of a workload
// would be billed on Cloudflare at list prices (bench/prices.mjs), from the counters every
// Durable Object of the queue keeps (src/kernel/sql-meter.ts), read through the driver
// Worker's GET /cost before and after the run, beside what Cloudflare Queues would bill
// for the same messages.
import { DO_MEMORY_GB, PRICES, SECONDS_PER_MONTH, pricesMarkdown, queuesUsd, usd } from "./prices.mjs";

/** The Durable Object classes GET /cost answers for, as it names them. */
export const CLASSES = /** @type {const} */ (["storage", "coordinator", "consumer", "catalog", "idempotency"]);
/**
 * Bytes a stored message holds beyond its body (id, times, attempts, checksum, content type;
 * SQLite's own row and page overhead): an allowance, not a measurement. Storage is the
 * smallest line of the bill by orders of magnitude either way.
 */
const ROW_BYTES_ALLOWANCE = 100;
/** The issue's goals: shardq at most this fraction of Cloudflare Queues' price. */
export const GOALS = /** @type {Record<string, number>} */ ({ w1: 0.2, w2: 0.1 });

/**
 * @typedef {{ rpcs: number, rowsWritten: number, rowsRead?: number, alarms?: number, since?: number }} Reading
 * @typedef {{ coordinator: Reading, catalog: Reading, storage: Record<string, Reading>, consumer: Record<string, Reading>, idempotency: Record<string, Reading> }} CostReading
 * @typedef {{ rpcs: number, alarms: number, rowsWritten: number, rowsRead: number, objects: number, active: number, restarted: number }} ClassDelta
 */

/** GET /cost of the driver Worker: every object of the queue, by class. @param {string} base @param {string} queueId @returns {Promise<CostReading>} */
export async function readCost(base, queueId) {
  const res = await fetch(`${base}/cost?account=local&queue_id=${queueId}`);
  const body = /** @type {any} */ (await res.json());
  if (!res.ok) throw new Error(`GET /cost: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

/**
 * What each class of objects did between two readings. An object that restarted in between
 * (a later `since`, or a counter lower than before) counts from its restart, so a figure is a
 * lower bound then (`restarted`). One that shows no request or alarm since it started was
 * woken by the reading itself (an idle catalog or idempotency table evicted during the run):
 * it counts nothing. A storage shard's stats() counts itself: the reading's own call is taken off.
 * @param {CostReading} before @param {CostReading} after
 * @returns {Record<(typeof CLASSES)[number], ClassDelta>}
 */
export function costDelta(before, after) {
  /** @param {Record<string, Reading>} b @param {Record<string, Reading>} a @param {number} selfRpcs */
  const of = (b, a, selfRpcs) => {
    /** @type {ClassDelta} */
    const d = { rpcs: 0, alarms: 0, rowsWritten: 0, rowsRead: 0, objects: 0, active: 0, restarted: 0 };
    for (const [name, now] of Object.entries(a)) {
      const was = b[name];
      const restarted =
        was !== undefined &&
        (now.since !== undefined ? now.since !== was.since : now.rpcs < was.rpcs || now.rowsWritten < was.rowsWritten);
      const fresh = was === undefined || restarted;
      if (fresh && now.rpcs - selfRpcs + (now.alarms ?? 0) <= 0) continue;
      const from = fresh ? { rpcs: 0, rowsWritten: 0, rowsRead: 0, alarms: 0 } : was;
      const rpcs = Math.max(0, now.rpcs - from.rpcs - selfRpcs);
      const alarms = Math.max(0, (now.alarms ?? 0) - (from.alarms ?? 0));
      d.rpcs += rpcs;
      d.alarms += alarms;
      d.rowsWritten += Math.max(0, now.rowsWritten - from.rowsWritten);
      d.rowsRead += Math.max(0, (now.rowsRead ?? 0) - (from.rowsRead ?? 0));
      d.objects++;
      if (rpcs + alarms > 0) d.active++;
      if (restarted) d.restarted++;
    }
    return d;
  };
  return {
    storage: of(before.storage, after.storage, 1),
    coordinator: of({ c: before.coordinator }, { c: after.coordinator }, 0),
    consumer: of(before.consumer, after.consumer, 0),
    catalog: of({ c: before.catalog }, { c: after.catalog }, 0),
    idempotency: of(before.idempotency, after.idempotency, 0),
  };
}

/**
 * The bill of one run, in dollars per million delivered messages.
 *
 * - Durable Object requests (RPC calls and alarms), rows written and rows read: counted by
 *   every object of the queue (costDelta).
 * - Worker requests: the HTTP requests that carried messages (a producer's service-binding
 *   call to QueueProducer, and a consumer shard's call to the consumer Worker, are not billed
 *   as requests).
 * - Worker CPU: all the CPU of the run's `wrangler dev` (driver, service, sink) at the Workers
 *   CPU price: an upper bound (the driver's and the sink's are the user's on both systems, and
 *   Durable Objects are billed by duration, not CPU).
 * - Storage: the most messages the run could hold at once (`peakMessages`), each its body plus
 *   ROW_BYTES_ALLOWANCE, for the run's wall time (a GB-month is daily peaks averaged over 30 days).
 * - Duration: an upper bound, every object that served a request or ran an alarm during the
 *   run counted active (128 MB) for all of the run's wall time. In the total, so the total
 *   is an upper bound too; it is its own part, for a reader who wants it without.
 *
 * @param {{ delta: Record<(typeof CLASSES)[number], ClassDelta>, delivered: number, seconds: number, cpuSeconds: number | null,
 *   workerRequests: number, bytesPerMessage: number, peakMessages: number, redeliveries?: number }} m
 */
export function costModel(m) {
  const all = Object.values(m.delta);
  const sum = (/** @type {keyof ClassDelta} */ k) => all.reduce((n, d) => n + d[k], 0);
  const rpcs = sum("rpcs");
  const alarms = sum("alarms");
  const rowsWritten = sum("rowsWritten");
  const rowsRead = sum("rowsRead");
  const active = sum("active");
  const cpuMs = m.cpuSeconds === null ? null : m.cpuSeconds * 1000;
  const storageGbMonth =
    ((m.peakMessages * (m.bytesPerMessage + ROW_BYTES_ALLOWANCE)) / 1e9) * (m.seconds / SECONDS_PER_MONTH);
  const durationGbS = active * m.seconds * DO_MEMORY_GB;
  const dollars = {
    do_requests: usd(PRICES.doRequests, rpcs + alarms),
    rows_written: usd(PRICES.rowsWritten, rowsWritten),
    rows_read: usd(PRICES.rowsRead, rowsRead),
    worker_requests: usd(PRICES.workerRequests, m.workerRequests),
    worker_cpu: usd(PRICES.workerCpuMs, cpuMs ?? 0),
    storage: usd(PRICES.storage, storageGbMonth),
    duration_upper_bound: usd(PRICES.doDuration, durationGbS),
  };
  const n = Math.max(1, m.delivered);
  const perMillion = (/** @type {number} */ x) => sig((x / n) * 1e6);
  const total = Object.values(dollars).reduce((a, b) => a + b, 0);
  const cq = queuesUsd({
    delivered: m.delivered,
    bytesPerMessage: m.bytesPerMessage,
    redeliveries: m.redeliveries ?? 0,
  });
  return {
    counts: {
      delivered: m.delivered,
      do_requests: rpcs + alarms,
      do_rpcs: rpcs,
      do_alarms: alarms,
      by_class: m.delta,
      rows_written: rowsWritten,
      rows_read: rowsRead,
      worker_requests: m.workerRequests,
      cpu_ms: cpuMs === null ? null : Math.round(cpuMs),
      storage_gb_month: sig(storageGbMonth),
      active_objects: active,
      // Objects that restarted during the run counted only since: a lower bound where this is not 0.
      restarted_objects: sum("restarted"),
      wall_seconds: round(m.seconds, 2),
      duration_gb_s_upper_bound: sig(durationGbS),
    },
    usd_per_million_by_part: Object.fromEntries(Object.entries(dollars).map(([k, v]) => [k, perMillion(v)])),
    usd_per_million_delivered: perMillion(total),
    cq_usd_per_million: perMillion(cq),
    ratio_vs_cq: cq > 0 ? sig(total / cq) : null,
  };
}

/** The flat figures of a cost block, for the summary table. @param {ReturnType<typeof costModel>} c */
export function costFigures(c) {
  const n = Math.max(1, c.counts.delivered);
  return {
    do_requests_per_msg: round(c.counts.do_requests / n, 3),
    rows_written_per_msg: round(c.counts.rows_written / n, 3),
    rows_read_per_msg: round(c.counts.rows_read / n, 3),
    storage_rows_written_per_msg: round(c.counts.by_class.storage.rowsWritten / n, 3),
    do_rpcs_per_msg: round(c.counts.by_class.storage.rpcs / n, 3),
    usd_per_million: c.usd_per_million_delivered,
    cq_usd_per_million: c.cq_usd_per_million,
    usd_ratio_vs_cq: c.ratio_vs_cq,
    duration_usd_per_million_upper_bound: c.usd_per_million_by_part.duration_upper_bound ?? null,
  };
}

/**
 * The report's cost section: per workload, the run with the median price, its parts, and the
 * price table; empty when no run has a cost block.
 * @param {Array<{ id: string, name: string }>} workloads
 * @param {Array<{ workload: string, system: string, cost?: ReturnType<typeof costModel> }>} runs
 */
export function costMarkdown(workloads, runs) {
  const lines = [
    "### Cost at Cloudflare's list prices",
    "",
    'Dollars per million delivered messages, from every Durable Object\'s own counters over the run (bench/README.md, "Cost model"); the run with the median price of each workload. ' +
      "Cloudflare Queues: 3 operations (write, read, delete) per message of up to 64 KB, $0.40 per million operations. " +
      "Duration is an upper bound (every object that worked during the run, active all of it) and is in the total.",
    "",
    "| workload | shardq $/M | Cloudflare Queues $/M | ratio | goal | DO requests/msg (storage, coordinator, consumer, other) | rows written/msg | rows read/msg | $/M: DO requests, rows written, rows read, duration, Workers, storage | objects active (restarted) |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const w of workloads) {
    const mine = runs
      .filter((r) => r.workload === w.id && r.system === "shardq" && r.cost)
      .sort((a, b) => (a.cost?.usd_per_million_delivered ?? 0) - (b.cost?.usd_per_million_delivered ?? 0));
    const c = mine[mine.length >> 1]?.cost;
    if (!c) continue;
    const n = Math.max(1, c.counts.delivered);
    const per = (/** @type {number} */ x) => round(x / n, 3);
    const k = c.counts.by_class;
    const requests = (/** @type {ClassDelta} */ d) => d.rpcs + d.alarms;
    const parts = c.usd_per_million_by_part;
    const goal = GOALS[w.id];
    const met = goal === undefined || c.ratio_vs_cq === null ? "" : c.ratio_vs_cq <= goal ? " (met)" : " (not met)";
    lines.push(
      `| ${w.id} | ${c.usd_per_million_delivered} | ${c.cq_usd_per_million} | ${c.ratio_vs_cq ?? "–"} | ${goal === undefined ? "–" : `≤ ${goal}${met}`} | ` +
        `${per(c.counts.do_requests)} (${per(requests(k.storage))}, ${per(requests(k.coordinator))}, ${per(requests(k.consumer))}, ${per(requests(k.catalog) + requests(k.idempotency))}) | ` +
        `${per(c.counts.rows_written)} | ${per(c.counts.rows_read)} | ` +
        `${parts.do_requests}, ${parts.rows_written}, ${parts.rows_read}, ${parts.duration_upper_bound}, ${sig((parts.worker_requests ?? 0) + (parts.worker_cpu ?? 0))}, ${parts.storage} | ` +
        `${c.counts.active_objects}${c.counts.restarted_objects ? ` (${c.counts.restarted_objects}: a lower bound)` : ""} |`,
    );
  }
  // Results from before the cost model have no cost block: no section.
  if (!runs.some((r) => r.cost)) return "";
  lines.push("", "Prices (bench/prices.mjs, with the page's words):", "", pricesMarkdown());
  return lines.join("\n");
}

/** Four significant digits. @param {number} x */
const sig = (x) => (x === 0 || !Number.isFinite(x) ? x : Number(x.toPrecision(4)));
/** @param {number} x @param {number} digits */
const round = (x, digits) => Math.round(x * 10 ** digits) / 10 ** digits;
