import { DurableObject } from "cloudflare:workers";
import { crc32 } from "../src/kernel/checksum";
import { systemClock, type Clock } from "../src/kernel/clock";
import { serviceConfig } from "../src/kernel/config";
import type { Env } from "../src/kernel/env";
import type {
  AppendRequest,
  AppendResult,
  DeliveryTotals,
  DrawnIdAnswer,
  DrawnIdProbe,
  Epoch,
  LeasedMessage,
  LeaseRef,
  LeaseRequest,
  LeaseResult,
  MessageFilter,
  MessageStatus,
  PurgeResult,
  ShardIdentity,
  ShardState,
  SettleRequest,
  SettleResult,
  ShardBacklog,
  ShardRefusal,
  ShardStats,
  StorageHeartbeat,
} from "../src/kernel/protocol";
import { ShardAlarm } from "./shard-alarm";
import { ActivityMeter, TokenBucket } from "./capacity";
import { expireOld, lease, leasedCount, type BacklogDelta } from "./delivery";
import { extend, readLeased, settle } from "./settlement";
import { DeliveryState } from "./delivery-state";
import { ConsumerWakeups } from "./consumer-wakeups";
import { DueWakeups, nextDueAfter } from "./due-wakeups";
import { coordinatorFor } from "../src/kernel/addressing";
import { meteredSql, newMeter, settleReads, type CostMeter } from "../src/kernel/sql-meter";
import { cancelMessage, countMatching, findMessage, leaseMatching, peekReady, purgeSome, releaseLeases } from "./operations";
import { migrate } from "./schema";
import { appendBatch } from "./append";
import { drawnIds } from "./drawn-ids";
import { knownIds } from "./remembered-ids";
import { acceptBridges, acceptReleases, enterEpoch, loadEpoch, owedHandoffs } from "./handoff";
import { HandoffOutbox } from "./handoff-outbox";
import { ownerOfKey } from "../src/kernel/ordering";
import { findLaneMessage, heldKeys, laneFigures, leasedLaneCount, oldestLaneAt, takeLaneHead, type HeadTaken } from "./lane-operations";
import { lanesInUse, lanesReadyAt } from "./lanes";
import { shardNumber } from "./segment";
import { testHooksFor, type FaultPoint, type TestHookStatus } from "../src/kernel/test-hooks";
import { corruptBodies } from "./corrupt-bodies";
import { PURGE_PER_CALL } from "../src/kernel/limits";

/**
 * Reports a shard sends, while a push consumer should be taking its ready messages and nobody
 * does, before it sleeps anyway: each wakes consumers (a round lost to a reset), and a
 * consumer that never comes (its Worker unbound) is a backlog waiting for a consumer.
 */
const STAY_AWAKE_REPORTS = 6;

/**
 * One storage shard of one queue. Persists every batch in a single transaction
 * before it answers: the RPC reply is held by the output gate until the write is
 * durable, so an acknowledged send is never lost. Never uses allowUnconfirmed.
 */

