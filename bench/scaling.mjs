// Workloads 5 and 6 of `npm run bench -- compare`, shardq only:
//  5. backlog scaling: enqueue N with delivery paused, then measure consuming them
//     (messages/s and CPU per message of the service's processes), for growing N;
//  6. autoscaling: a fixed rate of several times one shard's capacity (a capacity far under
//     what the machine holds), then none, sampling shards and throughput every second.
// The simulator has no equivalent of either: it cannot pause delivery and has no shards.
import { readdirSync, readFileSync } from "node:fs";
import { sleep } from "../src/kernel/sleep.ts";

const HEADERS = { authorization: "Bearer shardq-local-dev-token", "content-type": "application/json" };

/** The pids of a process group (wrangler and the workerd it runs), from /proc. @param {number} pgid */
export function groupPids(pgid) {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .map(Number)
    .filter((pid) => Number(statFields(pid)?.[2]) === pgid);
}

/**
 * CPU seconds used so far by every process in a process group: utime + stime from
 * /proc. Null where /proc is not there.
 * @param {number} pgid
 */
export function groupCpuSeconds(pgid) {
  let ticks = 0;
  try {
    for (const pid of groupPids(pgid)) {
      const f = statFields(pid);
      if (f) ticks += Number(f[11]) + Number(f[12]);
    }
  } catch {
    return null;
  }
  return ticks / 100; // USER_HZ is 100 on Linux
}

/** /proc/<pid>/stat after the command name (which may hold spaces): state is [0], pgrp [2]. @param {number} pid */
function statFields(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return null;
  }
}

