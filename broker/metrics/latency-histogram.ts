/**
 * Send latency, measured by the broker: from a send or sendBatch arriving (HTTP or the
 * producer binding) to its messages stored. Production runs many broker isolates, and
 * an isolate's memory is lost when it is evicted, so each isolate counts sends per queue
 * in memory and adds the counts to the queue's Coordinator (coordinator/send-latency.ts),
 * where GET /metrics reads them: at the first send after FLUSH_INTERVAL_MS without a
 * write (TRICKLE_INTERVAL_MS while few sends come), and QUIET_MS after sending stops.
 * Not every few seconds: at a trickle each write is a Coordinator request, and one every
 * few seconds would cost more than the messages themselves.
 *
 * The flush never delays or fails a send: it runs in ctx.waitUntil, its errors are
 * logged, and counts that could not be written are kept for the next flush (a failure
 * after the Coordinator had added them counts those sends twice; an isolate evicted
 * before its flush loses the counts since its last one). A scrape writes its own
 * isolate's counts first, so what it reads lags only other isolates' sends.
 */
import { coordinatorFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { formatBound, type HistogramValue } from "./prometheus";
import { findQueue } from "../../src/routing/queue-lookup";
import type { SendLatencyCounts } from "../../src/kernel/figures";
import { sleep } from "../../src/kernel/sleep";

/** Bucket upper bounds, in seconds; +Inf is implied. */
export const SEND_LATENCY_BOUNDS: readonly number[] = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];
/** While sends go on, at most one write per queue per isolate this often. */
export const FLUSH_INTERVAL_MS = 60_000;
/**
 * An isolate that counted fewer sends than TRICKLE_SENDS since its last write waits up to
 * TRICKLE_INTERVAL_MS to write them: at a message a second, a write a minute was a sixtieth of
 * a Coordinator request per message, most of what the Coordinator then served. A scrape and a
 * pause in sending still write at once.
 */
export const TRICKLE_SENDS = 600;
export const TRICKLE_INTERVAL_MS = 5 * 60_000;
/**
 * Sending stopped this long ago: the counts since the last write are written. Short enough for
 * a timer in a send's waitUntil (which the platform ends 30 s after the response).
 */
export const QUIET_MS = 10_000;
/** How long a scrape waits for writes other requests of this isolate have under way. */
const FLUSH_WAIT_MS = 2000;

export function emptyCounts(): SendLatencyCounts {
  return { buckets: {}, sumSeconds: 0, count: 0 };
}

/** Counts one send that took `seconds`. */
export function observe(c: SendLatencyCounts, seconds: number): void {
  const s = Number.isFinite(seconds) && seconds > 0 ? seconds : 0;
  const bound = SEND_LATENCY_BOUNDS.find((b) => s <= b);
  const le = bound === undefined ? "+Inf" : formatBound(bound);
  c.buckets[le] = (c.buckets[le] ?? 0) + 1;
  c.sumSeconds += s;
  c.count++;
}

export function mergeCounts(into: SendLatencyCounts, from: SendLatencyCounts): void {
  for (const [le, n] of Object.entries(from.buckets)) into.buckets[le] = (into.buckets[le] ?? 0) + n;
  into.sumSeconds += from.sumSeconds;
  into.count += from.count;
}

/**
 * Per-bucket counts as Prometheus buckets: cumulative, in bound order, with every
 * standard bound present (zeros too) so that all queues and scrapes share one bucket
 * set; a bound no longer in SEND_LATENCY_BOUNDS but on record is kept.
 */
export function cumulativeBuckets(c: SendLatencyCounts): HistogramValue {
  const perBound = new Map<number, number>(SEND_LATENCY_BOUNDS.map((b) => [b, 0]));
  for (const [le, n] of Object.entries(c.buckets)) {
    const b = le === "+Inf" ? Infinity : Number(le);
    if (Number.isNaN(b)) continue;
    perBound.set(b, (perBound.get(b) ?? 0) + n);
  }
  let running = 0;
  const buckets = [...perBound.entries()].sort(([a], [b]) => a - b).map(([le, n]) => ({ le, count: (running += n) }));
  return { buckets, sum: c.sumSeconds, count: running };
}

export interface WaitUntil {
  waitUntil(promise: Promise<unknown>): void;
}

/** Where counts go: the queue's Coordinator in production, a fake in tests. */
export type LatencySink = (env: Env, accountId: string, queueRef: string, counts: SendLatencyCounts) => Promise<void>;

interface Lane {
  accountId: string;
  queueRef: string;
  env: Env;
  pending: SendLatencyCounts;
  /** A write is queued for the next turn (a burst of sends in one turn shares it). */
  queued: boolean;
  /**
   * When the newest quiet timer started (null: none). Each runs in the waitUntil of the send
   * that started it; a send starts a new one once the newest is half a quiet period old, so a
   * timer that fires while it is still the newest comes a quiet period after the last sends.
   */
  timerAt: number | null;
  lastFlushAt: number;
  /** Writes under way. */
  writing: number;
}

