/**
 * A batch due here goes to the consumer shard that leased here last, with the wake-up itself,
 * and that shard's reply carries the batch's outcome, settled here. At a trickle every batch
 * is one or two messages, and a wake-up, the consumer shard's lease and its settle were three
 * requests a batch; pushed, a batch is one.
 *
 * Only for the consumer shard whose lease or settle last left this shard empty (it waits to
 * be told of the next arrival), for a batch whose wait fits a timer in memory (the object is
 * kept in memory by the requests around it), and never two at once. A consumer shard that is
 * busy, paused or without its Worker takes nothing, and the leases are given back untouched;
 * one that does not answer leaves them to run out, and their lapse wakes it again
 * (shard-core.ts takeLapsedLeases). A timer lost with this object (a restart) is found by the
 * consumer shard's backstop round (consumer-shard/round-schedule.ts), as a lost wake-up is.
 */
import type { Timers } from "../src/kernel/clock";
import type { ShardBacklog } from "../src/kernel/figures";
import type { LeasedMessage, LeaseRef, SettleRequest } from "../src/kernel/protocol";
import type { PushReply } from "../src/kernel/push-reply";

/** The longest wait for a batch to fill that a timer here carries; longer ones wake the consumer shard for its own round. */
export const PUSH_WAIT_MAX_MS = 5000;

/** The consumer shard a batch goes to, and its batch: size, max_wait_time_ms, lease. */
export interface PushTarget {
  shard: number;
  limit: number;
  maxWaitMs: number;
  leaseMs: number;
}

export interface BatchPushDeps {
  /** The timers to wait on; null while a test drives time with its own clock (the wake-up as before, then). */
  timers: () => Timers | null;
  now: () => number;
  /** Leases up to `t.limit` ready messages to consumer shard `t.shard` here, with this shard's figures. */
  lease: (t: PushTarget) => { messages: LeasedMessage[]; waitUntil: number | null; figures: ShardBacklog[] };
  /** Hands them to the consumer shard; its reply. */
  deliver: (t: PushTarget, messages: LeasedMessage[], figures: ShardBacklog[]) => Promise<PushReply>;
  /** Settles the outcome here; answers whether messages are still ready. */
  /** `pushes` false: the consumer shard's rounds take the next batches, woken, not pushed. */
  settle: (t: PushTarget, req: Omit<SettleRequest, "queueId" | "consumer">, pushes: boolean) => boolean;
  /** Ends the leases untouched: the messages are ready again, their attempts as they were. */
  release: (refs: LeaseRef[]) => void;
  /** How many messages are here and not leased (delayed ones too: an upper bound of the ready). */
  unleased: () => number;
  /** A batch's worth still ready after a pushed batch (a backlog, not a trickle): the consumer shard's own round takes it. */
  wakeConsumers: () => void;
  waitUntil: (p: Promise<unknown>) => void;
}

export class BatchPush {
  /** The batch waiting on a timer: for whom, and when it is due. */
  private timer: { at: number; target: PushTarget; handle: unknown } | null = null;
  /** A batch out with its consumer shard. */
  private out = false;
  /** Batches pushed since this object started (tests read it). */
  pushed = 0;

  constructor(private readonly deps: BatchPushDeps) {}

  /**
   * A batch for `target` due at `at`: pushed then, on a timer, and true; false when this does
   * not carry it (no timers, too long a wait): the caller wakes the consumer shard instead.
   * Sooner than a timer already set moves it sooner; while a batch is out, the next goes after it.
   */
  arm(target: PushTarget, at: number): boolean {
    const timers = this.deps.timers();
    if (!timers || target.maxWaitMs > PUSH_WAIT_MAX_MS || target.limit < 1) return false;
    if (this.out) return true;
    if (this.timer && this.timer.at <= at && this.timer.target.shard === target.shard) return true;
    if (this.timer) timers.clear(this.timer.handle);
    const timer = { at, target, handle: null as unknown };
    timer.handle = timers.set(
      () => {
        if (this.timer !== timer) return;
        this.timer = null;
        this.deps.waitUntil(this.push(target));
      },
      Math.max(0, at - this.deps.now()),
    );
    this.timer = timer;
    return true;
  }

  /** Forgets a batch waiting on its timer (the shard was emptied, its consumer shard changed). */
  cancel(): void {
    if (this.timer) this.deps.timers()?.clear(this.timer.handle);
    this.timer = null;
  }

  private async push(target: PushTarget): Promise<void> {
    const { messages, waitUntil, figures } = this.deps.lease(target);
    // A partial batch whose oldest message has not waited max_wait_time_ms yet: then.
    if (messages.length === 0) {
      if (waitUntil !== null) this.arm(target, waitUntil);
      return;
    }
    this.out = true;
    let still = false;
    let pushes = true;
    try {
      const reply = await this.deps.deliver(target, messages, figures).catch((err: unknown) => {
        // Handed over or not, unknown: the leases run out and their lapse wakes consumers.
        console.error(`pushing a batch to consumer shard ${target.shard} failed; its leases run out:`, err);
        return null;
      });
      if (reply === null) return;
      if (!reply.taken) {
        this.deps.release(messages.map((m) => ({ id: m.id, leaseId: m.leaseId })));
        // The consumer shard comes for them itself (it was busy), or is paused or unbound.
        return;
      }
      this.pushed++;
      pushes = reply.pushes !== false;
      // The consumer's settings as of now: the next batch is leased by them.
      if (reply.batch) target = { ...target, limit: reply.batch.limit, maxWaitMs: reply.batch.maxWaitMs };
      still = this.deps.settle(target, reply.settle, pushes);
    } finally {
      this.out = false;
    }
    // More is ready (arrivals while the batch was out, a retry without delay): the next push
    // takes less than a batch, when due; a batch's worth or more is a backlog for the rounds.
    if (!still) return;
    // A timer that does not carry the consumer's settings now (a wait raised past PUSH_WAIT_MAX_MS) wakes it too.
    if (!pushes || this.deps.unleased() >= target.limit || !this.arm(target, this.deps.now()))
      this.deps.wakeConsumers();
  }
}
