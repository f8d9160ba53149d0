// Workloads 5 and 6 of `npm run bench -- compare`, shardq only:
//  5. backlog scaling: enqueue N with delivery paused, then measure consuming them
//     (messages/s and CPU per message of the service's processes), for growing N;
//  6. autoscaling: a fixed rate of several times one shard's capacity, sampling active
//     storage shards and throughput every second.
// The simulator has no equivalent of either: it cannot pause delivery and has no shards.
import { readdirSync, readFileSync } from "node:fs";

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
async function api(base, path, method, body) {
  const res = await fetch(`${base}/shardq/accounts/local${path}`, { method, headers: HEADERS, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
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
  for (let sent = 0; sent < backlog; ) {
    const n = Math.min(50_000, backlog - sent);
    const r = /** @type {any} */ (await (await fetch(`${base}/run?count=${n}&concurrency=8&batch=100&rate=0`, { method: "POST" })).json());
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
    cpu_us_per_msg: cpu0 !== null && cpu1 !== null && s.distinct ? Math.round(((cpu1 - cpu0) * 1e6) / s.distinct) : null,
  };
}

/**
 * Workload 6: sends at `rate` msg/s for `seconds` (one driver call per second's worth,
 * so sending goes on while this samples), sampling every second: active storage
 * shards, messages sent and delivered per second. Then samples until delivered.
 * @param {string} base @param {{ rate: number, seconds: number }} w
 */
export async function autoscaleRun(base, w) {
  await fetch(`${base}/sink/reset`, { method: "POST" });
  const total = w.rate * w.seconds;
  const activeShards = async () => (await api(base, "/queues/bench/shards", "GET")).shards.filter((/** @type {{ state: string }} */ s) => s.state === "active").length;
  const before = await activeShards();
  let sent = 0;
  let errors = 0;
  const sending = (async () => {
    for (let i = 0; i < w.seconds; i++) {
      const r = /** @type {any} */ (await (await fetch(`${base}/run?count=${w.rate}&concurrency=256&batch=1&rate=${w.rate}`, { method: "POST" })).json());
      sent += r.sent;
      if (r.error) errors++;
    }
  })();
  /** @type {Array<{ t: number, shards: number, sent_per_s: number, delivered_per_s: number }>} */
  const samples = [{ t: 0, shards: before, sent_per_s: 0, delivered_per_s: 0 }];
  const started = performance.now();
  let last = { t: 0, sent: 0, delivered: 0 };
  let done = false;
  void sending.finally(() => (done = true));
  const deadline = Date.now() + (w.seconds + 60) * 1000;
  for (;;) {
    await sleep(1000);
    const shards = await activeShards();
    const delivered = (await sinkStats(base)).distinct;
    const t = (performance.now() - started) / 1000;
    const dt = t - last.t;
    samples.push({
      t: Math.round(t * 10) / 10,
      shards,
      sent_per_s: Math.round((sent - last.sent) / dt),
      delivered_per_s: Math.round((delivered - last.delivered) / dt),
    });
    last = { t, sent, delivered };
    if ((done && delivered >= sent) || Date.now() > deadline) break;
  }
  await sending;
  const peak = Math.max(...samples.map((s) => s.shards));
  const steady = samples.filter((s) => s.t > w.seconds / 2 && s.t <= w.seconds);
  return {
    figures: {
      sent,
      delivered: last.delivered,
      send_errors: errors,
      shards_at_start: samples[0]?.shards ?? null,
      shards_peak: peak,
      // Throughput over the second half of the sending period, once scaled out.
      delivered_msgs_per_s: steady.length ? Math.round(steady.reduce((n, s) => n + s.delivered_per_s, 0) / steady.length) : null,
      target_msgs_per_s: total / w.seconds,
    },
    samples,
  };
}

const sleep = (/** @type {number} */ ms) => new Promise((r) => setTimeout(r, ms));
