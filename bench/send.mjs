// A small sender for the write path: `npm run send -- --count 1000 --concurrency 16`.
// Sends single messages (or --batch N per request) over HTTP to a running shardq
// (default: the local `npm start` service), as fast as --concurrency allows or at a
// fixed --rate (messages/s), then prints throughput, latency percentiles and the
// queue's backlog. Bounded by --count and --seconds.
import { parseArgs } from "node:util";

const { values: opts } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8787" },
    token: { type: "string", default: process.env.SHARDQ_TOKEN ?? "shardq-local-dev-token" },
    account: { type: "string", default: "local" },
    queue: { type: "string", default: "example" },
    count: { type: "string", default: "1000" },
    batch: { type: "string", default: "1" },
    concurrency: { type: "string", default: "16" },
    size: { type: "string", default: "64" },
    seconds: { type: "string", default: "120" },
    rate: { type: "string", default: "0" },
    "work-ms": { type: "string", default: "0" },
  },
});

const count = int("count", 1, 1_000_000);
const batch = int("batch", 1, 100);
const concurrency = int("concurrency", 1, 512);
const size = int("size", 1, 127_000);
const deadline = Date.now() + int("seconds", 1, 3600) * 1000;
const rate = int("rate", 0, 100_000);
const workMs = int("work-ms", 0, 1000);
const base = `${opts.url}/accounts/${opts.account}/queues/${opts.queue}`;
const headers = { authorization: `Bearer ${opts.token}`, "content-type": "application/json" };
const payload = "x".repeat(size);
/** With --work-ms the example consumer spends that long on each message (a JSON body). */
const message = () => (workMs ? { body: { pad: payload, work_ms: workMs } } : { body: payload, content_type: "text" });

/** @type {number[]} */
const latencies = [];
let sent = 0;
let errors = 0;
let next = 0;
const started = performance.now();

await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (next < count && Date.now() < deadline) {
      const n = Math.min(batch, count - next);
      const slot = next;
      next += n;
      // At a fixed rate, request k leaves at started + k * batch / rate.
      if (rate > 0) await new Promise((r) => setTimeout(r, Math.max(0, started + (slot / rate) * 1000 - performance.now())));
      const body = batch === 1 ? JSON.stringify(message()) : JSON.stringify({ messages: Array.from({ length: n }, message) });
      const t0 = performance.now();
      try {
        const res = await fetch(batch === 1 ? `${base}/messages` : `${base}/messages/batch`, { method: "POST", headers, body });
        await res.arrayBuffer();
        if (res.ok) sent += n;
        else errors++;
      } catch {
        errors++;
      }
      latencies.push(performance.now() - t0);
    }
  }),
);

const seconds = (performance.now() - started) / 1000;
latencies.sort((a, b) => a - b);
const pct = (/** @type {number} */ p) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]?.toFixed(1);
const metrics = await fetch(`${base}/metrics`, { headers }).then((r) => r.json()).catch(() => null);
console.log(
  JSON.stringify(
    {
      sent,
      errors,
      seconds: +seconds.toFixed(2),
      messages_per_second: Math.round(sent / seconds),
      request_latency_ms: { p50: pct(50), p95: pct(95), p99: pct(99), max: latencies.at(-1)?.toFixed(1) },
      backlog_count: metrics?.result?.backlog_count,
      backlog_per_shard: metrics?.result?.shards?.map((/** @type {{ backlog_count: number }} */ s) => s.backlog_count),
    },
    null,
    2,
  ),
);

/** @param {keyof typeof opts} name @param {number} min @param {number} max */
function int(name, min, max) {
  const n = Number(opts[name]);
  if (!Number.isInteger(n) || n < min || n > max) {
    console.error(`--${name} must be an integer from ${min} to ${max}`);
    process.exit(2);
  }
  return n;
}
