import { crc32 } from "../src/kernel/checksum";
import type { ShardStats } from "../src/kernel/figures";
import type { DrawnIdAnswer, DrawnIdProbe } from "../src/kernel/id-claims";
import type { MessageFilter, MessageStatus, PurgeResult } from "../src/kernel/message-operations";
import type {
  AppendRequest,
  AppendResult,
  LeasedMessage,
  LeaseRef,
  LeaseRequest,
  LeaseResult,
  SettleRequest,
  SettleResult,
} from "../src/kernel/protocol";
import type { Epoch, ShardIdentity, ShardState } from "../src/kernel/shard-map";
import { expireOld, lease, nextVisible } from "./segments/segment-leases";
import { extend, readLeased, settle } from "./segments/segment-settlement";
import { releaseLeases } from "./segments/segment-operations";
import { migrate } from "./schema";
import { appendBatch } from "./segments/append";
import { writeDeferred } from "./segments/segment-edit";
import { acceptBridges, acceptReleases, enterEpoch, forgetHandoffs, loadEpoch } from "./handoff/handoff";
import { ownerOfKey } from "../src/kernel/ordering";
import { type FaultPoint, type TestHookStatus } from "../src/kernel/test-hooks";
import { corruptBodies } from "./segments/corrupt-bodies";
import { ShardOperations } from "./shard-operations";
import { BatchPush } from "./batch-push";
import { systemClock } from "../src/kernel/clock";
import { shortestDelay } from "./shard-alarm";
import type { Env } from "../src/kernel/env";
import { consumerShardFor } from "../src/kernel/addressing";
import { assertInJurisdiction } from "../src/kernel/jurisdiction";
import { meteredRpcs } from "../src/kernel/rpc-meter";

/**
 * One storage shard of one queue. Persists every batch in a single transaction
 * before it answers: the RPC reply is held by the output gate until the write is
 * durable, so an acknowledged send is never lost. Never uses allowUnconfirmed.
 */
