/**
 * A consumer Worker written exactly as for Cloudflare Queues: a queue() handler that
 * acks or retries each message. It also counts every delivery in a Durable Object
 * (GET /stats: received, distinct, duplicates, by attempts, and the end-to-end latency
 * of bodies that carry `sent_at`) so that a test or the load tester can prove
 * every message arrived (POST /missing with { queue, ids } lists the ids never delivered).
 *
 * Message bodies may ask for trouble, to show the semantics:
 *   { "retry": true }  -> msg.retry({ delaySeconds: 1 }) every time (ends in the dead-letter queue)
 *   { "throw": true }  -> the handler throws (every message of the batch not acked is retried)
 *   { "work_ms": 20 }  -> takes that long over the message (at most 1 s), like real work
 *
 * The last line is the only shardq-specific one: the same handler, exported as an
 * RPC entrypoint, for the transport that deploys.
 */
import { DurableObject } from "cloudflare:workers";
import { consumerEntrypoint } from "shardq/consumer";

interface Env {
  TALLY: DurableObjectNamespace<Tally>;
}

const handler = {
  async queue(batch: MessageBatch<unknown>, env: Env): Promise<void> {
    const tally = env.TALLY.get(env.TALLY.idFromName("all"));
    const now = Date.now();
    await tally.record(
      batch.queue,
      batch.messages.map((m) => {
        const sentAt = (m.body as { sent_at?: unknown } | null)?.sent_at;
        // A body that says when it was sent (the load tester's do) gives an end-to-end latency.
        return { id: m.id, attempts: m.attempts, ...(typeof sentAt === "number" ? { latencyMs: now - sentAt } : {}) };
      }),
    );
    let shouldThrow = false;
    for (const msg of batch.messages) {
      const body = msg.body as { retry?: boolean; throw?: boolean; work_ms?: number } | null;
      if (typeof body?.work_ms === "number")
        await new Promise((r) => setTimeout(r, Math.min(1000, Math.max(0, body.work_ms!))));
      if (body?.retry) msg.retry({ delaySeconds: 1 });
      else if (body?.throw) shouldThrow = true;
      else msg.ack();
    }
    if (shouldThrow) throw new Error("a message asked this handler to throw");
  },

  async fetch(request: Request, env: Env): Promise<Response> {
    const tally = env.TALLY.get(env.TALLY.idFromName("all"));
    const url = new URL(request.url);
    if (url.pathname === "/stats") return Response.json(await tally.stats(url.searchParams.get("queue") ?? undefined));
    if (url.pathname === "/reset" && request.method === "POST") return Response.json(await tally.reset());
    if (url.pathname === "/missing" && request.method === "POST") {
      const { queue, ids } = (await request.json()) as { queue: string; ids: string[] };
      return Response.json({ missing: await tally.missing(queue, ids) });
    }
    return Response.json({ error: "try GET /stats or POST /reset" }, { status: 404 });
  },
};

export default handler;

/** Counts deliveries per message id. */
export class Tally extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS deliveries (queue TEXT NOT NULL, id TEXT NOT NULL, attempts INTEGER NOT NULL, at INTEGER NOT NULL)",
    );
    // Added after the first release of this example: older local state lacks the column.
    if (
      !ctx.storage.sql
        .exec("SELECT name FROM pragma_table_info('deliveries')")
        .toArray()
        .some((c) => c.name === "latency_ms")
    ) {
      ctx.storage.sql.exec("ALTER TABLE deliveries ADD COLUMN latency_ms INTEGER");
    }
  }

  record(queue: string, messages: Array<{ id: string; attempts: number; latencyMs?: number }>): void {
    const now = Date.now();
    for (const m of messages) {
      this.ctx.storage.sql.exec(
        "INSERT INTO deliveries (queue, id, attempts, at, latency_ms) VALUES (?, ?, ?, ?, ?)",
        queue,
        m.id,
        m.attempts,
        now,
        m.latencyMs ?? null,
      );
    }
  }

  stats(queue?: string) {
    const where = queue ? "WHERE queue = ?" : "";
    const args = queue ? [queue] : [];
    const sql = this.ctx.storage.sql;
    const totals = sql
      .exec<{ received: number; distinct_ids: number }>(
        `SELECT COUNT(*) AS received, COUNT(DISTINCT id) AS distinct_ids FROM deliveries ${where}`,
        ...args,
      )
      .one();
    const byAttempts = sql
      .exec<{ attempts: number; n: number }>(
        `SELECT attempts, COUNT(*) AS n FROM deliveries ${where} GROUP BY attempts ORDER BY attempts`,
        ...args,
      )
      .toArray();
    // First deliveries only: a redelivery's latency measures the retry delay, not the queue.
    const lat = sql
      .exec<{ latency_ms: number }>(
        `SELECT latency_ms FROM deliveries ${where ? `${where} AND` : "WHERE"} latency_ms IS NOT NULL AND attempts = 1 ORDER BY latency_ms`,
        ...args,
      )
      .toArray()
      .map((r) => r.latency_ms);
    const pct = (p: number) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))]! : null);
    const latencyMs = lat.length
      ? { count: lat.length, p50: pct(50), p95: pct(95), p99: pct(99), max: lat[lat.length - 1]! }
      : null;
    return {
      received: totals.received,
      distinct: totals.distinct_ids,
      duplicates: totals.received - totals.distinct_ids,
      byAttempts,
      latencyMs,
    };
  }

  /** The ids, of those given, never delivered from `queue`. */
  missing(queue: string, ids: string[]): string[] {
    const seen = new Set(
      this.ctx.storage.sql
        .exec<{ id: string }>("SELECT DISTINCT id FROM deliveries WHERE queue = ?", queue)
        .toArray()
        .map((r) => r.id),
    );
    return ids.filter((id) => !seen.has(id));
  }

  reset() {
    this.ctx.storage.sql.exec("DELETE FROM deliveries");
    return { reset: true };
  }
}

export const ShardqConsumer = consumerEntrypoint(handler);