/** One isolate's counts per queue, and their flushes. */
export class SendLatencyBuffer {
  private readonly lanes = new Map<string, Lane>();

  constructor(
    private readonly opts: {
      intervalMs: number;
      quietMs?: number;
      trickle?: { sends: number; intervalMs: number };
      write: LatencySink;
      now?: () => number;
    },
  ) {}

  /**
   * Counts a send; never throws, never waits. The first send after an interval without a
   * write queues one; the others leave a timer that writes once sending has been quiet.
   */
  observe(env: Env, ctx: WaitUntil, target: { accountId: string; queueRef: string }, seconds: number): void {
    try {
      const lane = this.lane(env, target.accountId, target.queueRef);
      observe(lane.pending, seconds);
      if (lane.queued) return;
      const now = this.now();
      const since = now - lane.lastFlushAt;
      const trickle = this.opts.trickle;
      if (
        since >= this.opts.intervalMs &&
        (!trickle || lane.pending.count >= trickle.sends || since >= trickle.intervalMs)
      ) {
        ctx.waitUntil(
          sleep(0).then(() => {
            lane.queued = false;
            return this.flushLane(lane);
          }),
        );
        lane.queued = true; // only once waitUntil took it: a write that never runs must not block the next
        return;
      }
      const quiet = this.opts.quietMs ?? QUIET_MS;
      if (lane.timerAt !== null && now - lane.timerAt < quiet / 2) return;
      ctx.waitUntil(
        sleep(quiet).then(() => {
          // A send started a newer timer since: sending goes on, and that one writes if it stops.
          if (lane.timerAt !== now) return;
          lane.timerAt = null;
          return this.flushLane(lane);
        }),
      );
      lane.timerAt = now;
    } catch (err) {
      console.error("send latency: counting or scheduling its flush failed:", err);
    }
  }

  /**
   * Writes the pending counts of an account's queues now, from the caller's own
   * request, then waits for writes other requests of this isolate have under way
   * (polling on a timer of its own: workerd cancels a request that only awaits another
   * request's I/O). A scrape calls it, so it sees every send this isolate answered.
   */
  async flush(accountId?: string): Promise<void> {
    const lanes = [...this.lanes.values()].filter((l) => accountId === undefined || l.accountId === accountId);
    await Promise.all(lanes.map((l) => this.flushLane(l)));
    const deadline = this.now() + FLUSH_WAIT_MS;
    while (lanes.some((l) => l.writing > 0) && this.now() < deadline) await sleep(2);
  }

  /** Counts not written yet, for tests. */
  pending(accountId: string, queueRef: string): SendLatencyCounts | undefined {
    return this.lanes.get(laneKey(accountId, queueRef))?.pending;
  }

  private async flushLane(lane: Lane): Promise<void> {
    if (lane.pending.count === 0) return;
    const counts = lane.pending;
    lane.pending = emptyCounts();
    lane.lastFlushAt = this.now();
    lane.writing++;
    try {
      await this.opts.write(lane.env, lane.accountId, lane.queueRef, counts);
    } catch (err) {
      console.error(`send latency of queue "${lane.queueRef}" not written (kept for the next flush):`, err);
      mergeCounts(lane.pending, counts);
    } finally {
      lane.writing--;
    }
  }

  private lane(env: Env, accountId: string, queueRef: string): Lane {
    const key = laneKey(accountId, queueRef);
    let lane = this.lanes.get(key);
    if (!lane) {
      // One lane per queue this isolate sent to; forget idle ones now and then.
      if (this.lanes.size >= 1000) {
        for (const [k, l] of this.lanes)
          if (l.pending.count === 0 && !l.queued && l.timerAt === null && l.writing === 0) this.lanes.delete(k);
      }
      lane = {
        accountId,
        queueRef,
        env,
        pending: emptyCounts(),
        queued: false,
        timerAt: null,
        lastFlushAt: -Infinity,
        writing: 0,
      };
      this.lanes.set(key, lane);
    }
    lane.env = env;
    return lane;
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }
}

const laneKey = (accountId: string, queueRef: string) => `${accountId}\u0000${queueRef}`;

/** The queue's Coordinator adds the counts up; a queue deleted meanwhile takes them with it. */
const toCoordinator: LatencySink = async (env, accountId, queueRef, counts) => {
  const map = await findQueue(env, accountId, queueRef);
  if (map) await coordinatorFor(env, map.queueId).recordSendLatency(counts);
};

/** This isolate's buffer. */
export const sendLatency = new SendLatencyBuffer({
  intervalMs: FLUSH_INTERVAL_MS,
  trickle: { sends: TRICKLE_SENDS, intervalMs: TRICKLE_INTERVAL_MS },
  write: toCoordinator,
});

/** Called once a send's messages are stored; `startedAt` is when the send arrived (Date.now()). */
export function noteSendLatency(
  env: Env,
  ctx: WaitUntil,
  target: { accountId: string; queueRef: string },
  startedAt: number,
): void {
  sendLatency.observe(env, ctx, target, (Date.now() - startedAt) / 1000);
}
