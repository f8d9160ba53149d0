/**
 * A producer Worker for test/workers/batching-queue.test.ts: one batchingQueue at module
 * scope, shared by every request of the isolate, as the helper is meant to be used. Its queue
 * is a stand-in whose sendBatch() takes a timer's time (I/O of the request that sends the
 * batch), so that concurrent requests wait on a write another request makes.
 *
 *   POST /send?await=1|0&linger=MS  one send(); answers with its response, or at once without awaiting it
 *   GET  /stats                      the sendBatch() calls so far: { batches, messages }
 *
 * Built to JavaScript by scripts/build-examples.mjs and loaded by vitest.config.ts.
 */
import { batchingQueue, type BatchingQueue } from "../../src/producer/batching-queue";

const stats = { batches: 0, messages: 0 };

const slowQueue: Queue<unknown> = {
  send: async () => {
    throw new Error("the helper sends through sendBatch()");
  },
  sendBatch: async (messages) => {
    const list = [...messages];
    await new Promise((r) => setTimeout(r, 20));
    const batch = ++stats.batches;
    stats.messages += list.length;
    return { metadata: { metrics: { backlogCount: stats.messages, backlogBytes: 0 } }, messageIds: list.map((_, i) => `${batch}-${i}`) } as QueueSendBatchResponse;
  },
  metrics: async () => ({ backlogCount: stats.messages, backlogBytes: 0 }),
};

let queue: BatchingQueue | undefined;

export default {
  async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/stats") return Response.json(stats);
    queue ??= batchingQueue(slowQueue, { lingerMs: Number(url.searchParams.get("linger") ?? 50) });
    const sent = queue.send({ at: Date.now() });
    if (url.searchParams.get("await") === "0") {
      sent.catch(() => {});
      return Response.json({ awaited: false });
    }
    return Response.json(await sent);
  },
} satisfies ExportedHandler;
