/**
 * What miniflare's Cloudflare Queues simulator still limits (bench/README.md, "What the
 * simulator still limits"): a producer and its own consumer on one simulated queue.
 *
 *   npx wrangler dev -c bench/workers/simulator-limits/wrangler.toml --port 8932
 *   curl '127.0.0.1:8932/mode?m=slow';  curl '127.0.0.1:8932/send?n=30000';           curl 127.0.0.1:8932/stats
 *   curl '127.0.0.1:8932/mode?m=ack';   curl '127.0.0.1:8932/send?n=12000&delay=30'
 *   curl '127.0.0.1:8932/mode?m=retry'; curl '127.0.0.1:8932/send?n=12000';           curl 127.0.0.1:8932/stats
 *
 * /send sends n messages in sendBatch()es of 100 (each with `delaySeconds` = delay), and
 * answers with how many were accepted and the first error. The consumer acks (ack), takes
 * 20 ms a batch first (slow), or retries each message once with a 60 s delay (retry).
 */
let received = 0;
let retried = 0;
let mode = "ack";

export default {
  async fetch(request: Request, env: { QUEUE: Queue }): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/stats") return Response.json({ received, retried, metrics: await env.QUEUE.metrics() });
    if (url.pathname === "/mode") {
      mode = url.searchParams.get("m") ?? "ack";
      received = retried = 0;
      return Response.json({ mode });
    }
    const n = Number(url.searchParams.get("n") ?? 1000);
    const delay = Number(url.searchParams.get("delay") ?? 0);
    let sent = 0;
    try {
      for (let i = 0; i < n; i += 100) {
        const count = Math.min(100, n - i);
        await env.QUEUE.sendBatch(
          Array.from({ length: count }, (_, k) => ({ body: { i: i + k } })),
          delay ? { delaySeconds: delay } : undefined,
        );
        sent += count;
      }
      return Response.json({ sent });
    } catch (err) {
      return Response.json({ sent, error: String(err) });
    }
  },

  async queue(batch: MessageBatch): Promise<void> {
    if (mode === "slow") await new Promise((r) => setTimeout(r, 20));
    if (mode === "retry" && batch.messages[0]!.attempts === 1) {
      retried += batch.messages.length;
      batch.retryAll({ delaySeconds: 60 });
      return;
    }
    received += batch.messages.length;
  },
} satisfies ExportedHandler<{ QUEUE: Queue }>;