export class StorageShard extends ShardOperations {
  /** Due batches pushed to their consumer shard, outcome in the reply (batch-push.ts). */
  readonly pushes = new BatchPush({
    timers: () => (this.clock === systemClock ? this.timers : null),
    now: () => this.clock.now(),
    lease: (t) => {
      const r = this.lease({
        queueId: this.identity?.queueId ?? "",
        limit: t.limit,
        leaseMs: t.leaseMs,
        maxWaitMs: t.maxWaitMs,
        retentionMs: this.retentionMs ?? this.leasedRetentionMs ?? Number.MAX_SAFE_INTEGER,
        consumerShard: t.shard,
      });
      return { messages: r.messages, waitUntil: r.waitUntil, figures: [r.backlog, ...(r.peers ?? [])] };
    },
    deliver: (t, messages, figures) =>
      consumerShardFor(this.env, this.identity!.queueId, t.shard).takePushed(
        this.identity!.queueId,
        t.shard,
        this.identity!.name,
        messages,
        figures,
      ),
    settle: (t, req, pushes) =>
      this.settle({
        ...req,
        queueId: this.identity?.queueId ?? "",
        consumer: { shard: t.shard, limit: t.limit, maxWaitMs: t.maxWaitMs, ...(pushes ? { leaseMs: t.leaseMs } : {}) },
      }).after?.ready === true,
    release: (refs) => {
      const released = this.ctx.storage.transactionSync(() =>
        releaseLeases(this.sql, this.delivery, this.clock.now(), refs),
      );
      this.leasedNow = Math.max(0, this.leasedNow - released);
    },
    unleased: () => this.backlogCount - this.leasedNow,
    wakeConsumers: () => this.wakeups.notifyAgain(false),
    waitUntil: (p) => this.ctx.waitUntil(p),
  });

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // Not with the queue's retention unknown: the lease would keep what it should delete.
    this.wakeups.push = (t, at) =>
      this.pushBatches &&
      (this.retentionMs ?? this.leasedRetentionMs) !== null &&
      this.pushes.arm(t, at ?? this.clock.now());
    // Here, not in ShardCore or ShardOperations: this is the class instantiated (src/kernel/rpc-meter.ts).
    return meteredRpcs(this, this.cost, ["testHook", "quietNow"]);
  }

  /** Tests of a consumer shard's own rounds turn pushed batches off. */
  pushBatches = true;

  /** The queue's retention as the last consumer lease gave it, for a shard that has not heard it from the Coordinator yet. */
  private leasedRetentionMs: number | null = null;

  /** Called by the Coordinator when it creates this shard. Idempotent. */
  activate(identity: ShardIdentity): void {
    if (this.identity && this.identity.queueId !== identity.queueId) {
      throw new Error(`shard ${identity.name} already belongs to queue ${this.identity.queueId}`);
    }
    assertInJurisdiction(this.ctx.id, identity.queueId);
    this.ctx.storage.transactionSync(() => {
      this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('identity', ?)", JSON.stringify(identity));
      this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('state', 'active')");
    });
    this.identity = identity;
    this.state = "active";
    this.alarms.wake(this.clock.now(), true);
  }

  /**
   * The Coordinator's new epoch (handoff.ts), before any broker may use the map that goes
   * with it: from now on keyed messages this shard does not own are refused, and every
   * lane here whose key another shard now owns is registered with that owner before this
   * answers. Throws when a registration could not be delivered: the Coordinator holds its
   * change back and tries again. Answers the epoch this shard is in.
   */
  async enterEpoch(queueId: string, epoch: Epoch): Promise<number> {
    if (!this.identity || this.identity.queueId !== queueId)
      throw new Error(`shard ${this.identity?.name ?? "(unknown)"} is not a shard of queue ${queueId}`);
    const self = this.identity.name;
    const { registrations } = this.ctx.storage.transactionSync(() => enterEpoch(this.sql, this.delivery, self, epoch));
    this.epoch = loadEpoch(this.sql);
    this.alarms.wake(this.clock.now(), true);
    await this.outbox.register(queueId, self, registrations);
    this.flushReleases();
    return this.epoch!.seq;
  }

  /** At a key's owner: `holder` holds messages of these keys older than epoch `gen` (handoff.ts). */
  acceptBridges(queueId: string, holder: string, gen: number, keys: string[]): void {
    if (this.notServing(queueId))
      throw new Error(`shard ${this.identity?.name ?? "(unknown)"} does not serve queue ${queueId}`);
    const now = this.clock.now();
    this.ctx.storage.transactionSync(() => acceptBridges(this.sql, holder, gen, keys));
    this.alarms.wake(now, true);
  }

  /** At a key's owner: `holder` holds nothing of these keys older than epoch `gen` any more. */
  acceptReleases(queueId: string, holder: string, gen: number, keys: string[]): void {
    if (this.notServing(queueId)) return;
    const now = this.clock.now();
    this.ctx.storage.transactionSync(() => acceptReleases(this.sql, holder, gen, keys));
    this.alarms.wake(now, true);
    // The keys it freed may be ready now: consumers must come.
    this.wakeups.notifyAgain();
  }

  /** Draining and retired shards refuse new sends with a typed refusal. */
  setState(state: ShardState): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('state', ?)", state);
    this.state = state;
    // The Coordinator waits for this shard's report in its new state (a drained shard is retired on it).
    if (state !== "retired") this.alarms.wake(this.clock.now(), true);
  }

  /** The queue's retention changed: a sleeping shard's due alarm moves with it. */
  setRetention(queueId: string, retentionMs: number): void {
    if (!this.identity || this.identity.queueId !== queueId) return;
    this.learnRetention(retentionMs);
    if (!this.alarms.awake) this.alarms.sleep(this.nextDue(this.clock.now()));
  }

  /**
   * Stores a batch, all or nothing. With `dedupe` (a retried send) messages this shard
   * stored moments ago are dropped, so a retry right after a lost reply stores once;
   * with `remember` (ids chosen by the sender) also those stored within a day, consumed
   * or not. A moved message (moveKey set) is dropped only when this very move was stored
   * here before, whatever the ids (storage-shard/segments/remembered-ids.ts).
   */
  append(req: AppendRequest): AppendResult | Promise<AppendResult> {
    if (!this.identity) return { ok: false, refused: "unknown_shard" };
    if (req.queueId !== this.identity.queueId) return { ok: false, refused: "wrong_queue" };
    if (this.state !== "active") return this.refuse(this.state);
    for (const m of req.messages) {
      // A body that changed between the broker and here is refused whole, not stored.
      if (crc32(m.body) !== m.checksum) return { ...this.refuse("corrupt"), detail: m.id };
    }
    // The fence (handoff.ts): a keyed message whose key another shard owns in this shard's epoch.
    const epoch = this.epoch;
    if (
      epoch &&
      req.messages.some(
        (m) => m.orderingKey !== undefined && ownerOfKey(m.orderingKey, epoch.active) !== this.identity!.name,
      )
    )
      return this.refuse("not_owner");
    const now = this.clock.now();
    if (this.capacity && !this.capacity.take(req.messages.length, now)) return this.refuse("overloaded");
    this.alarms.wake(now);
    const before = this.delivery.headSnapshot();
    const { stored, bytes, ids } = (() => {
      try {
        return this.ctx.storage.transactionSync(() => {
          const written = appendBatch(this.sql, this.delivery, this.shardNo, req, now, epoch?.seq ?? 0);
          writeDeferred(this.sql, this.delivery, now);
          this.delivery.flushTotals(now);
          return written;
        });
      } catch (err) {
        // Rolled back: the open head is as it was on disk.
        this.delivery.restoreHead(before);
        throw err;
      }
    })();
    this.backlogCount += stored;
    this.backlogBytes += bytes;
    // Counted once committed; written with the next write's totals (at most a second on).
    this.delivery.bump("stored", stored);
    this.takeLapsedLeases(now);
    const delay = stored > 0 ? shortestDelay(req.messages) : null;
    if (delay !== null) this.alarms.dueBy(now + delay);
    this.wakeups.afterAppend(stored, this.backlogCount - this.leasedNow, now);
    if (this.due.plan(now)) this.alarms.arm();
    this.activity.messagesIn += stored;
    if (req.origin !== undefined && stored > 0)
      this.activity.inFrom[req.origin] = (this.activity.inFrom[req.origin] ?? 0) + stored;
    // The fault harness's reset once this is durable, before the reply: the sender cannot know.
    return this.hooks.afterDurable("abort-append", this.ctx, {
      ok: true,
      stored,
      duplicates: req.messages.length - stored,
      backlog: this.backlog(),
      ids,
      ...this.peerFigures(),
    });
  }

  /**
   * Leases up to `limit` ready messages to one consumer (a batch), after deleting any
   * past the queue's retention. Any shard state but "retired" serves leases: a
   * draining shard empties this way.
   */
  lease(req: LeaseRequest): LeaseResult {
    if (req.consumerShard !== undefined) this.leasedRetentionMs = req.retentionMs;
    const refused = this.notServing(req.queueId);
    if (refused)
      return {
        messages: [],
        waitUntil: null,
        more: false,
        nextVisibleAt: null,
        backlog: { shard: this.identity?.name ?? "", count: 0, bytes: 0, oldestAt: null },
        refused: true,
      };
    const now = this.clock.now();
    const { result, delta } = this.inTransaction(now, () => {
      const expired = expireOld(this.sql, this.delivery, now, req.retentionMs);
      const leased = lease(this.sql, this.delivery, now, req, req.retentionMs);
      return {
        result: leased.result,
        delta: { count: expired.count + leased.delta.count, bytes: expired.bytes + leased.delta.bytes },
      };
    });
    this.applyDelta(delta);
    this.flushReleases();
    // A lease that found nothing changes nothing here: a pull polling an empty queue keeps no shard awake.
    if (result.messages.length > 0 || delta.count !== 0) this.alarms.wake(now);
    this.activity.messagesOut += result.messages.length;
    this.leasedNow += result.messages.length;
    this.wakeups.afterLease(
      result.messages.length,
      result.waitUntil,
      req.limit,
      req.consumerShard,
      req.maxWaitMs,
      req.pushes === false ? undefined : req.leaseMs,
    );
    if (req.watchUntil !== undefined && result.messages.length === 0) this.due.watch(req.watchUntil);
    if (this.due.plan(now)) this.alarms.arm();
    return { ...result, backlog: this.backlog(), ...this.peerFigures() };
  }

  /** Applies a batch's outcome: deletes acked and dead-lettered messages, schedules retries. */
  settle(req: SettleRequest): SettleResult {
    if (this.notServing(req.queueId)) {
      const all = [...req.acks, ...req.retries, ...req.deadLettered, ...req.dropped].map((r) => r.id);
      return { acked: 0, retried: 0, deadLettered: 0, dropped: 0, stale: all };
    }
    // Between lease and ack: the reset ends memory leases, so the messages come again.
    this.hooks.at("abort-settle", this.ctx);
    const now = this.clock.now();
    const { result, delta, keysReady } = this.inTransaction(now, () => settle(this.sql, this.delivery, now, req));
    this.applyDelta(delta);
    this.alarms.wake(now);
    const delay = result.retried > 0 ? shortestDelay(req.retries) : null;
    if (delay !== null) this.alarms.dueBy(now + delay);
    this.flushReleases();
    // A key's next messages are ready: consumers are woken if nobody leased them a moment later.
    if (keysReady > 0) {
      if (req.wakeAtOnce) this.wakeups.notifyAgain();
      else this.wakeups.wakeIfLanesWait();
    }
    if (this.due.plan(now)) this.alarms.arm();
    this.leasedNow = Math.max(
      0,
      this.leasedNow - (result.acked + result.retried + result.deadLettered + result.dropped),
    );
    if (!req.consumer) return result;
    // The consumer shard that settled learns here whether to lease again: a lease that finds
    // nothing is a request per batch at low rates. Left with nothing ready, this shard wakes
    // it at the next arrival, as after that empty lease.
    const ready = this.readyNow(now);
    if (!ready)
      this.wakeups.afterLease(
        0,
        null,
        req.consumer.limit,
        req.consumer.shard,
        req.consumer.maxWaitMs,
        req.consumer.leaseMs,
      );
    // Nothing stored at all: nothing becomes ready later either (a lease end of an acked message is no news).
    return {
      ...result,
      after: {
        ready,
        nextVisibleAt: ready || this.backlogCount === 0 ? null : nextVisible(this.sql, this.delivery, now),
      },
    };
  }

  /** Keeps leases alive for a consumer still working (QuiCK's lease extension). */
  extendLeases(queueId: string, refs: LeaseRef[], leaseMs: number): string[] {
    // A keyed lease is a row (keyed-leases.ts): extending it writes.
    return this.ifServing(queueId, [], () => {
      // A longer lease moves this shard's due work later: a sleeping shard re-plans it at its report.
      this.alarms.wake(this.clock.now());
      return this.ctx.storage.transactionSync(() => extend(this.sql, this.delivery, this.clock.now(), refs, leaseMs));
    });
  }

  /** Messages still held under these leases, with their bodies: what a dead-letter move needs. */
  readLeased(queueId: string, refs: LeaseRef[]): LeasedMessage[] {
    return this.ifServing(queueId, [], () => readLeased(this.sql, this.delivery, refs));
  }

  /**
   * The fault harness's hook (src/kernel/test-hooks.ts): throws unless SHARDQ_TEST_HOOKS is
   * "on", in control(), before anything is armed or corrupted.
   */
  testHook(
    req: { arm?: FaultPoint | null; times?: number; corrupt?: number } = {},
  ): TestHookStatus & { corrupted?: Array<{ id: string; slot: string }> } {
    const status = this.hooks.control(req.arm, req.times);
    // Deferred acks written first: a body corrupted now is one a consumer may still be given.
    if (req.corrupt) this.persistDeferred(this.clock.now(), true);
    return req.corrupt ? { ...status, corrupted: corruptBodies(this.sql, this.delivery.leases, req.corrupt) } : status;
  }

  stats(): ShardStats {
    return this.figures(true);
  }

  /** Removes every message and forgets the shard's identity: used when its queue is deleted. */
  async destroy(): Promise<void> {
    await this.ctx.storage.deleteAll();
    migrate(this.sql);
    this.identity = null;
    this.state = "retired";
    // Whatever mirrors a table or a meta row deleteAll() emptied goes too, as a restart would find it.
    this.epoch = null;
    this.retentionMs = null;
    this.backlogCount = 0;
    this.backlogBytes = 0;
    this.leasedNow = 0;
    this.delivery.reset();
    forgetHandoffs(this.sql);
  }
}
