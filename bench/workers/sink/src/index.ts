/**
 * The benchmark's consumer: acks everything and counts what it received, in memory
 * (one isolate in local dev), with the end-to-end latency of each first delivery.
 * The same code consumes from Cloudflare Queues' simulator and from shardq.
 * GET /stats, POST /reset.
 */
let received = 0;
let seen = new Set<string>();
let latencies: number[] = [];
let lastAt = 0;

export default {
  async queue(batch: MessageBatch<{ sent_at?: number }>): Promise<void> {
    const now = Date.now();
    for (const m of batch.messages) {
      received++;
      if (!seen.has(m.id)) {
        seen.add(m.id);
        if (typeof m.body?.sent_at === "number" && latencies.length < 200_000) latencies.push(now - m.body.sent_at);
      }
    }
    lastAt = now;
    batch.ackAll();
  },

  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/reset" && request.method === "POST") {
      received = 0;
      seen = new Set();
      latencies = [];
      lastAt = 0;
      return Response.json({ reset: true });
    }
    if (url.pathname === "/stats") {
      const sorted = [...latencies].sort((a, b) => a - b);
      const pct = (p: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : null);
      const cdf = [1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100].map((p) => [p, pct(p)]);
      return Response.json({ received, distinct: seen.size, duplicates: received - seen.size, last_at: lastAt, latency_ms: { p50: pct(50), p95: pct(95), p99: pct(99), cdf } });
    }
    return Response.json({ error: "GET /stats or POST /reset" }, { status: 404 });
  },
};
