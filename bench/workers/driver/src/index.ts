/**
 * The benchmark's producer: the same code drives Cloudflare Queues (miniflare's
 * simulator, through a [[queues.producers]] binding) and shardq (through a service
 * binding to QueueProducer). POST /run?count&concurrency&batch[&rate][&producer=batching[&linger=ms]][&continue=1]
 * [&keys=K[&ordered=1][&offset=N]] sends `count` messages with `concurrency` send() or
 * sendBatch() calls in flight (or at `rate` messages/s) and reports each call's duration;
 * with producer=batching, the send()s go through shardq/producer's batchingQueue (w1b), one
 * per isolate as users would keep it. With `keys`, bodies carry one of K ordering keys and
 * their sequence number, and `ordered=1` sends the key as `orderingKey` (ordering.ts, w8).
 * The first failed call ends the run, unless `continue=1` (then failures are counted and
 * sending goes on). /shardq/* and /sink/* pass through to the shardq service and the sink,
 * which run in this process without ports of their own. GET /cost?account&queue_id (shardq
 * only) reads what each of the queue's Durable Objects was billed for since it started.
 */
import type { CostMeter, MeterReading } from "../../../../src/kernel/sql-meter";
import type { CostFigures, ShardStats } from "../../../../src/kernel/figures";
import { IDEMPOTENCY_BUCKETS } from "../../../../src/routing/idempotent-send";
import { batchingQueue } from "../../../../src/producer/batching-queue";
import { KeyedSender } from "./ordering";

interface Env {
  QUEUE: Queue<unknown>;
  SINK: Fetcher;
  SHARDQ?: Fetcher;
  // shardq's classes (wrangler.shardq.toml), for GET /cost.
  COORDINATOR?: DurableObjectNamespace;
  STORAGE_SHARD?: DurableObjectNamespace;
  ACCOUNT_CATALOG?: DurableObjectNamespace;
  IDEMPOTENCY_KEYS?: DurableObjectNamespace;
  SHARD_CONSUMERS?: DurableObjectNamespace;
}

/** The methods GET /cost calls, typed here: the bindings reach another script's classes. */
interface Metered {
  costFigures(): Promise<MeterReading>;
}
interface CoordinatorStub {
  costFigures(): Promise<
    MeterReading & {
      storageShards: string[];
      consumerShards: Record<string, CostMeter>;
      consumerLatest: Record<string, MeterReading>;
    }
  >;
}
interface StorageShardStub {
  stats(): Promise<ShardStats>;
}

/**
 * Every Durable Object of one queue (and its account's catalog), by class: its figures since it
 * started. Storage shards answer stats(), which counts itself as one RPC (the caller subtracts
 * it); costFigures() counts nothing. Consumer shards are those that reported to the Coordinator,
 * each read as of now: a report at a trickle is up to 2 minutes old. One that does not answer
 * is read from its last report.
 */
type CostEnv = Required<
  Pick<Env, "COORDINATOR" | "STORAGE_SHARD" | "ACCOUNT_CATALOG" | "IDEMPOTENCY_KEYS" | "SHARD_CONSUMERS">
>;

async function costOf(env: CostEnv, account: string, queueId: string) {
  const get = <T>(ns: DurableObjectNamespace, name: string) => ns.get(ns.idFromName(name)) as unknown as T;
  const coordinator = await get<CoordinatorStub>(env.COORDINATOR, queueId).costFigures();
  const { storageShards, consumerShards, consumerLatest, ...own } = coordinator;
  const named = async <T>(names: Array<string | number>, read: (name: string | number) => Promise<T>) =>
    Object.fromEntries(await Promise.all(names.map(async (n) => [String(n), await read(n)] as const)));
  return {
    coordinator: own,
    storage: await named(
      storageShards,
      async (n) => (await get<StorageShardStub>(env.STORAGE_SHARD, String(n)).stats()).cost satisfies CostFigures,
    ),
    consumer: await named(Object.keys(consumerShards), (n) =>
      consumerNow(env, queueId, String(n), consumerShards[String(n)]!, consumerLatest[String(n)]),
    ),
    catalog: await get<Metered>(env.ACCOUNT_CATALOG, account).costFigures(),
    idempotency: await named(
      Array.from({ length: IDEMPOTENCY_BUCKETS }, (_, b) => b),
      (b) => get<Metered>(env.IDEMPOTENCY_KEYS, `${queueId}:idempotency:${b}`).costFigures(),
    ),
  };
}

/**
 * A consumer shard's figures over its restarts as of now: what it reported over its lives
 * (`reported`, the Coordinator's sum), with its last report (`latest`) replaced by its own
 * meter when that is the same life, or added to when it started again since; its reports
 * alone when it does not answer.
 */
