/**
 * The fault harness's push consumer: an ordinary Cloudflare Queues consumer Worker (its
 * queue() handler is all shardq sees) that misbehaves the ways real consumers do, so the
 * fault run checks shardq's push path against Cloudflare's semantics:
 *
 *   ack       msg.ack() (or, for a batch of nothing but acks, sometimes batch.ackAll())
 *   implicit  no call: acked when the handler returns, retried when it throws or after
 *             batch.retryAll() (which some batches call), acked after batch.ackAll()
 *   retry     msg.retry() (a poison message {x: 1}, always: it must end in the dead-letter queue)
 *   throw     the handler throws after its explicit acks and retries (and sometimes ackAll()):
 *             those stand, the rest are retried
 *   hang      the handler sleeps 1.5 to 2 times the push lease before it settles: the consumer
 *             shard's lease renewal must keep the batch from anyone else meanwhile
 *   late      ack or retry 1.2 to 1.5 push leases after the handler returned, from
 *             ctx.waitUntil(): Cloudflare waits for waitUntil before it settles a batch
 *             (unless the queue_consumer_no_wait_for_wait_until flag is set, which this
 *             Worker does not set), so these calls count and the batch stays leased.
 *             In a batch that hangs, a late message is just acked after the hang.
 *
 * A message's fate is a hash of the run's seed, its harness id (from the body: message ids
 * are the service's, not replayable) and its attempt, so a run replays with its seed as far
 * as batches form the same way; a batch hangs, throws or acks late when one of its messages
 * draws that fate. Every body is checked against what the producers send ({h, x?, k?, n?, pad?}).
 *
 * Each invocation reports to the harness's push sink (test/faults/push-sink.mjs, loopback)
 * when it starts and, awaited, just before it ends (returns, throws, or its waitUntil work
 * is done), with what it acked and retried: the harness logs the two as one operation, whose
 * span therefore lies within the invocation's.
 */

interface Env {
  SEED: string;
  SINK_URL: string;
  PUSH_LEASE_MS: string;
}

type Fate = "ack" | "implicit" | "retry" | "throw" | "hang" | "late";

/**
 * Shares of messages given each fate; the rest are acked, explicitly or not. A consumer
 * shard hands out one batch at a time, and the push queue's backlog in a short run asks
 * for one shard, so each hang or late batch holds up the queue for a few seconds: rare.
 */
const RATES: Array<[Fate, number]> = [
  ["retry", 0.03],
  ["throw", 0.006],
  ["hang", 0.0015],
  ["late", 0.003],
];
/** Share of late messages retried (not acked) late. */
const LATE_RETRY = 0.3;
/** Share of all-ack batches settled by ackAll(), of throwing ones that call it first, and of the others that call retryAll(). */
const ACK_ALL = 0.3;
const ACK_ALL_THEN_THROW = 0.3;
const RETRY_ALL = 0.05;

interface Seen {
  id: string;
  h: string | null;
  a: number;
  poison: boolean;
  garbled: boolean;
  fate: Fate;
}