/** @param {string} base @param {string} path @param {string} method @param {unknown} [body] */
export async function api(base, path, method, body) {
  const res = await fetch(`${base}/shardq/accounts/local${path}`, {
    method,
    headers: HEADERS,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return /** @type {any} */ (await res.json()).result;
}

/** @param {string} base */
async function sinkStats(base) {
  return /** @type {any} */ (await (await fetch(`${base}/sink/stats`)).json());
}

/**
 * Workload 5 at one backlog size: fills the queue with delivery paused (sendBatch of
 * 100 through the driver), then resumes delivery and times the drain.
 * @param {string} base @param {number} pgid @param {number} backlog
 */
export async function backlogRun(base, pgid, backlog) {
  await fetch(`${base}/sink/reset`, { method: "POST" });
  await api(base, "/queues/bench", "PATCH", { settings: { delivery_paused: true } });
  for (let sent = 0; sent < backlog;) {
    const n = Math.min(50_000, backlog - sent);
    const r = /** @type {any} */ (
      await (await fetch(`${base}/run?count=${n}&concurrency=8&batch=100&rate=0`, { method: "POST" })).json()
    );
    if (r.error) throw new Error(`driver: ${r.error}`);
    sent += r.sent;
  }
  const metrics = await api(base, "/queues/bench/metrics", "GET");
  const cpu0 = groupCpuSeconds(pgid);
  const started = performance.now();
  await api(base, "/queues/bench", "PATCH", { settings: { delivery_paused: false } });
  const deadline = Date.now() + Math.max(120_000, backlog / 2);
  let s = await sinkStats(base);
  while (s.distinct < backlog && Date.now() < deadline) {
    await sleep(100);
    s = await sinkStats(base);
  }
  const seconds = (performance.now() - started) / 1000;
  const cpu1 = groupCpuSeconds(pgid);
  return {
    backlog: metrics.backlog_count,
    delivered: s.distinct,
    delivered_msgs_per_s: Math.round(s.distinct / seconds),
    cpu_us_per_msg:
      cpu0 !== null && cpu1 !== null && s.distinct ? Math.round(((cpu1 - cpu0) * 1e6) / s.distinct) : null,
  };
}

/**
 * Workload 6's set-up. Each shard takes at most `capacity` msg/s, far under what this
 * machine holds (the ceiling, bench/README.md), so the shards run out before the CPU does
 * and the run measures the autoscaler, not the machine: `rate` needs ceil(rate / capacity)
 * shards, and there is room to overshoot up to `maxShards`.
 */
export const W6 = { capacity: 100, rate: 400, minShards: 1, maxShards: 16, heartbeatMs: 1000, scaleInAfterMs: 10_000 };

/**
 * The service's vars for workload 6's stack (TARGET_MESSAGES_PER_SHARD unset: the target follows
 * the capacity). SHARDS_PER_REGION unset too: a queue starts with one shard and is back at one
 * after the load (`minShards`), as every queue on the deployed defaults (docs/cost.md).
 */
export function w6Vars() {
  return {
    SHARD_CAPACITY_PER_SECOND: String(W6.capacity),
    MAX_SHARDS_PER_REGION: String(W6.maxShards),
    HEARTBEAT_INTERVAL_MS: String(W6.heartbeatMs),
    SCALE_IN_AFTER_MS: String(W6.scaleInAfterMs),
  };
}

/** The producer offers its load in calls of this many ms' worth, each message paced and sent on its own. */
const CALL_MS = 250;
/** Calls in flight at most: a producer with about a second of sends outstanding waits before it offers more. */
const MAX_CALLS = 4;
/**
 * Seconds over which the accepted rate is averaged before it counts as held: a send counts when
 * its driver call returns, up to a call later than it was stored, so one second is too noisy.
 */
const HOLD_WINDOW = 5;
/** After the load, how long past SCALE_IN_AFTER_MS and a heartbeat the run waits for the queue to drain back. */
const DRAIN_MARGIN_MS = 20_000;

/**
 * Workload 6: offers `rate` msg/s of single send()s for `seconds` (a call of CALL_MS' worth
 * every CALL_MS, paced within it, at most MAX_CALLS in flight: a blocked producer offers
 * less, and what it offers is counted), then stops and waits for the queue to drain back to
 * its minimum of shards and deliver everything. Samples every second: offered, accepted
 * (send() resolved) and delivered messages/s, active and draining storage shards, sends
 * refused to the producer, and sends the shards refused (the broker then tried another).
 * @param {string} base @param {{ rate: number, seconds: number }} w
 */
export async function autoscaleRun(base, w) {
  await fetch(`${base}/sink/reset`, { method: "POST" });
  const tally = { offered: 0, sent: 0, failed: 0, error: "" };
  const first = await shardsView(base);
  /** @type {Array<{ t: number, shards: number, draining: number, offered_per_s: number, sent_per_s: number, delivered_per_s: number, refused: number, shard_refusals: number, room: boolean }>} */
  const samples = [
    {
      t: 0,
      shards: first.shards.filter((s) => s.state === "active").length,
      draining: 0,
      offered_per_s: 0,
      sent_per_s: 0,
      delivered_per_s: 0,
      refused: 0,
      shard_refusals: 0,
      room: true,
    },
  ];
  const started = performance.now();
  const loadEnd = started + w.seconds * 1000;
  let stoppedAt = /** @type {number | null} */ (null);
  const offering = offer(base, w.rate, loadEnd, tally).then(() => (stoppedAt = performance.now()));

  const beats = new Map();
  let last = { t: 0, offered: 0, sent: 0, failed: 0, delivered: 0 };
  let received = 0;
  // Gathered as the run goes: the Coordinator keeps its latest 50 only, and consumer-shard decisions are many.
  /** @type {Map<string, { at: number, kind: string, reason: string }>} */
  const decisions = new Map();
  for (;;) {
    await sleep(1000 - ((performance.now() - started) % 1000));
    const view = await shardsView(base);
    const sink = await sinkStats(base);
    const t = (performance.now() - started) / 1000;
    const dt = Math.max(0.001, t - last.t);
    let shardRefusals = 0;
    for (const s of view.shards) {
      const b = s.heartbeat;
      if (!b || beats.get(s.name) === b.received_at) continue;
      beats.set(s.name, b.received_at);
      shardRefusals += b.refusals;
    }
    const active = view.shards.filter((s) => s.state === "active");
    samples.push({
      t: Math.round(t * 10) / 10,
      shards: active.length,
      draining: view.shards.filter((s) => s.state === "draining").length,
      offered_per_s: Math.round((tally.offered - last.offered) / dt),
      sent_per_s: Math.round((tally.sent - last.sent) / dt),
      delivered_per_s: Math.round((sink.distinct - last.delivered) / dt),
      refused: tally.failed - last.failed,
      shard_refusals: shardRefusals,
      // Some active shard refused nothing and took under 90% of its capacity in its latest report (or has not reported yet).
      room: active.some(
        (s) =>
          !s.heartbeat ||
          !s.heartbeat.period_ms ||
          (s.heartbeat.refusals === 0 && (s.heartbeat.messages_in * 1000) / s.heartbeat.period_ms < 0.9 * W6.capacity),
      ),
    });
    last = { t, offered: tally.offered, sent: tally.sent, failed: tally.failed, delivered: sink.distinct };
    received = sink.received;
    for (const d of view.decisions) decisions.set(`${d.at} ${d.kind} ${d.target}`, d);
    const settled = active.length === W6.minShards && samples.at(-1)?.draining === 0 && sink.distinct >= tally.sent;
    if (
      stoppedAt !== null &&
      (settled || performance.now() > stoppedAt + W6.scaleInAfterMs + W6.heartbeatMs + DRAIN_MARGIN_MS)
    )
      break;
  }
  await offering;
  // The Coordinator's wall clock (ms since the epoch) against the samples' seconds since the start.
  const epoch = Date.now() - (performance.now() - started);
  const log = [...decisions.values()]
    .sort((a, b) => a.at - b.at)
    .map((d) => ({ t: Math.round((d.at - epoch) / 100) / 10, kind: d.kind, reason: d.reason }))
    .filter((d) => d.t >= 0);
  const run = {
    ...w,
    offered: tally.offered,
    sent: tally.sent,
    failed: tally.failed,
    delivered: last.delivered,
    received,
    stoppedAt: ((stoppedAt ?? started) - started) / 1000,
  };
  return { figures: w6Figures(samples, run, log), samples, decisions: log };
}

/**
 * Offers the load until `end`, in calls of CALL_MS' worth; returns once every call is answered.
 * @param {string} base @param {number} rate @param {number} end @param {{ offered: number, sent: number, failed: number, error: string }} tally
 */
async function offer(base, rate, end, tally) {
  const perCall = Math.max(1, Math.round((rate * CALL_MS) / 1000));
  const calls = new Set();
  for (let due = performance.now(); due < end;) {
    await sleep(Math.max(0, due - performance.now()));
    while (calls.size >= MAX_CALLS) await Promise.race(calls);
    tally.offered += perCall;
    const call = fetch(`${base}/run?count=${perCall}&concurrency=${perCall}&batch=1&rate=${rate}&continue=1`, {
      method: "POST",
    })
      .then((r) => r.json())
      .then(
        (/** @type {any} */ r) => {
          tally.sent += r.sent;
          tally.failed += r.failed ?? perCall - r.sent;
        },
        (err) => {
          tally.failed += perCall;
          tally.error ||= String(err);
        },
      )
      .finally(() => calls.delete(call));
    calls.add(call);
    // A call that had to wait for a free slot is not made up for: the producer was blocked.
    due = Math.max(due, performance.now()) + CALL_MS;
  }
  await Promise.all(calls);
}

/**
 * The figures of one w6 run, against the goals of bench/README.md ("w6").
 * @param {Array<{ t: number, shards: number, draining: number, sent_per_s: number, delivered_per_s: number, refused: number, shard_refusals: number, room: boolean }>} samples
 * @param {{ rate: number, seconds: number, offered: number, sent: number, failed: number, delivered: number, received: number, stoppedAt: number }} r
 * @param {Array<{ t: number, kind: string }>} decisions  the Coordinator's, in seconds since the start
 */
export function w6Figures(samples, r, decisions) {
  const loading = samples.filter((s) => s.t <= r.seconds);
  // Accepted over the last HOLD_WINDOW samples: the first second from which it stays at 0.9 of the rate or more.
  const held = loading.map(
    (_, i) =>
      i >= HOLD_WINDOW - 1 &&
      loading.slice(i - HOLD_WINDOW + 1, i + 1).reduce((n, s) => n + s.sent_per_s, 0) / HOLD_WINDOW >= 0.9 * r.rate,
  );
  const from = held.lastIndexOf(false) + 1;
  const after = samples.filter((s) => s.t >= r.stoppedAt);
  const atMin = after.find((s) => s.shards === W6.minShards);
  // When the drain that brought it there was decided: the samples only bound it to the second.
  const drained =
    atMin && decisions.filter((d) => d.kind === "drain_shard" && d.t >= r.stoppedAt && d.t <= atMin.t).at(-1);
  const retired = after.find((s) => s.shards === W6.minShards && s.draining === 0);
  const steady = loading.filter((s) => s.t > r.seconds / 2);
  const mean = (/** @type {number[]} */ v) => (v.length ? Math.round(v.reduce((a, b) => a + b, 0) / v.length) : null);
  return {
    target_msgs_per_s: r.rate,
    shards_needed: Math.ceil(r.rate / W6.capacity),
    shards_at_start: samples[0]?.shards ?? null,
    shards_peak: Math.max(0, ...samples.map((s) => s.shards)),
    hold_90_after_s: from < loading.length ? (loading[from]?.t ?? null) : null,
    accepted_msgs_per_s: mean(steady.map((s) => s.sent_per_s)),
    // Throughput over the second half of the sending period, once scaled out.
    delivered_msgs_per_s: mean(steady.map((s) => s.delivered_per_s)),
    send_errors: r.failed,
    refused_with_room: samples.filter((s) => s.room).reduce((n, s) => n + s.refused, 0),
    shard_refusals: samples.reduce((n, s) => n + s.shard_refusals, 0),
    stopped_at_s: Math.round(r.stoppedAt * 10) / 10,
    drain_to_min_s: atMin ? Math.round(((drained ? drained.t : atMin.t) - r.stoppedAt) * 10) / 10 : null,
    retired_s: retired ? Math.round((retired.t - r.stoppedAt) * 10) / 10 : null,
    offered: r.offered,
    sent: r.sent,
    delivered: r.delivered,
    duplicates: r.received - r.delivered,
    missing: Math.max(0, r.sent - r.delivered),
  };
}

/**
 * The report's w6 section: each run's figures against the goals (bench/README.md, "w6").
 * @param {Array<{ workload: string, run?: number, figures: Record<string, number | null> }>} runs
 */
export function w6Markdown(runs) {
  const mine = runs.filter((r) => r.workload === "w6");
  if (!mine.length) return "";
  const bound = (W6.scaleInAfterMs + W6.heartbeatMs) / 1000;
  const mark = (/** @type {boolean} */ ok) => (ok ? "met" : "missed");
  const rows = mine.map(({ run, figures: f }, i) => {
    const needed = /** @type {number} */ (f.shards_needed);
    const peak = /** @type {number} */ (f.shards_peak);
    return [
      `| ${run ?? i + 1}`,
      `${f.hold_90_after_s ?? "never"} s: ${mark(f.hold_90_after_s !== null && /** @type {number} */ (f.hold_90_after_s) <= 30)}`,
      `${peak} of ${needed} needed (${Math.round((peak / needed) * 100) / 100}x): ${mark(peak <= 1.5 * needed)}`,
      `${f.refused_with_room} (${f.send_errors} refused in all; ${f.shard_refusals} refusals by shards, placed elsewhere or later): ${mark(f.refused_with_room === 0)}`,
      `${f.drain_to_min_s ?? "not within the run"} s (drained shards retired at ${f.retired_s ?? "–"} s): ${mark(f.drain_to_min_s !== null && /** @type {number} */ (f.drain_to_min_s) <= bound)}`,
      `${f.sent} / ${f.delivered} / ${f.duplicates} / ${f.missing}: ${mark(f.duplicates === 0 && f.missing === 0 && f.delivered === f.sent)} |`,
    ].join(" | ");
  });
  return [
    `### w6: autoscaling against its goals`,
    "",
    `${W6.rate} msg/s offered against shards of ${W6.capacity} msg/s (SHARD_CAPACITY_PER_SECOND), from ${W6.minShards} shard, then none; ` +
      `SCALE_IN_AFTER_MS ${W6.scaleInAfterMs}, HEARTBEAT_INTERVAL_MS ${W6.heartbeatMs}. Goals: at least 0.9 of the rate accepted (${HOLD_WINDOW} s average) from within 30 s on; ` +
      `a peak of at most 1.5x the shards needed; no send refused to the producer while some active shard had room (its last report: no refusals, under 0.9 of its capacity); ` +
      `back to the minimum within SCALE_IN_AFTER_MS plus a heartbeat (${bound} s) of the load stopping; every message delivered once.`,
    "",
    "| run | held 0.9 of the rate from | peak shards | refused with room | back to the minimum after the stop | sent / delivered / duplicates / missing |",
    "| --- | --- | --- | --- | --- | --- |",
    ...rows,
  ].join("\n");
}

/** @param {string} base @returns {Promise<{ shards: Array<{ name: string, state: string, heartbeat: { received_at: number, refusals: number, messages_in: number, period_ms: number } | null }>, decisions: Array<{ at: number, kind: string, target: string | null, reason: string }> }>} */
const shardsView = (base) => api(base, "/queues/bench/shards", "GET");