async function consumerNow(
  env: CostEnv,
  queueId: string,
  index: string,
  reported: CostMeter,
  latest: MeterReading | undefined,
): Promise<CostMeter> {
  const shard = env.SHARD_CONSUMERS.get(
    env.SHARD_CONSUMERS.idFromName(`${queueId}:consumer:${index}`),
  ) as unknown as Metered;
  const live = await shard.costFigures().catch(() => null);
  if (!live) return reported;
  const base = latest && latest.since === live.since ? subtract(reported, latest) : reported;
  return {
    rpcs: base.rpcs + live.rpcs,
    alarms: base.alarms + live.alarms,
    rowsWritten: base.rowsWritten + live.rowsWritten,
    rowsRead: base.rowsRead + live.rowsRead,
  };
}

const subtract = (a: CostMeter, b: CostMeter): CostMeter => ({
  rpcs: a.rpcs - b.rpcs,
  alarms: a.alarms - b.alarms,
  rowsWritten: a.rowsWritten - b.rowsWritten,
  rowsRead: a.rowsRead - b.rowsRead,
});

/** The isolate's batching producers over env.QUEUE, by linger, made on first use (env arrives with a request). */
const batching = new Map<number, Queue<unknown>>();

function batchingFor(queue: Queue<unknown>, lingerMs: number): Queue<unknown> {
  let q = batching.get(lingerMs);
  if (!q) batching.set(lingerMs, (q = batchingQueue(queue, { maxBatch: 100, lingerMs })));
  return q;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname.startsWith("/sink/"))
      return env.SINK.fetch(new Request(new URL(url.pathname.slice(5) + url.search, url), request));
    if (url.pathname.startsWith("/shardq/") && env.SHARDQ) {
      return env.SHARDQ.fetch(new Request(new URL(url.pathname.slice(7) + url.search, url), request));
    }
    if (url.pathname === "/cost") {
      const { COORDINATOR, STORAGE_SHARD, ACCOUNT_CATALOG, IDEMPOTENCY_KEYS, SHARD_CONSUMERS } = env;
      const queueId = url.searchParams.get("queue_id");
      if (!COORDINATOR || !STORAGE_SHARD || !ACCOUNT_CATALOG || !IDEMPOTENCY_KEYS || !SHARD_CONSUMERS || !queueId)
        return Response.json({ error: "GET /cost?account&queue_id, against shardq" }, { status: 404 });
      return Response.json(
        await costOf(
          { COORDINATOR, STORAGE_SHARD, ACCOUNT_CATALOG, IDEMPOTENCY_KEYS, SHARD_CONSUMERS },
          url.searchParams.get("account") ?? "local",
          queueId,
        ),
      );
    }
    if (url.pathname !== "/run" || request.method !== "POST")
      return Response.json({ error: "POST /run?count&concurrency&batch" }, { status: 404 });
    const count = Number(url.searchParams.get("count") ?? 1000);
    const concurrency = Number(url.searchParams.get("concurrency") ?? 1);
    const batch = Number(url.searchParams.get("batch") ?? 1);
    // With a rate, call k leaves at start + k * batch / rate (an open-loop load).
    const rate = Number(url.searchParams.get("rate") ?? 0);
    // shardq/producer at its default linger unless `linger` (ms) says otherwise.
    const linger = Number(url.searchParams.get("linger") ?? 2);
    const queue = url.searchParams.get("producer") === "batching" ? batchingFor(env.QUEUE, linger) : env.QUEUE;
    const keepGoing = url.searchParams.get("continue") === "1";
    const keys = Number(url.searchParams.get("keys") ?? 0);
    const keyed =
      keys > 0
        ? new KeyedSender(
            queue,
            keys,
            url.searchParams.get("ordered") === "1",
            Number(url.searchParams.get("offset") ?? 0),
          )
        : undefined;
    const latencies: number[] = [];
    let next = 0;
    let sent = 0;
    let failed = 0;
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
            if (keyed) await keyed.send(first, n);
            else if (batch === 1) await queue.send({ i: first, sent_at: Date.now() });
            else
              await queue.sendBatch(
                Array.from({ length: n }, (_, k) => ({ body: { i: first + k, sent_at: Date.now() } })),
              );
            sent += n;
            latencies.push(performance.now() - t0);
          } catch (err) {
            failed += n;
            if (!keepGoing) error = String(err);
          }
        }
      }),
    );
    const ordering = keyed?.refused !== undefined ? { ordering_refused: keyed.refused } : {};
    return Response.json({
      sent,
      ms: Date.now() - started,
      latencies,
      ...ordering,
      ...(keepGoing ? { failed } : {}),
      ...(error ? { error } : {}),
    });
  },
} satisfies ExportedHandler<Env>;