export class StorageShard extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private identity: ShardIdentity | null;
  private state: ShardState;
  /** The epoch the Coordinator last told this shard: which ordering keys it owns (handoff.ts). */
  private epoch: Epoch | null;
  /** Its calls to other shards for the hand-off of ordering keys. */
  private readonly outbox: HandoffOutbox;
  private backlogCount: number;
  private backlogBytes: number;
  /** What happened since the last heartbeat. */
  private readonly activity: ActivityMeter;
  /** SHARD_CAPACITY_PER_SECOND as a token bucket; tests set their own. */
  capacity: TokenBucket | null;
  /** Messages leased and not yet settled (reset on restart: a lower bound after one). */
  private leasedNow = 0;
  /** The one alarm: reports while awake, due work while asleep (shard-alarm.ts). */
  private readonly alarms: ShardAlarm;
  /** The figures of the last report sent (in memory: a restart reports once more). */
  private lastReport: string | null = null;
  /** Whether that report said messages were ready (null: none sent since this instance started). */
  private reportedReady: boolean | null = null;
  /** The Coordinator asked for reports although nothing changes (HeartbeatReply.stayAwake); how many such reports in a row. */
  private stayAwake = false;
  private idleReports = 0;
  /** The queue's retention as the Coordinator last said it (kept in meta: a sleeping shard's alarm needs it after a restart). */
  private retentionMs: number | null;
  /** Messages becoming ready later, told to the Coordinator while pulls wait (due-wakeups.ts). */
  private readonly due: DueWakeups;
  /** When the Coordinator hears that this shard has messages ready (consumer-wakeups.ts). */
  private readonly wakeups: ConsumerWakeups;
  /** RPCs served and SQLite rows written since this object started (the benchmark's cost figures). */
  private readonly cost: CostMeter = newMeter();
  /** This shard's number in its queue, written into the ids it draws (segment.ts locatedId). */
  private get shardNo(): number {
    return shardNumber(this.identity?.name ?? "");
  }
  /** Memory leases, the scan cursor and the running totals (delivery-state.ts). */
  private readonly delivery: DeliveryState;
  /** Tests replace this to drive time. */
  clock: Clock = systemClock;
  /** The fault harness's resets; inert unless SHARDQ_TEST_HOOKS is "on" (src/kernel/test-hooks.ts). */
  private readonly hooks = testHooksFor(this.env, "storage");

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = meteredSql(ctx.storage.sql, this.cost);
    migrate(this.sql);
    // Lease ids from before segments name rows of segments that are gone once settled.
    this.sql.exec("DELETE FROM legacy_rows WHERE seg NOT IN (SELECT seg FROM segments)");
    const meta = new Map(this.sql.exec<{ key: string; value: string }>("SELECT key, value FROM meta").toArray().map((r) => [r.key, r.value]));
    this.identity = meta.has("identity") ? (JSON.parse(meta.get("identity")!) as ShardIdentity) : null;
    this.state = (meta.get("state") as ShardState | undefined) ?? "active";
    this.retentionMs = meta.has("retention_ms") ? Number(meta.get("retention_ms")) : null;
    // Counted once here rather than written with every batch: rows read are cheap, rows written are not.
    const c = this.sql.exec<{ n: number; bytes: number }>("SELECT COALESCE(SUM(live), 0) AS n, COALESCE(SUM(live_bytes), 0) AS bytes FROM segments").one();
    const lanes = this.sql.exec<{ n: number; bytes: number }>("SELECT COUNT(*) AS n, COALESCE(SUM(length(body)), 0) AS bytes FROM lane_messages").one();
    this.backlogCount = c.n + lanes.n;
    this.backlogBytes = c.bytes + lanes.bytes;
    this.epoch = loadEpoch(this.sql);
    this.outbox = new HandoffOutbox(ctx, env, this.sql);
    this.delivery = new DeliveryState(this.sql);
    this.due = new DueWakeups(this.sql, this.delivery);
    this.wakeups = new ConsumerWakeups(ctx, env, () => this.identity, () => lanesReadyAt(this.sql, this.clock.now()), () => this.due.stop());
    const now = this.clock.now();
    this.activity = new ActivityMeter(now);
    const perSecond = serviceConfig(env).shardCapacityPerSecond;
    this.capacity = perSecond > 0 ? new TokenBucket(perSecond, now) : null;
    this.alarms = new ShardAlarm(
      serviceConfig(env).heartbeatIntervalMs,
      (at) => {
        // Billed as a row written.
        this.cost.rowsWritten++;
        void ctx.storage.setAlarm(at);
      },
      () => this.due.wakeAt,
    );
    // Nothing is armed here: an alarm set before a restart is durable, and finds this instance
    // knowing nothing of it (alarm(): it then does the due work and reports).
  }

  /** Called by the Coordinator when it creates this shard. Idempotent. */
  activate(identity: ShardIdentity): void {
    this.cost.rpcs++;
    if (this.identity && this.identity.queueId !== identity.queueId) {
      throw new Error(`shard ${identity.name} already belongs to queue ${this.identity.queueId}`);
    }
    this.ctx.storage.transactionSync(() => {
      this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('identity', ?)", JSON.stringify(identity));
      this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('state', 'active')");
    });
    this.identity = identity;
    this.state = "active";
    this.alarms.wake(this.clock.now());
  }

  /**
   * The Coordinator's new epoch (handoff.ts), before any broker may use the map that goes
   * with it: from now on keyed messages this shard does not own are refused, and every
   * lane here whose key another shard now owns is registered with that owner before this
   * answers. Throws when a registration could not be delivered: the Coordinator holds its
   * change back and tries again. Answers the epoch this shard is in.
   */
  async enterEpoch(queueId: string, epoch: Epoch): Promise<number> {
    this.cost.rpcs++;
    if (!this.identity || this.identity.queueId !== queueId) throw new Error(`shard ${this.identity?.name ?? "(unknown)"} is not a shard of queue ${queueId}`);
    const self = this.identity.name;
    const { registrations } = this.ctx.storage.transactionSync(() => enterEpoch(this.sql, self, epoch));
    this.epoch = loadEpoch(this.sql);
    this.alarms.wake(this.clock.now());
    await this.outbox.register(queueId, self, registrations);
    this.flushReleases();
    return this.epoch!.seq;
  }

  /** At a key's owner: `holder` holds messages of these keys older than epoch `gen` (handoff.ts). */
  acceptBridges(queueId: string, holder: string, gen: number, keys: string[]): void {
    this.cost.rpcs++;
    if (this.refuseRead(queueId)) throw new Error(`shard ${this.identity?.name ?? "(unknown)"} does not serve queue ${queueId}`);
    const now = this.clock.now();
    this.ctx.storage.transactionSync(() => acceptBridges(this.sql, now, holder, gen, keys));
    this.alarms.wake(now);
  }

  /** At a key's owner: `holder` holds nothing of these keys older than epoch `gen` any more. */
  acceptReleases(queueId: string, holder: string, gen: number, keys: string[]): void {
    this.cost.rpcs++;
    if (this.refuseRead(queueId)) return;
    const now = this.clock.now();
    this.ctx.storage.transactionSync(() => acceptReleases(this.sql, now, holder, gen, keys));
    this.alarms.wake(now);
    // The keys it freed may be ready now: consumers must come.
    this.wakeups.notifyAgain();
  }

  /** Sends the releases of handed-off keys this shard owes (handoff-outbox.ts). */
  private flushReleases(): void {
    if (this.identity) this.outbox.flush(this.identity.queueId, this.identity.name);
  }

  /** Draining and retired shards refuse new sends with a typed refusal. */
  setState(state: ShardState): void {
    this.cost.rpcs++;
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('state', ?)", state);
    this.state = state;
    // The Coordinator waits for this shard's report in its new state (a drained shard is retired on it).
    if (state !== "retired") this.alarms.wake(this.clock.now());
  }

  /** The queue's retention changed: a sleeping shard's due alarm moves with it. */
  setRetention(queueId: string, retentionMs: number): void {
    this.cost.rpcs++;
    if (!this.identity || this.identity.queueId !== queueId) return;
    this.learnRetention(retentionMs);
    if (!this.alarms.awake) this.alarms.sleep(this.nextDue(this.clock.now()));
  }

  private learnRetention(ms: number): void {
    if (ms === this.retentionMs) return;
    this.retentionMs = ms;
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('retention_ms', ?)", String(ms));
  }

  /**
   * Stores a batch, all or nothing. With `dedupe` (a retried send) messages this shard
   * stored moments ago are dropped, so a retry right after a lost reply stores once;
   * with `remember` (ids chosen by the sender) also those stored within a day, consumed
   * or not. A moved message (moveKey set) is dropped only when this very move was stored
   * here before, whatever the ids (storage-shard/remembered-ids.ts).
   */
  append(req: AppendRequest): AppendResult | Promise<AppendResult> {
    this.cost.rpcs++;
    if (!this.identity) return { ok: false, refused: "unknown_shard" };
    if (req.queueId !== this.identity.queueId) return { ok: false, refused: "wrong_queue" };
    if (this.state !== "active") return this.refuse(this.state);
    for (const m of req.messages) {
      // A body that changed between the broker and here is refused whole, not stored.
      if (crc32(m.body) !== m.checksum) return { ...this.refuse("corrupt"), detail: m.id };
    }
    // The fence (handoff.ts): a keyed message whose key another shard owns in this shard's epoch.
    const epoch = this.epoch;
    if (epoch && req.messages.some((m) => m.orderingKey !== undefined && ownerOfKey(m.orderingKey, epoch.active) !== this.identity!.name)) return this.refuse("not_owner");
    const now = this.clock.now();
    if (this.capacity && !this.capacity.take(req.messages.length, now)) return this.refuse("overloaded");
    this.alarms.wake(now);
    const { stored, bytes, ids } = this.ctx.storage.transactionSync(() => {
      const written = appendBatch(this.sql, this.delivery, this.shardNo, req, now, epoch?.seq ?? 0);
      this.delivery.flushTotals(now);
      return written;
    });
    this.backlogCount += stored;
    this.backlogBytes += bytes;
    // Counted once committed; written with the next write's totals (at most a second on).
    this.delivery.bump("stored", stored);
    this.wakeups.afterAppend(stored, this.backlogCount - this.leasedNow);
    if (this.due.plan(now)) this.alarms.arm();
    this.activity.messagesIn += stored;
    if (req.origin !== undefined && stored > 0) this.activity.inFrom[req.origin] = (this.activity.inFrom[req.origin] ?? 0) + stored;
    // The fault harness's reset once this is durable, before the reply: the sender cannot know.
    return this.hooks.afterDurable("abort-append", this.ctx, { ok: true, stored, duplicates: req.messages.length - stored, backlog: this.backlog(), ids });
  }


  /**
   * Leases up to `limit` ready messages to one consumer (a batch), after deleting any
   * past the queue's retention. Any shard state but "retired" serves leases: a
   * draining shard empties this way.
   */
  lease(req: LeaseRequest): LeaseResult {
    this.cost.rpcs++;
    const refused = this.refuseRead(req.queueId);
    if (refused) return { messages: [], waitUntil: null, more: false, nextVisibleAt: null, backlog: { shard: this.identity?.name ?? "", count: 0, bytes: 0, oldestAt: null } };
    const now = this.clock.now();
    const { result, delta } = this.write(now, () => {
      const expired = expireOld(this.sql, this.delivery, now, req.retentionMs);
      const leased = lease(this.sql, this.delivery, now, req, req.retentionMs);
      return { result: leased.result, delta: { count: expired.count + leased.delta.count, bytes: expired.bytes + leased.delta.bytes } };
    });
    this.applyDelta(delta);
    this.flushReleases();
    // A lease that found nothing changes nothing here: a pull polling an empty queue keeps no shard awake.
    if (result.messages.length > 0 || delta.count !== 0) this.alarms.wake(now);
    this.activity.messagesOut += result.messages.length;
    this.leasedNow += result.messages.length;
    this.wakeups.afterLease(result.messages.length, result.waitUntil, req.limit);
    if (req.watchUntil !== undefined && result.messages.length === 0) this.due.watch(req.watchUntil);
    if (this.due.plan(now)) this.alarms.arm();
    return { ...result, backlog: this.backlog() };
  }

  /** This shard's backlog now, exact: the in-memory figures follow every committed write. */
  private backlog(): ShardBacklog {
    return { shard: this.identity?.name ?? "", count: this.backlogCount, bytes: this.backlogBytes, oldestAt: this.oldestAt() };
  }

  /**
   * When the oldest stored message arrived: the first segment's, or a scheduled one's (a
   * rewritten message keeps its arrival time). Asked on every append and lease, so the
   * scheduled segments are read only when a delete may have taken their oldest
   * (DeliveryState.scheduledOldest); the first segment is one row by the primary key.
   */
  private oldestAt(): number | null {
    if (this.backlogCount === 0) return null;
    const first = this.sql.exec<{ t: number }>("SELECT enqueued_at AS t FROM segments ORDER BY seg LIMIT 1").toArray()[0]?.t ?? null;
    const ds = this.delivery;
    if (ds.scheduledOldest === undefined) {
      ds.scheduledOldest = this.sql.exec<{ t: number | null }>("SELECT MIN(enqueued_at) AS t FROM segments WHERE due_at IS NOT NULL AND due_at > -1").one().t;
    }
    const times = [first, ds.scheduledOldest, lanesInUse(this.sql) ? oldestLaneAt(this.sql) : null].filter((t): t is number => t !== null);
    return times.length === 0 ? null : Math.min(...times);
  }

  /** Applies a batch's outcome: deletes acked and dead-lettered messages, schedules retries. */
  settle(req: SettleRequest): SettleResult {
    this.cost.rpcs++;
    if (this.refuseRead(req.queueId)) {
      const all = [...req.acks, ...req.retries, ...req.deadLettered, ...req.dropped].map((r) => r.id);
      return { acked: 0, retried: 0, deadLettered: 0, dropped: 0, stale: all };
    }
    // Between lease and ack: the reset ends memory leases, so the messages come again.
    this.hooks.at("abort-settle", this.ctx);
    const now = this.clock.now();
    const { result, delta, lanesReady } = this.write(now, () => settle(this.sql, this.delivery, now, req));
    this.applyDelta(delta);
    this.alarms.wake(now);
    this.flushReleases();
    // A key's next messages are ready: consumers are woken if nobody leased them a moment later.
    if (lanesReady > 0) {
      if (req.wakeAtOnce) this.wakeups.notifyAgain();
      else this.wakeups.wakeIfLanesWait();
    }
    if (this.due.plan(now)) this.alarms.arm();
    this.leasedNow = Math.max(0, this.leasedNow - (result.acked + result.retried + result.deadLettered + result.dropped));
    return result;
  }

  /** Keeps leases alive for a consumer still working (QuiCK's lease extension). */
  extendLeases(queueId: string, refs: LeaseRef[], leaseMs: number): string[] {
    // A lane's lease is a row (lanes.ts): extending it writes.
    return this.read(queueId, [], () => {
      // A longer lease moves this shard's due work later: a sleeping shard re-plans it at its report.
      this.alarms.wake(this.clock.now());
      return this.ctx.storage.transactionSync(() => extend(this.sql, this.delivery, this.clock.now(), refs, leaseMs));
    });
  }

  /** Messages still held under these leases, with their bodies: what a dead-letter move needs. */
  readLeased(queueId: string, refs: LeaseRef[]): LeasedMessage[] {
    return this.read(queueId, [], () => readLeased(this.sql, this.delivery, refs));
  }

  // Queue operations (storage-shard/operations.ts): purge, lookup and cancel by id, redrive.

  /** Deletes up to `limit` messages of any state (ready, delayed, leased), oldest first; with `withIds`, answers their ids. */
  purge(queueId: string, limit: number = PURGE_PER_CALL, withIds = false): PurgeResult {
    this.cost.rpcs++;
    if (this.refuseRead(queueId)) return { deleted: 0, more: false, ...(withIds ? { ids: [] } : {}) };
    const now = this.clock.now();
    const ids: string[] | undefined = withIds ? [] : undefined;
    const r = this.write(now, () => purgeSome(this.sql, this.delivery, now, limit, ids));
    this.afterRemoval(r, now);
    this.flushReleases();
    // Emptied: the next arrival must wake a consumer again, as after a lease that found nothing.
    if (!r.more) this.wakeups.forget();
    return { deleted: r.count, more: r.more, ...(ids ? { ids } : {}) };
  }

  findMessage(queueId: string, id: string): MessageStatus | null {
    const now = this.clock.now();
    return this.read(queueId, null, () => findMessage(this.sql, this.delivery, now, id) ?? findLaneMessage(this.sql, now, id));
  }

  /**
   * Which of `ids` (ids their sender chose or kept) this shard holds or remembers storing,
   * in any state, retired too: a retried idempotent send asks every shard of its queue,
   * since the shard that took an earlier attempt may have stopped taking sends since.
   */
  heldIds(queueId: string, ids: string[]): string[] {
    this.cost.rpcs++;
    if (!this.identity || this.identity.queueId !== queueId) return [];
    return [...knownIds(this.sql, ids)];
  }

  /**
   * Whether this shard drew ids a producer now sends as its own, and for this message or
   * another (drawn-ids.ts). Retired too: the ids it drew stay taken once it is emptied.
   */
  drawnIds(queueId: string, probes: DrawnIdProbe[]): DrawnIdAnswer[] {
    this.cost.rpcs++;
    if (!this.identity || this.identity.queueId !== queueId) return probes.map(() => null);
    return drawnIds(this.sql, this.delivery, this.shardNo, this.clock.now(), probes);
  }

  /** The ordering keys held back here and why (lanes.ts heldKeys). */
  heldKeys(queueId: string, limit: number): ReturnType<typeof heldKeys> {
    return this.read(queueId, { keys: [], lanes: 0, held: { leased: 0, retry: 0, delayed: 0, handoff: 0 } }, () => heldKeys(this.sql, this.clock.now(), limit));
  }

  /** The head of a held key, if it is the message named, leased alone for an operator's release (lane-operations.ts takeLaneHead). */
  takeLaneHead(queueId: string, key: string, expected: string, leaseMs: number): HeadTaken {
    const now = this.clock.now();
    return this.read(queueId, null, () => {
      this.alarms.wake(now);
      return this.ctx.storage.transactionSync(() => takeLaneHead(this.sql, now, key, expected, leaseMs));
    });
  }

  /** Ready messages with their bodies, untouched (the dashboard's peek). */
  peekReady(queueId: string, limit: number): Array<MessageStatus & { body: Uint8Array; orderingKey?: string }> {
    return this.read(queueId, [], () => peekReady(this.sql, this.delivery, this.clock.now(), limit));
  }

  /** Deletes one message wherever it stands; false when this shard does not hold it. */
  cancelMessage(queueId: string, id: string): boolean {
    this.cost.rpcs++;
    if (this.refuseRead(queueId)) return false;
    const now = this.clock.now();
    const r = this.write(now, () => cancelMessage(this.sql, this.delivery, now, id));
    this.afterRemoval(r, now);
    this.flushReleases();
    return r.count > 0;
  }

  /** Leases ready messages matching a filter, attempts unchanged: a redrive's batch, acked through settle(). */
  leaseMatching(queueId: string, filter: MessageFilter, limit: number, leaseMs: number): LeasedMessage[] {
    this.cost.rpcs++;
    if (this.refuseRead(queueId)) return [];
    const now = this.clock.now();
    const { messages, delta } = this.write(now, () => leaseMatching(this.sql, this.delivery, now, filter, limit, leaseMs));
    this.applyDelta(delta);
    if (messages.length > 0) this.alarms.wake(now);
    this.leasedNow += messages.length;
    return messages;
  }

  /** Ends leases early so the messages are ready again now (a redrive that could not write them). */
  releaseLeases(queueId: string, refs: LeaseRef[]): number {
    this.cost.rpcs++;
    if (this.refuseRead(queueId)) return 0;
    const now = this.clock.now();
    const released = this.ctx.storage.transactionSync(() => releaseLeases(this.sql, this.delivery, now, refs));
    this.leasedNow = Math.max(0, this.leasedNow - released);
    if (released > 0) this.alarms.wake(now);
    return released;
  }

  countMatching(queueId: string, filter: MessageFilter): number {
    return this.read(queueId, 0, () => countMatching(this.sql, this.delivery, this.clock.now(), filter));
  }

  private afterRemoval(r: { delta: BacklogDelta; held: number }, now: number): void {
    this.applyDelta(r.delta);
    this.leasedNow = Math.max(0, this.leasedNow - r.held);
    if (r.delta.count !== 0) this.alarms.wake(now);
  }

  /**
   * The fault harness's hook (src/kernel/test-hooks.ts): throws unless SHARDQ_TEST_HOOKS is
   * "on", in control(), before anything is armed or corrupted.
   */
  testHook(req: { arm?: FaultPoint | null; times?: number; corrupt?: number } = {}): TestHookStatus & { corrupted?: Array<{ id: string; slot: string }> } {
    const status = this.hooks.control(req.arm, req.times);
    return req.corrupt ? { ...status, corrupted: corruptBodies(this.sql, this.delivery.leases, req.corrupt) } : status;
  }

  stats(): ShardStats {
    this.cost.rpcs++;
    return this.figures();
  }

  private figures(): ShardStats {
    settleReads(this.cost);
    const totals: DeliveryTotals = this.delivery.current();
    return { backlogCount: this.backlogCount, backlogBytes: this.backlogBytes, oldestEnqueuedAt: this.oldestAt(), totals, cost: { ...this.cost }, ...(lanesInUse(this.sql) ? { ordering: laneFigures(this.sql, this.clock.now()) } : {}) };
  }

  /** A read-only RPC (or one that only extends leases): `none` when this shard is not the queue's. */
  private read<T>(queueId: string, none: T, fn: () => T): T {
    this.cost.rpcs++;
    return this.refuseRead(queueId) ? none : fn();
  }

  private refuseRead(queueId: string): boolean {
    return !this.identity || this.identity.queueId !== queueId || this.state === "retired";
  }

  /** Runs `fn` in one transaction, with the running totals written in it when a second has passed. */
  private write<T>(now: number, fn: () => T): T {
    return this.ctx.storage.transactionSync(() => {
      const r = fn();
      this.delivery.flushTotals(now);
      return r;
    });
  }

  /** After the transaction committed: the in-memory figures follow the rows. */
  private applyDelta(delta: BacklogDelta): void {
    this.backlogCount += delta.count;
    this.backlogBytes += delta.bytes;
  }

  /**
   * The one alarm (shard-alarm.ts): a report while awake, due work while asleep, a waiting
   * pull's wake-up. Whatever fails, the next alarm is armed here and nothing is thrown: the
   * platform retries a throwing alarm 6 times, then drops it, and a shard whose alarm was
   * dropped would never report or do its due work again (the fault run's throw-alarm fault).
   */
  override async alarm(): Promise<void> {
    this.cost.alarms++;
    const now = this.clock.now();
    const causes = this.alarms.fired(now);
    // A scheduled message came due while a pull waits: tell the Coordinator first.
    if (this.due.takeDue(now)) this.wakeups.notifyAgain();
    // Due work, or an alarm this instance did not set (armed before a restart): leases held
    // in memory were lost with it, and their messages are ready again.
    if (causes.has("due") || (causes.size === 0 && this.identity && this.state !== "retired")) this.dueWork(now);
    if (causes.has("heartbeat")) {
      const again = await this.report(now).catch((err: unknown) => (console.error(`storage shard ${this.identity?.name}: heartbeat failed:`, err), true));
      if (again) this.alarms.wake(now);
      else this.alarms.sleep(this.nextDue(now));
    }
    this.due.plan(now);
    this.alarms.arm();
  }

  /**
   * Something came due while this shard slept: messages past retention are deleted, and if
   * a message is ready (a delay or a lease ended), the Coordinator hears of it and wakes a
   * consumer or a waiting pull. The shard wakes, so its next report carries the new figures.
   */
  private dueWork(now: number): void {
    if (!this.identity || this.state === "retired") return;
    if (this.retentionMs !== null && this.backlogCount > 0) {
      const retention = this.retentionMs;
      this.applyDelta(this.ctx.storage.transactionSync(() => expireOld(this.sql, this.delivery, now, retention, true)));
      this.flushReleases();
    }
    // Ready messages the last report already showed were there for anyone asking: a consumer was told then.
    if (this.readyNow(now) && this.reportedReady !== true) this.wakeups.notifyAgain();
    this.alarms.wake(now);
  }

  /** Whether a message here is ready for a consumer now: one read of the first ready message's header. */
  private readyNow(now: number): boolean {
    return this.backlogCount > 0 && (peekReady(this.sql, this.delivery, now, 1).length > 0 || lanesReadyAt(this.sql, now));
  }

  /**
   * When this shard next has work without a request: a message becoming ready (a delay, a
   * retry delay, a lease running out, a held key's next message), or the oldest message
   * reaching the queue's retention. Null when nothing comes due: it sleeps without an alarm.
   */
  private nextDue(now: number): number | null {
    if (!this.identity || this.state === "retired" || this.backlogCount === 0) return null;
    const ready = nextDueAfter(this.sql, this.delivery, now);
    const oldest = this.retentionMs !== null ? this.oldestAt() : null;
    const expiry = oldest !== null ? Math.max(now + 1, oldest + this.retentionMs! + 1) : null;
    const times = [ready, expiry].filter((t): t is number => t !== null);
    return times.length === 0 ? null : Math.min(...times);
  }

  /**
   * Reports this shard's figures, unless nothing changed since the last report: then it
   * sleeps (answers false). Deletes messages past the queue's retention (the reply carries
   * it). Answers whether to stay awake: it does while the period had activity, while it owes
   * hand-offs of ordering keys (the report's alarm tries them again), and for a few reports
   * while the Coordinator says its ready messages wait for a push consumer.
   */
  private async report(now: number): Promise<boolean> {
    this.hooks.alarmStarts();
    if (!this.identity || this.state === "retired") return false;
    const period = this.activity.roll(now);
    // Reset to the truth: the running count drifts up (leases run out), and a draining shard reporting leases it does not hold is never retired.
    this.leasedNow = leasedCount(this.delivery, now) + leasedLaneCount(this.sql);
    this.flushReleases();
    const beat: StorageHeartbeat = {
      ...this.figures(),
      ...period,
      shard: this.identity.name,
      state: this.state,
      leasedNow: this.leasedNow,
      sentAt: now,
      handoffs: owedHandoffs(this.sql),
      readyNow: this.readyNow(now),
      ...(this.epoch ? { epoch: this.epoch.seq } : {}),
    };
    const { cost: _cost, periodMs: _period, sentAt: _sent, ...figures } = beat;
    const signature = JSON.stringify(figures);
    const owes = (beat.handoffs ?? 0) > 0;
    if (signature === this.lastReport && !this.stayAwake && !owes) {
      this.hooks.alarmEnds(now);
      return false;
    }
    const reply = await coordinatorFor(this.env, this.identity.queueId)
      .heartbeat(beat)
      .catch((err: unknown) => {
        this.activity.unroll(period, now);
        throw err;
      });
    if (!reply.known) return false;
    this.lastReport = signature;
    this.reportedReady = beat.readyNow ?? null;
    if (reply.retentionMs !== null) {
      this.learnRetention(reply.retentionMs);
      const delta = this.ctx.storage.transactionSync(() => expireOld(this.sql, this.delivery, now, reply.retentionMs!, true));
      this.applyDelta(delta);
      this.flushReleases();
    }
    // An idle shard's last report also writes the running totals that were waiting for a second to pass.
    this.delivery.flushTotals(now, true);
    this.hooks.alarmEnds(now);
    const active = period.messagesIn + period.messagesOut + period.refusals > 0;
    this.idleReports = active ? 0 : this.idleReports + 1;
    this.stayAwake = reply.stayAwake === true && this.idleReports < STAY_AWAKE_REPORTS;
    return active || this.stayAwake || owes;
  }

  private refuse(reason: ShardRefusal): { ok: false; refused: ShardRefusal } {
    this.activity.refusals++;
    return { ok: false, refused: reason };
  }

  /** Removes every message and forgets the shard's identity: used when its queue is deleted. */
  async destroy(): Promise<void> {
    this.cost.rpcs++;
    await this.ctx.storage.deleteAll();
    migrate(this.sql);
    this.identity = null;
    this.state = "retired";
    this.backlogCount = 0;
    this.backlogBytes = 0;
    this.leasedNow = 0;
    this.delivery.reset();
  }
}
