// The load tester: `npm run bench -- load [options]`. Sends messages to a shardq
// deployment (the local `npm start` service by default) over HTTP, one per request or
// in batches, or through the producer binding (the example producer Worker acts as the
// driver), as fast as --concurrency allows or at a fixed --rate; shows progress every
// second; optionally waits until the consumer has everything; ends with a summary
// table and, with --json, writes the figures. Every loop is bounded by --count and
// --seconds; the target is loopback unless --url names another.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { ApiError, NetworkError, createClient } from "../src/client/index.ts";
import { LIMITS } from "../src/kernel/limits.ts";
import { sleep } from "../src/kernel/sleep.ts";

export const LOAD_HELP = `npm run bench -- load [options]
  --url URL            service base URL (default http://127.0.0.1:8787)
  --token TOKEN        bearer token (default the local dev token, or $SHARDQ_TOKEN)
  --account ID         account id (default local)
  --queue NAME         queue (default example)
  --transport T        http (one message per request, or --batch per request) | binding
  --producer-url URL   the driver Worker for --transport binding (default http://127.0.0.1:8788, the example producer)
  --count N            messages to send (default 1000)
  --batch N            messages per request or sendBatch() (default 1; over HTTP at most 256 KB of bodies)
  --concurrency N      requests in flight (default 16)
  --rate N             hold N messages/s instead of going as fast as possible
  --size BYTES         body size (default 64)
  --work-ms MS         ask the example consumer to spend MS on each message
  --seconds S          stop sending after S seconds (default 120)
  --wait               wait until the queue's backlog is drained (at most --seconds more)
  --consumer-stats URL where the consumer reports what it received (default <producer-url>/consumer/stats)
  --json FILE          write the figures as JSON`;

