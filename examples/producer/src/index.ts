/**
 * A producer Worker written exactly as for Cloudflare Queues: `env.QUEUE` is a
 * `Queue`, and `send` / `sendBatch` / `metrics` are called as usual; they resolve to
 * Cloudflare's response types. Beyond Cloudflare, shardq adds the message ids to them
 * (`messageId`, `messageIds`), which this example returns so a caller can check every
 * message arrived; on Cloudflare Queues those fields are simply absent.
 *
 *   POST /send?count=1000&batch=100   sends `count` messages, `batch` per sendBatch (1 = send())
 *        &concurrency=256              ...with up to this many calls in flight at once (default 1)
 *   GET  /metrics                      the queue's backlog, from env.QUEUE.metrics()
 *   /consumer/...                      passed to the example consumer (GET /consumer/stats): it runs
 *                                      inside the service's process, which has no port of its own
 */
interface Env {
  QUEUE: Queue<unknown>;
  CONSUMER?: Fetcher;
}

const MAX_COUNT = 100_000;

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/metrics" && request.method === "GET") {
      return Response.json(await env.QUEUE.metrics());
    }
    if (url.pathname === "/send" && request.method === "POST") {
      const count = intParam(url, "count", 1);
      const batch = intParam(url, "batch", 1);
      const concurrency = intParam(url, "concurrency", 1);
      if (count === null || count < 1 || count > MAX_COUNT)
        return bad(`count must be an integer from 1 to ${MAX_COUNT}`);
      if (batch === null || batch < 1 || batch > 100) return bad("batch must be an integer from 1 to 100");
      if (concurrency === null || concurrency < 1 || concurrency > 1000)
        return bad("concurrency must be an integer from 1 to 1000");
      const ids: string[] = [];
      const latencies: number[] = [];
      const started = Date.now();
      let next = 0;
      const worker = async () => {
        while (next < count) {
          const first = next;
          const n = Math.min(batch, count - first);
          next += n;
          if (batch === 1) {
            const t0 = Date.now();
            const sent: QueueSendResponse & { messageId?: string } = await env.QUEUE.send({ n: first, sent_at: t0 });
            if (sent.messageId) ids.push(sent.messageId);
            latencies.push(Date.now() - t0);
          } else {
            const t0 = Date.now();
            const messages = Array.from({ length: n }, (_, i) => ({ body: { n: first + i, sent_at: t0 } }));
            const sent: QueueSendBatchResponse & { messageIds?: string[] } = await env.QUEUE.sendBatch(messages);
            ids.push(...(sent.messageIds ?? []));
            latencies.push(Date.now() - t0);
          }
        }
      };
      try {
        await Promise.all(Array.from({ length: concurrency }, worker));
      } catch (err) {
        // What was acknowledged before the failure is stored: say which ids those are.
        return Response.json(
          { sent: ids.length, ms: Date.now() - started, ids, latencies, error: String(err) },
          { status: 503 },
        );
      }
      // `latencies`: how long each send() / sendBatch() call took, in ms (the load tester reads them).
      return Response.json({ sent: ids.length, ms: Date.now() - started, ids, latencies });
    }
    if (url.pathname.startsWith("/consumer/") && env.CONSUMER) {
      return env.CONSUMER.fetch(
        new Request(new URL(url.pathname.slice("/consumer".length) + url.search, url), request),
      );
    }
    return Response.json({ error: "try POST /send?count=10 or GET /metrics" }, { status: 404 });
  },
} satisfies ExportedHandler<Env>;

function intParam(url: URL, name: string, fallback: number): number | null {
  const raw = url.searchParams.get(name);
  if (raw === null) return fallback;
  const n = Number(raw);
  return Number.isInteger(n) ? n : null;
}

function bad(error: string): Response {
  return Response.json({ error }, { status: 400 });
}