export default {
  async queue(batch: MessageBatch<unknown>, env: Env, ctx: ExecutionContext): Promise<void> {
    const leaseMs = Number(env.PUSH_LEASE_MS) || 30_000;
    const d = crypto.randomUUID();
    const roll = (...key: Array<string | number>) => hash01(env.SEED, ...key);
    const seen: Seen[] = batch.messages.map((m) => {
      const b = readBody(m.body);
      const key = b.h ?? m.id;
      return { id: m.id, h: b.h, a: m.attempts, poison: b.poison, garbled: b.garbled, fate: b.poison ? "retry" : fateOf(roll("fate", key, m.attempts), roll("ack", key, m.attempts)) };
    });
    await report(env, {
      kind: "start",
      d,
      q: batch.queue,
      msgs: seen.map((s) => ({ h: s.h, id: s.id, a: s.a, ...(s.poison ? { x: 1 } : {}), ...(s.garbled ? { g: 1 } : {}) })),
    });

    const message = new Map(batch.messages.map((m) => [m.id, m]));
    const acked: string[] = [];
    const retried: string[] = [];
    for (const s of seen) {
      if (s.fate === "ack") {
        message.get(s.id)!.ack();
        acked.push(s.id);
      } else if (s.fate === "retry") {
        message.get(s.id)!.retry();
        retried.push(s.id);
      }
    }
    const key = (s: Seen) => [s.h ?? s.id, s.a] as const;
    const hang = seen.find((s) => s.fate === "hang");
    const hangMs = hang ? Math.round(leaseMs * (1.5 + 0.5 * roll("hang", ...key(hang)))) : 0;
    if (hangMs) {
      await sleep(hangMs);
      for (const s of seen.filter((x) => x.fate === "late")) {
        message.get(s.id)!.ack();
        acked.push(s.id);
      }
    }

    const settledNow = new Set([...acked, ...retried]);
    const rest = seen.filter((s) => !settledNow.has(s.id)).map((s) => s.id);
    const thrower = seen.find((s) => s.fate === "throw");
    if (thrower) {
      // Cloudflare: explicit acks and retries stand, and so does an ackAll(); every other message is retried.
      const ackAll = roll("ack-all-then-throw", ...key(thrower)) < ACK_ALL_THEN_THROW;
      if (ackAll) batch.ackAll();
      await report(env, { kind: "end", d, acked: ackAll ? [...acked, ...rest] : acked, retried: ackAll ? retried : [...retried, ...rest], threw: true, hang_ms: hangMs, ack_all: ackAll });
      throw new Error(`push consumer: thrown on purpose after ${acked.length} explicit acks${ackAll ? " and ackAll()" : ""}`);
    }

    const late = hangMs ? [] : seen.filter((s) => s.fate === "late");
    if (late.length === 0) {
      // retryAll() retries what has no call of its own; ackAll() acks it, as a return does.
      const retryAll = roll("retry-all", ...key(seen[0]!)) < RETRY_ALL;
      const ackAll = !retryAll && retried.length === 0 && roll("ack-all", ...key(seen[0]!)) < ACK_ALL;
      if (retryAll) batch.retryAll();
      if (ackAll) batch.ackAll();
      await report(env, { kind: "end", d, acked: retryAll ? acked : [...acked, ...rest], retried: retryAll ? [...retried, ...rest] : retried, threw: false, hang_ms: hangMs, ack_all: ackAll, retry_all: retryAll });
      return;
    }
    // Late: the handler returns now; what it leaves unsettled waits for the late calls,
    // and the rest is acked by the return.
    const lateMs = Math.round(leaseMs * (1.2 + 0.3 * roll("late", ...key(late[0]!))));
    const lateIds = new Set(late.map((s) => s.id));
    ctx.waitUntil(
      (async () => {
        await sleep(lateMs);
        const lateAcked: string[] = [];
        const lateRetried: string[] = [];
        for (const s of late) {
          if (roll("late-retry", ...key(s)) < LATE_RETRY) {
            message.get(s.id)!.retry();
            lateRetried.push(s.id);
          } else {
            message.get(s.id)!.ack();
            lateAcked.push(s.id);
          }
        }
        await report(env, {
          kind: "end",
          d,
          acked: [...acked, ...rest.filter((id) => !lateIds.has(id)), ...lateAcked],
          retried: [...retried, ...lateRetried],
          threw: false,
          hang_ms: hangMs,
          late_ms: lateMs,
          late_acked: lateAcked,
          late_retried: lateRetried,
        });
      })(),
    );
  },
};

function fateOf(r: number, ackStyle: number): Fate {
  let edge = 0;
  for (const [fate, rate] of RATES) {
    edge += rate;
    if (r < edge) return fate;
  }
  return ackStyle < 0.5 ? "ack" : "implicit";
}

/**
 * The harness id in a body, and whether the body is exactly what a producer sent: its
 * id, poison flag, ordering key and sequence number, and padding of "x" fix every byte
 * (test/faults/workload.mjs).
 */
function readBody(body: unknown): { h: string | null; poison: boolean; garbled: boolean } {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return { h: null, poison: false, garbled: true };
  const b = body as Record<string, unknown>;
  const h = typeof b.h === "string" ? b.h : null;
  const pad = typeof b.pad === "string" && /^x+$/.test(b.pad) ? b.pad : undefined;
  const order = typeof b.k === "string" && Number.isInteger(b.n) ? { k: b.k, n: b.n } : {};
  const sent = JSON.stringify({ h, ...(b.x === 1 ? { x: 1 } : {}), ...order, ...(pad ? { pad } : {}) });
  return { h, poison: b.x === 1, garbled: h === null || JSON.stringify(body) !== sent };
}

/**
 * Posts to the sink, a few tries: a lost start or end report would make the history
 * blind to a delivery. The sink answers only once it has logged the report.
 */
async function report(env: Env, body: Record<string, unknown>): Promise<void> {
  const url = new URL("/push", env.SINK_URL);
  for (let attempt = 1; attempt <= 5; attempt++) {
    try {
      const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
      await res.arrayBuffer();
      if (res.ok) return;
    } catch (err) {
      if (attempt === 5) console.error(`push consumer: report to ${url} failed:`, err);
    }
    await sleep(100 * attempt);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A number in [0, 1) from the seed and a key (cyrb53): the same on every replay. */
function hash01(seed: string, ...key: Array<string | number>): number {
  const str = [seed, ...key].join("/");
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < str.length; i++) {
    const ch = str.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (4294967296 * (2097151 & h2) + (h1 >>> 0)) / 2 ** 53;
}
