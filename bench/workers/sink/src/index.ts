/**
 * The benchmark's consumer: acks everything and counts what it received, in memory
 * (one isolate in local dev), with the end-to-end latency of each first delivery.
 * The same code consumes from Cloudflare Queues' simulator and from shardq.
 * GET /stats[?batches=1], POST /reset[?sleep_ms=N].
 *
 * For the ordered-lane workloads (w8, bench/ordered.mjs) bodies carry their ordering key `k`
 * and its sequence number `s` in the order the driver had them accepted. The sink checks
 * what a consumer would see of ordering: a first delivery whose `s` is below one already
 * delivered for its key (`order_violations`), and a batch holding a key that another batch
 * still being handled holds (`key_overlaps`; only a handler that sleeps is still running
 * when the next batch arrives). With `sleep_ms` each batch's handler sleeps that long before
 * acking, a consumer of a known round trip; every keyed batch's start, end and size are kept
 * for the timeline (`?batches=1`).
 */
let received = 0;
let seen = new Set<string>();
let latencies: number[] = [];
let lastAt = 0;
let sleepMs = 0;
/** Per key, the highest sequence number first-delivered so far. */
let lastSeq = new Map<string, number>();
let orderViolations = 0;
/** Per key, batches holding it whose handler has not returned. */
let inFlight = new Map<string, number>();
let keyOverlaps = 0;
let running = 0;
let maxRunning = 0;
/** Keyed batches: [start ms, end ms (-1 while it runs), messages]. Bounded: a run of the workloads keeps far fewer. */
let batches: Array<[number, number, number]> = [];
const MAX_BATCHES = 50_000;

type Body = { sent_at?: number; k?: string; s?: number };

export default {
  async queue(batch: MessageBatch<Body>): Promise<void> {
    const start = Date.now();
    running++;
    maxRunning = Math.max(maxRunning, running);
    const keys = new Set<string>();
    for (const m of batch.messages) {
      received++;
      const k = m.body?.k;
      if (typeof k === "string") keys.add(k);
      if (!seen.has(m.id)) {
        seen.add(m.id);
        if (typeof m.body?.sent_at === "number" && latencies.length < 200_000) latencies.push(start - m.body.sent_at);
        const s = m.body?.s;
        if (typeof k === "string" && typeof s === "number") {
          const last = lastSeq.get(k);
          if (last !== undefined && s < last) orderViolations++;
          else lastSeq.set(k, s);
        }
      }
    }
    for (const k of keys) {
      const n = inFlight.get(k) ?? 0;
      if (n > 0) keyOverlaps++;
      inFlight.set(k, n + 1);
    }
    // Kept from its start, so that a batch still sleeping when the run is read is in the timeline (its end -1).
    const entry: [number, number, number] = [start, -1, batch.messages.length];
    if (keys.size && batches.length < MAX_BATCHES) batches.push(entry);
    try {
      if (sleepMs > 0) await new Promise((r) => setTimeout(r, sleepMs));
      // After the sleep, Date.now() has moved (workerd advances it on I/O, a timer included).
      entry[1] = Date.now();
      lastAt = entry[1];
      batch.ackAll();
    } finally {
      running--;
      for (const k of keys) inFlight.set(k, (inFlight.get(k) ?? 1) - 1);
    }
  },

  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/reset" && request.method === "POST") {
      received = 0;
      seen = new Set();
      latencies = [];
      lastAt = 0;
      sleepMs = Number(url.searchParams.get("sleep_ms") ?? 0) || 0;
      lastSeq = new Map();
      orderViolations = 0;
      inFlight = new Map();
      keyOverlaps = 0;
      maxRunning = running;
      batches = [];
      return Response.json({ reset: true, sleep_ms: sleepMs });
    }
    if (url.pathname === "/stats") {
      const sorted = [...latencies].sort((a, b) => a - b);
      const pct = (p: number) =>
        sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : null;
      const cdf = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100].map((p) => [p, pct(p)]);
      return Response.json({
        received,
        distinct: seen.size,
        duplicates: received - seen.size,
        last_at: lastAt,
        latency_ms: { p50: pct(50), p95: pct(95), p99: pct(99), cdf },
        order_violations: orderViolations,
        key_overlaps: keyOverlaps,
        max_concurrent_batches: maxRunning,
        running_batches: running,
        ...(url.searchParams.get("batches") === "1" ? { batches } : {}),
      });
    }
    return Response.json({ error: "GET /stats or POST /reset" }, { status: 404 });
  },
};
