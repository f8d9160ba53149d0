/**
 * The benchmark's producer: the same code drives Cloudflare Queues (miniflare's
 * simulator, through a [[queues.producers]] binding) and shardq (through a service
 * binding to QueueProducer). POST /run?count&concurrency&batch[&rate] sends `count`
 * messages with `concurrency` send() or sendBatch() calls in flight (or at `rate`
 * messages/s) and reports each call's duration. /shardq/* and /sink/* pass through to the shardq service and the sink,
 * which run in this process without ports of their own.
 */
interface Env {
  QUEUE: Queue<unknown>;
  SINK: Fetcher;
  SHARDQ?: Fetcher;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname.startsWith("/sink/")) return env.SINK.fetch(new Request(new URL(url.pathname.slice(5) + url.search, url), request));
    if (url.pathname.startsWith("/shardq/") && env.SHARDQ) {
      return env.SHARDQ.fetch(new Request(new URL(url.pathname.slice(7) + url.search, url), request));
    }
    if (url.pathname !== "/run" || request.method !== "POST") return Response.json({ error: "POST /run?count&concurrency&batch" }, { status: 404 });
    const count = Number(url.searchParams.get("count") ?? 1000);
    const concurrency = Number(url.searchParams.get("concurrency") ?? 1);
    const batch = Number(url.searchParams.get("batch") ?? 1);
    // With a rate, call k leaves at start + k * batch / rate (an open-loop load).
    const rate = Number(url.searchParams.get("rate") ?? 0);
    const latencies: number[] = [];
    let next = 0;
    let sent = 0;
    let error: string | undefined;
    const started = Date.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < count && !error) {
          const first = next;
          const n = Math.min(batch, count - first);
          next += n;
          if (rate > 0) {
            const due = started + (first / rate) * 1000 - Date.now();
            if (due > 0) await new Promise((r) => setTimeout(r, due));
          }
          const t0 = performance.now();
          try {
            if (batch === 1) await env.QUEUE.send({ i: first, sent_at: Date.now() });
            else await env.QUEUE.sendBatch(Array.from({ length: n }, (_, k) => ({ body: { i: first + k, sent_at: Date.now() } })));
            sent += n;
            latencies.push(performance.now() - t0);
          } catch (err) {
            error = String(err);
          }
        }
      }),
    );
    return Response.json({ sent, ms: Date.now() - started, latencies, ...(error ? { error } : {}) });
  },
} satisfies ExportedHandler<Env>;
