/**
 * When a storage shard tells its Coordinator that it has messages ready (notifyReady),
 * which wakes a consumer shard or a long-polling pull. It says so once, then stays quiet
 * until a consumer finds it empty: a steady stream of sends would otherwise be an RPC per
 * send. Two exceptions: the arrival that fills a batch a consumer was told to wait for
 * wakes one at once, and while long-polling pulls still wait it says so again on the next
 * arrival (the Coordinator's answer tells).
 *
 * When a consumer shard leased here last and found it empty, the shard wakes that consumer
 * shard itself: one request, where the Coordinator's hop cost one more and a row. The
 * Coordinator stays the way for pulls (a pull leased here last) and the fallback (no
 * consumer shard known since this object started, or its wake-up failed); it also scales
 * the consumer shards, from the backlog the heartbeats show.
 */
import { consumerShardFor, coordinatorFor } from "../src/kernel/addressing";
import type { Env } from "../src/kernel/env";
import type { ShardIdentity } from "../src/kernel/shard-map";
import { sleep } from "../src/kernel/sleep";
import type { PushTarget } from "./batch-push";

/**
 * How long after a settle that made lanes ready the shard looks whether anyone leased
 * them before it wakes consumers: the consumer shard that settled leases again at once.
 */
export const LANE_WAKE_GRACE_MS = 25;

export class ConsumerWakeups {
  /** Whether consumers know this shard has messages (reset when one finds nothing ready). */
  private notified = false;
  /** Whether a look, a moment after a settle, for lanes it made ready and nobody leased is under way. */
  private laneLookPending = false;
  /**
   * The batch size a consumer was told to wait for (a lease found a partial batch), or
   * null. The arrival that fills it wakes consumers at once instead of leaving the batch
   * to wait out max_wait_time_ms, which a steady stream of sends would pay on every batch.
   */
  private fillingFor: number | null = null;
  /** The consumer shard (its index) that leased here last; null after a pull's lease, or before any. */
  private leaser: number | null = null;
  /**
   * That consumer shard's batch: its size and how long it lets one fill (max_wait_time_ms). The
   * first arrival after it found this shard empty wakes it for when that batch is due, not for
   * now: a wake-up for now cost it a round that found a partial batch and a second alarm.
   */
  private leaserBatch: { limit: number; maxWaitMs: number; leaseMs?: number } | null = null;
  /**
   * Pushes that consumer shard's batch when it is due, instead of waking it for it
   * (batch-push.ts); false when it does not carry this one. `at` absent: now.
   */
  push: ((target: PushTarget, at: number | undefined) => boolean) | null = null;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly env: Env,
    private readonly identity: () => ShardIdentity | null,
    private readonly lanesReady: () => boolean,
    /** The Coordinator answered a wake-up with no pull left waiting. */
    private readonly noPullWaits: () => void = () => {},
  ) {}

  /**
   * Tells the Coordinator this shard has messages ready, unless it did since a consumer last
   * found it empty. `dueAt`: when the leaser's batch is due here (absent: now).
   */
  notify(dueAt?: number, pushable = true): void {
    const shard = this.identity();
    if (this.notified || !shard) return;
    this.notified = true;
    const leaser = this.leaser;
    const batch = this.leaserBatch;
    if (
      pushable &&
      leaser !== null &&
      batch?.leaseMs !== undefined &&
      this.push?.({ shard: leaser, limit: batch.limit, maxWaitMs: batch.maxWaitMs, leaseMs: batch.leaseMs }, dueAt)
    )
      return;
    if (leaser !== null) {
      this.ctx.waitUntil(
        consumerShardFor(this.env, shard.queueId, leaser)
          .wake(shard.queueId, leaser, undefined, shard.name, dueAt)
          .catch((err: unknown) => {
            console.error(`waking consumer shard ${leaser} failed, the Coordinator wakes one:`, err);
            if (this.leaser === leaser) this.leaser = null;
            this.notified = false;
            this.notify();
          }),
      );
      return;
    }
    this.ctx.waitUntil(
      coordinatorFor(this.env, shard.queueId)
        .notifyReady(shard.name)
        // Long-polling pulls still wait: tell again on the next new messages.
        .then((again) => {
          if (again) this.notified = false;
          else this.noPullWaits();
        })
        .catch((err) => {
          this.notified = false;
          console.error("notifyReady failed (the next heartbeat wakes consumers):", err);
        }),
    );
  }

  /** Messages were stored at `now`; `ready` is how many this shard holds unleased now. */
  afterAppend(stored: number, ready: number, now: number): void {
    const filled = this.fillingFor !== null && ready >= this.fillingFor;
    if (stored > 0 && (!this.notified || filled)) {
      // The first arrival since a consumer last found this shard empty, or the one that
      // fills the batch a consumer is waiting for: make sure one runs, when its batch is due.
      this.fillingFor = null;
      this.notified = false;
      const batch = this.leaser !== null && !filled ? this.leaserBatch : null;
      if (batch && ready < batch.limit && batch.maxWaitMs > 0) {
        // The arrival that fills the batch before then wakes it again, for now.
        this.fillingFor = batch.limit;
        this.notify(now + batch.maxWaitMs);
      } else this.notify();
    }
  }

  /**
   * A lease of `limit` took `taken` messages, and was told to wait for a batch (`waitUntil`) or
   * not; `consumerShard` names the consumer shard that leased (undefined: a pull), `maxWaitMs`
   * how long its batch may take to fill.
   */
  afterLease(
    taken: number,
    waitUntil: number | null,
    limit: number,
    consumerShard?: number,
    maxWaitMs = 0,
    leaseMs?: number,
  ): void {
    this.leaser = consumerShard ?? null;
    this.leaserBatch =
      consumerShard === undefined ? null : { limit, maxWaitMs, ...(leaseMs !== undefined ? { leaseMs } : {}) };
    // A consumer found nothing ready here: the next arrival must tell one.
    if (taken === 0 && waitUntil === null) this.notified = false;
    this.fillingFor = waitUntil === null ? null : limit;
  }

  /** Nothing is left that consumers were told of (a purge emptied the shard): the next arrival tells again. */
  forget(): void {
    this.notified = false;
  }

  /**
   * Messages became ready outside an append (keys released to this shard, a lease ran out): tell
   * now. `pushable` false: a wake-up for the consumer shard's own round (a backlog, not a trickle).
   */
  notifyAgain(pushable = true): void {
    this.notified = false;
    this.notify(undefined, pushable);
  }

  /**
   * A key's next messages are ready once its batch is settled. The consumer shard that
   * settled it leases again at once, its round going on; woken at every settle, another
   * raced it for them and made the key wait the wake-up's hops. So consumers are woken
   * only if the lanes are still waiting a moment later (the settler gone, or a pull consumer).
   */
  wakeIfLanesWait(): void {
    if (this.laneLookPending) return;
    this.laneLookPending = true;
    this.ctx.waitUntil(
      sleep(LANE_WAKE_GRACE_MS).then(() => {
        this.laneLookPending = false;
        if (this.lanesReady()) this.notify();
      }),
    );
  }
}