/** @param {string[]} argv */
export async function load(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      url: { type: "string", default: "http://127.0.0.1:8787" },
      token: { type: "string", default: process.env.SHARDQ_TOKEN ?? "shardq-local-dev-token" },
      account: { type: "string", default: "local" },
      queue: { type: "string", default: "example" },
      transport: { type: "string", default: "http" },
      "producer-url": { type: "string", default: "http://127.0.0.1:8788" },
      count: { type: "string", default: "1000" },
      batch: { type: "string", default: "1" },
      concurrency: { type: "string", default: "16" },
      rate: { type: "string", default: "0" },
      size: { type: "string", default: "64" },
      "work-ms": { type: "string", default: "0" },
      seconds: { type: "string", default: "120" },
      wait: { type: "boolean", default: false },
      "consumer-stats": { type: "string" },
      json: { type: "string" },
    },
  });
  const num = (/** @type {string} */ name, /** @type {number} */ min, /** @type {number} */ max) => {
    const n = Number(o[/** @type {keyof typeof o} */ (name)]);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new Error(`--${name} must be an integer from ${min} to ${max}`);
    return n;
  };
  if (o.transport !== "http" && o.transport !== "binding") throw new Error('--transport must be "http" or "binding"');
  const cfg = {
    count: num("count", 1, 10_000_000),
    batch: num("batch", 1, 100),
    concurrency: num("concurrency", 1, 1024),
    rate: num("rate", 0, 1_000_000),
    size: num("size", 1, 120_000),
    workMs: num("work-ms", 0, 1000),
    seconds: num("seconds", 1, 86_400),
  };
  // The load tester measures the service, so its client sends each request once and
  // without an idempotency key, as the requests it wrote itself before the client library:
  // a retry would turn an error into a slower success and fold its backoff into the send
  // latency, and a keyed send costs the broker a claim and a look-up that an unkeyed one
  // does not (src/routing/idempotent-send.ts). The timeout is fetch's own (undici's 300 s).
  const client = createClient({
    url: o.url,
    token: o.token,
    account: o.account,
    idempotentSends: false,
    retry: { attempts: 1 },
    timeoutMs: 300_000,
  });
  const queue = client.queue(o.queue);
  const consumerStats = o["consumer-stats"] ?? `${o["producer-url"]}/consumer/stats?queue=${o.queue}`;
  const pad = "x".repeat(cfg.size);
  const message = () => ({ pad, sent_at: Date.now(), ...(cfg.workMs ? { work_ms: cfg.workMs } : {}) });
  // The client cuts a batch over 256 KB into several requests; one call must stay one
  // request, or throughput and latency would be of something else than --batch says.
  const batchBytes = cfg.batch * JSON.stringify(message()).length;
  if (o.transport === "http" && cfg.batch > 1 && batchBytes > LIMITS.maxBatchBytes) {
    throw new Error(
      `--batch ${cfg.batch} of --size ${cfg.size} makes ${batchBytes} bytes of bodies, over the ${LIMITS.maxBatchBytes} one request takes: lower --batch or --size`,
    );
  }

  /** One request's worth: returns how many were stored, or throws with a kind. */
  const sendHttp = async (/** @type {number} */ n) => {
    try {
      if (cfg.batch === 1) await queue.send(message());
      else await queue.sendBatch(Array.from({ length: n }, () => ({ body: message() })));
    } catch (err) {
      throw new Kind(kindOf(err));
    }
    return { stored: n, latencies: null };
  };
  /** Through the driver Worker: one call sends `n` messages with the binding, `batch` per call. */
  const sendBinding = async (/** @type {number} */ n) => {
    const res = await fetch(`${o["producer-url"]}/send?count=${n}&batch=${cfg.batch}&concurrency=1`, {
      method: "POST",
    });
    const json = /** @type {any} */ (await res.json().catch(() => null));
    if (!json || typeof json.sent !== "number") throw new Kind(`driver http ${res.status}`);
    if (json.error) throw new Kind(`binding: ${String(json.error).slice(0, 120)}`, json.sent, json.latencies);
    return { stored: json.sent, latencies: /** @type {number[]} */ (json.latencies) };
  };
  const send = o.transport === "http" ? sendHttp : sendBinding;
  // Through the driver, each request makes one call (send() or a sendBatch() of --batch).
  const perRequest = cfg.batch;

  const metricsAt = async () =>
    /** @type {any} */ (
      await client.request("GET", `/queues/${encodeURIComponent(o.queue)}/metrics`).catch(() => null)
    );
  const received = async () => {
    const res = await fetch(consumerStats).catch(() => null);
    return res?.ok ? /** @type {any} */ (await res.json()) : null;
  };

  const startStats = await received();
  const latencies = /** @type {number[]} */ ([]);
  const errors = /** @type {Record<string, number>} */ ({});
  let sent = 0;
  let next = 0;
  const started = performance.now();
  const deadline = Date.now() + cfg.seconds * 1000;

  const progress = setInterval(async () => {
    const m = await metricsAt();
    const r = await received();
    const elapsed = (performance.now() - started) / 1000;
    const delivered = r && startStats ? r.distinct - startStats.distinct : null;
    const errs = Object.values(errors).reduce((a, b) => a + b, 0);
    console.log(
      `${elapsed.toFixed(0).padStart(4)} s  sent ${sent}  errors ${errs}  ${Math.round(sent / elapsed)} msg/s  backlog ${m?.backlog_count ?? "?"}${delivered === null ? "" : `  delivered ${delivered}`}`,
    );
  }, 1000);

  await Promise.all(
    Array.from({ length: cfg.concurrency }, async () => {
      while (next < cfg.count && Date.now() < deadline) {
        const first = next;
        const n = Math.min(perRequest, cfg.count - first);
        next += n;
        if (cfg.rate > 0) await sleep(started + (first / cfg.rate) * 1000 - performance.now());
        const t0 = performance.now();
        try {
          const r = await send(n);
          sent += r.stored;
          if (r.latencies) latencies.push(...r.latencies);
          else latencies.push(performance.now() - t0);
        } catch (err) {
          const kind = err instanceof Kind ? err.message : `network: ${/** @type {Error} */ (err).message}`;
          errors[kind] = (errors[kind] ?? 0) + 1;
          if (err instanceof Kind) sent += err.stored;
        }
      }
    }),
  );
  const sendSeconds = (performance.now() - started) / 1000;

  if (o.wait) {
    const waitUntil = Date.now() + cfg.seconds * 1000;
    for (;;) {
      const m = await metricsAt();
      if (!m || m.backlog_count === 0 || Date.now() > waitUntil) break;
      await sleep(500);
    }
  }
  clearInterval(progress);
  const endStats = await received();

  latencies.sort((a, b) => a - b);
  const at = (/** @type {number} */ i) => /** @type {number} */ (latencies[i]);
  const pct = (/** @type {number} */ p) =>
    latencies.length ? +at(Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))).toFixed(2) : null;
  const e2e = endStats?.latencyMs ?? null;
  const figures = {
    transport: o.transport,
    batch: cfg.batch,
    concurrency: cfg.concurrency,
    rate: cfg.rate || null,
    size: cfg.size,
    sent,
    errors,
    seconds: +sendSeconds.toFixed(2),
    throughput_msgs_per_s: Math.round(sent / sendSeconds),
    send_latency_ms: {
      p50: pct(50),
      p95: pct(95),
      p99: pct(99),
      max: latencies.length ? +at(latencies.length - 1).toFixed(2) : null,
    },
    // The consumer's figures over everything it received (first deliveries), this run and any before it.
    end_to_end_latency_ms: e2e ? { p50: e2e.p50, p95: e2e.p95, p99: e2e.p99, max: e2e.max, samples: e2e.count } : null,
    delivered: endStats && startStats ? endStats.distinct - startStats.distinct : null,
    duplicates: endStats && startStats ? endStats.duplicates - startStats.duplicates : null,
  };
  printSummary(figures);
  if (o.json) writeFileSync(o.json, `${JSON.stringify(figures, null, 2)}\n`);
  return figures;
}

