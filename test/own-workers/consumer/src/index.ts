/**
 * A consumer Worker written for Cloudflare Queues, unchanged under shardq: a queue()
 * handler that acks every message, except bodies { retry: true }, which it retries (they
 * end in the dead-letter queue after max_retries). It records every delivery in a Durable
 * Object and shows them at GET /received.
 */
import { DurableObject } from "cloudflare:workers";

interface Env {
  RECEIVED: DurableObjectNamespace<Received>;
}

function received(env: Env) {
  return env.RECEIVED.get(env.RECEIVED.idFromName("all"));
}

export default {
  async queue(batch: MessageBatch, env: Env): Promise<void> {
    await received(env).record(
      batch.queue,
      batch.messages.length,
      batch.messages.map((m) => ({ id: m.id, attempts: m.attempts, body: JSON.stringify(m.body) })),
    );
    for (const msg of batch.messages) {
      if ((msg.body as { retry?: boolean } | null)?.retry) msg.retry();
      else msg.ack();
    }
  },

  async fetch(request: Request, env: Env): Promise<Response> {
    if (new URL(request.url).pathname === "/received") return Response.json(await received(env).summary());
    return Response.json({ error: "try GET /received" }, { status: 404 });
  },
} satisfies ExportedHandler<Env>;

/** Every delivery: message id, attempt, body and the size of the batch it came in. */
export class Received extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS deliveries (queue TEXT, id TEXT, attempts INTEGER, body TEXT, batch_size INTEGER)");
  }

  record(queue: string, batchSize: number, messages: Array<{ id: string; attempts: number; body: string }>): void {
    for (const m of messages) this.ctx.storage.sql.exec("INSERT INTO deliveries VALUES (?, ?, ?, ?, ?)", queue, m.id, m.attempts, m.body, batchSize);
  }

  summary() {
    const rows = this.ctx.storage.sql.exec<{ queue: string; id: string; attempts: number; body: string; batch_size: number }>("SELECT * FROM deliveries").toArray();
    return {
      deliveries: rows.length,
      distinct_ids: new Set(rows.map((r) => r.id)).size,
      largest_batch: Math.max(0, ...rows.map((r) => r.batch_size)),
      queues: [...new Set(rows.map((r) => r.queue))],
      bodies: rows.map((r) => JSON.parse(r.body) as unknown),
      retried: rows.filter((r) => r.attempts > 1).length,
    };
  }
}