/**
 * How an error of the client library is counted: "http 503: <the API's message>" for an
 * answer (or a request the client refused before sending, with the status the API would
 * give), "network: cannot reach <url>: connection reset" when there was none.
 * @param {unknown} err
 */
function kindOf(err) {
  if (err instanceof ApiError) return `http ${err.status}: ${err.message}`;
  if (err instanceof NetworkError) return `network: ${err.message}`;
  return `error: ${/** @type {Error} */ (err)?.message ?? String(err)}`;
}

class Kind extends Error {
  /** @param {string} message @param {number} [stored] @param {number[]} [latencies] */
  constructor(message, stored = 0, latencies = []) {
    super(message);
    this.stored = stored;
    this.latencies = latencies;
  }
}

/** @param {any} f */
function printSummary(f) {
  /** @type {Array<[string, string]>} */
  const rows = [
    [
      "transport",
      `${f.transport}${f.batch > 1 ? `, ${f.batch} per call` : ""}, ${f.rate ? `${f.rate} msg/s` : `${f.concurrency} in flight`}, ${f.size} B`,
    ],
    ["sent", `${f.sent} in ${f.seconds} s`],
    ["throughput", `${f.throughput_msgs_per_s} msg/s`],
    ["send latency p50 / p95 / p99 / max", ms(f.send_latency_ms, ["p50", "p95", "p99", "max"])],
    [
      "end-to-end latency p50 / p95 / p99",
      f.end_to_end_latency_ms ? ms(f.end_to_end_latency_ms, ["p50", "p95", "p99"]) : "n/a (no consumer stats)",
    ],
    ["delivered / duplicates", f.delivered === null ? "n/a" : `${f.delivered} / ${f.duplicates}`],
    [
      "errors",
      Object.keys(f.errors).length
        ? Object.entries(f.errors)
            .map(([k, v]) => `${v} x ${k}`)
            .join("; ")
        : "none",
    ],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  console.log("");
  for (const [k, v] of rows) console.log(`${k.padEnd(w)}  ${v}`);
}

/** @param {Record<string, number | null>} o @param {string[]} keys */
const ms = (o, keys) => keys.map((k) => (o[k] === null ? "-" : `${o[k]} ms`)).join(" / ");
