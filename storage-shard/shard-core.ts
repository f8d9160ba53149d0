import { DurableObject } from "cloudflare:workers";
import { systemClock, systemTimers, type Clock, type Timers } from "../src/kernel/clock";
import { serviceConfig } from "../src/kernel/config";
import type { Env } from "../src/kernel/env";
import type { Epoch, ShardIdentity, ShardState } from "../src/kernel/shard-map";
import type { DeliveryTotals, ShardBacklog, ShardStats } from "../src/kernel/figures";
import type { ShardRefusal } from "../src/kernel/protocol";
import { ShardAlarm } from "./shard-alarm";
import { QuietTimer } from "./quiet-timer";
import { restoreHeldLeases, writeHeldLeases } from "./segments/held-leases";
import { ActivityMeter, TokenBucket } from "./capacity";
import { expireLeases, expireOld, leasedCount, type BacklogDelta } from "./segments/segment-leases";
import { DeliveryState } from "./segments/delivery-state";
import { ConsumerWakeups } from "./consumer-wakeups";
import { DueWakeups, nextDueAfter, nextScheduledAfter } from "./due-wakeups";
import { meteredSql, newMeter, settleReads, type CostMeter } from "../src/kernel/sql-meter";
import { peekReady } from "./segments/segment-operations";
import { writeDeferred } from "./segments/segment-edit";
import { migrate } from "./schema";
import { loadEpoch, mayOweHandoffs, releasesDue } from "./handoff/handoff";
import { HandoffOutbox } from "./handoff/handoff-outbox";
import { exactKeyFigures, keyFigures } from "./keyed/held-keys";
import { restoreKeyed } from "./keyed/keyed-leases";
import { shardNumber } from "./segments/segment";
import { testHooksFor } from "../src/kernel/test-hooks";
import { ShardReports } from "./shard-reports";

/**
 * What every storage shard keeps and how it looks after itself: its identity, state and
 * epoch, its backlog figures, its one alarm (shard-alarm.ts) and its reports to the
 * Coordinator (shard-reports.ts), and the helpers its RPCs write and read through. The RPCs
 * are StorageShard's (storage-shard.ts) and, for the queue operations, ShardOperations'
 * (shard-operations.ts).
 */
export abstract class ShardCore extends DurableObject<Env> {
  protected readonly sql: SqlStorage;
  protected identity: ShardIdentity | null;
  protected state: ShardState;
  /** The epoch the Coordinator last told this shard: which ordering keys it owns (handoff.ts). */
  protected epoch: Epoch | null;
  /** Its calls to other shards for the hand-off of ordering keys. */
  protected readonly outbox: HandoffOutbox;
  protected backlogCount: number;
  protected backlogBytes: number;
  /** What happened since the last heartbeat. */
  protected readonly activity: ActivityMeter;
  /** SHARD_CAPACITY_PER_SECOND as a token bucket; tests set their own. */
  capacity: TokenBucket | null;
  /** Messages leased and not yet settled (reset on restart: a lower bound after one). */
  protected leasedNow = 0;
  /** The one alarm: reports while awake, due work while asleep (shard-alarm.ts). */
  protected readonly alarms: ShardAlarm;
  /** Its reports to the Coordinator, and what their replies said (shard-reports.ts). */
  protected readonly reports: ShardReports;
  /** The queue's retention as the Coordinator last said it (kept in meta: a sleeping shard's alarm needs it after a restart). */
  protected retentionMs: number | null;
  /** Messages becoming ready later, told to the Coordinator while pulls wait (due-wakeups.ts). */
  protected readonly due: DueWakeups;
  /** When the Coordinator hears that this shard has messages ready (consumer-wakeups.ts). */
  protected readonly wakeups: ConsumerWakeups;
  /** RPCs served (counted by meteredRpcs, src/kernel/rpc-meter.ts, in StorageShard) and SQLite rows written since this object started (the benchmark's cost figures). */
  protected readonly cost: CostMeter = newMeter();
  /** This shard's number in its queue, written into the ids it draws (segment.ts locatedId). */
  protected get shardNo(): number {
    return shardNumber(this.identity?.name ?? "");
  }
  /** Memory leases, the scan cursor and the running totals (delivery-state.ts). */
  protected readonly delivery: DeliveryState;
  /** Tests replace this to drive time. */
  clock: Clock = systemClock;
  /** The timers the quiet work runs on; a test that drives time with its own clock runs it itself (quietNow). */
  timers: Timers = systemTimers;
  /** The work done once requests stop, before the platform can drop this instance's memory (quiet-timer.ts). */
  protected readonly quiet = new QuietTimer(
    () => (this.clock === systemClock ? this.timers : null),
    () => this.quietNow(),
  );
  /** Whether held_leases has rows this instance wrote (held-leases.ts). */
  private leasesWritten = false;
  /** The fault harness's resets; inert unless SHARDQ_TEST_HOOKS is "on" (src/kernel/test-hooks.ts). */
  protected readonly hooks = testHooksFor(this.env, "storage");

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = meteredSql(ctx.storage.sql, this.cost);
    migrate(this.sql);
    // Lease ids from before segments name rows of segments that are gone once settled.
    this.sql.exec("DELETE FROM legacy_rows WHERE seg NOT IN (SELECT seg FROM segments)");
    const meta = new Map(
      this.sql
        .exec<{ key: string; value: string }>("SELECT key, value FROM meta")
        .toArray()
        .map((r) => [r.key, r.value]),
    );
    this.identity = meta.has("identity") ? (JSON.parse(meta.get("identity")!) as ShardIdentity) : null;
    this.state = (meta.get("state") as ShardState | undefined) ?? "active";
    this.retentionMs = meta.has("retention_ms") ? Number(meta.get("retention_ms")) : null;
    // Counted once here rather than written with every batch: rows read are cheap, rows written are not.
    const c = this.sql
      .exec<{ n: number; bytes: number }>(
        "SELECT COALESCE(SUM(live), 0) AS n, COALESCE(SUM(live_bytes), 0) AS bytes FROM segments",
      )
      .one();
    this.backlogCount = c.n;
    this.backlogBytes = c.bytes;
    this.epoch = loadEpoch(this.sql);
    this.outbox = new HandoffOutbox(ctx, env, this.sql);
    this.delivery = new DeliveryState(this.sql);
    // Keyed leases and their keys' rewritten copies (keyed-leases.ts); leases a quiet instance wrote before its eviction.
    restoreKeyed(this.sql, this.delivery, this.clock.now());
    if (restoreHeldLeases(this.sql, this.delivery, this.clock.now()) > 0)
      this.leasedNow = leasedCount(this.delivery, this.clock.now());
    this.due = new DueWakeups(this.sql, this.delivery);
    this.wakeups = new ConsumerWakeups(
      ctx,
      env,
      () => this.identity,
      () => this.delivery.keys.ready(this.clock.now()).length > 0,
      () => this.due.stop(),
    );
    const now = this.clock.now();
    this.activity = new ActivityMeter(now);
    const perSecond = serviceConfig(env).shardCapacityPerSecond;
    this.capacity = perSecond > 0 ? new TokenBucket(perSecond, now) : null;
    this.reports = new ShardReports({
      env,
      sql: this.sql,
      hooks: this.hooks,
      activity: this.activity,
      delivery: this.delivery,
      identity: () => this.identity,
      state: () => this.state,
      epoch: () => this.epoch,
      backlogCount: () => this.backlogCount,
      takeLapsedLeases: (now) => this.takeLapsedLeases(now),
      countLeases: (now) => (this.leasedNow = leasedCount(this.delivery, now)),
      flushReleases: (force) => this.flushReleases(force),
      figures: () => this.figures(),
      readyNow: (now) => this.readyNow(now),
      expire: (now, retentionMs) => {
        this.learnRetention(retentionMs);
        return this.expirePastRetention(now, retentionMs);
      },
    });
    this.alarms = new ShardAlarm(
      serviceConfig(env).heartbeatIntervalMs,
      (at) => {
        // Billed as a row written.
        this.cost.rowsWritten++;
        void ctx.storage.setAlarm(at);
      },
      () => this.due.wakeAt,
      () => this.reports.busy(this.clock.now()),
      () => this.quiet.touch(),
      () => {
        // Billed as a row written, as setting one is.
        this.cost.rowsWritten++;
        void ctx.storage.deleteAlarm();
      },
    );
    // Nothing is armed here: an alarm set before a restart is durable, and finds this instance
    // knowing nothing of it (alarm(): it then does the due work and reports).
  }

  /** Writes the releases of handed-off keys now due (handoff.ts releasesDue) and sends those owed (handoff-outbox.ts). */
  protected flushReleases(force = false): void {
    if (!this.identity || !mayOweHandoffs(this.sql)) return;
    const now = this.clock.now();
    this.ctx.storage.transactionSync(() => releasesDue(this.sql, this.delivery, now, force));
    this.outbox.flush(this.identity.queueId, this.identity.name);
  }

  protected learnRetention(ms: number): void {
    if (ms === this.retentionMs) return;
    this.retentionMs = ms;
    this.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('retention_ms', ?)", String(ms));
  }

  /** This shard's backlog now, exact: the in-memory figures follow every committed write. */
  protected backlog(): ShardBacklog {
    return {
      shard: this.identity?.name ?? "",
      count: this.backlogCount,
      bytes: this.backlogBytes,
      oldestAt: this.oldestAt(),
      at: this.clock.now(),
    };
  }

  /**
   * When the oldest stored message arrived: the first segment's, or a scheduled one's (a
   * rewritten message keeps its arrival time). Asked on every append and lease, so the
   * scheduled segments are read only when a delete may have taken their oldest
   * (DeliveryState.scheduledOldest); the first segment is one row by the primary key.
   */
  protected oldestAt(): number | null {
    if (this.backlogCount === 0) return null;
    const first =
      this.sql.exec<{ t: number }>("SELECT enqueued_at AS t FROM segments ORDER BY seg LIMIT 1").toArray()[0]?.t ??
      null;
    const ds = this.delivery;
    if (ds.scheduledOldest === undefined) {
      ds.scheduledOldest = this.sql
        .exec<{ t: number | null }>(
          "SELECT MIN(enqueued_at) AS t FROM segments WHERE due_at IS NOT NULL AND due_at > -1",
        )
        .one().t;
    }
    const times = [first, ds.scheduledOldest].filter((t): t is number => t !== null);
    return times.length === 0 ? null : Math.min(...times);
  }

  /** The peers' figures for an append or lease answer; nothing on a queue of one shard. */
  protected peerFigures(): { peers?: ShardBacklog[] } {
    const peers = this.reports.peers;
    return peers.length > 0 ? { peers } : {};
  }

  protected afterRemoval(r: { delta: BacklogDelta; held: number }, now: number): void {
    this.applyDelta(r.delta);
    this.leasedNow = Math.max(0, this.leasedNow - r.held);
    if (r.delta.count !== 0) this.alarms.wake(now);
  }

  /** Its figures; the keys' from those held in memory, or with `exact` (an operator asking) from every keyed message. */
  protected figures(exact = false): ShardStats {
    settleReads(this.cost);
    const totals: DeliveryTotals = this.delivery.current();
    const now = this.clock.now();
    const ordering = exact
      ? exactKeyFigures(this.sql, this.delivery, now)
      : this.delivery.keys.used
        ? keyFigures(this.sql, this.delivery, now)
        : null;
    return {
      backlogCount: this.backlogCount,
      backlogBytes: this.backlogBytes,
      oldestEnqueuedAt: this.oldestAt(),
      totals,
      cost: { ...this.cost },
      ...(ordering ? { ordering } : {}),
    };
  }

  /** A read-only RPC (or one that only extends leases): `none` when this shard is not the queue's. */
  protected ifServing<T>(queueId: string, none: T, fn: () => T): T {
    return this.notServing(queueId) ? none : fn();
  }

  protected notServing(queueId: string): boolean {
    return !this.identity || this.identity.queueId !== queueId || this.state === "retired";
  }

  /**
   * Runs `fn` in one transaction, with the deferred acks that are due (writeDeferred) and
   * the running totals (when TOTALS_FLUSH_MS has passed) written in it.
   */
  protected inTransaction<T>(now: number, fn: () => T): T {
    const r = this.ctx.storage.transactionSync(() => {
      const r = fn();
      writeDeferred(this.sql, this.delivery, now);
      this.delivery.flushTotals(now);
      return r;
    });
    this.quiet.touch();
    return r;
  }

  /**
   * At an alarm: the deferred acks that waited long enough; every one, and the running
   * totals, when the shard goes to sleep (nothing may wait in memory for a request that
   * does not come).
   */
  protected persistDeferred(now: number, sleeping: boolean): void {
    if (this.delivery.deferred.size === 0 && !sleeping) return;
    this.ctx.storage.transactionSync(() => {
      writeDeferred(this.sql, this.delivery, now, sleeping);
      this.delivery.flushTotals(now, sleeping);
    });
  }

  /** After the transaction committed: the in-memory figures follow the rows. */
  protected applyDelta(delta: BacklogDelta): void {
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
    if (causes.has("due") || (causes.size === 0 && this.identity && this.state !== "retired")) {
      this.dueWork(now);
      this.scheduledDueBy(now);
    }
    if (causes.has("heartbeat")) {
      this.reports.nextReportAt = null;
      const again = await this.report(now).catch(
        (err: unknown) => (console.error(`storage shard ${this.identity?.name}: heartbeat failed:`, err), true),
      );
      if (again) this.alarms.reportAt(this.reports.nextReportAt ?? now + serviceConfig(this.env).heartbeatIntervalMs);
      else this.alarms.sleep(this.nextDue(now));
    }
    this.due.plan(now);
    this.persistDeferred(now, !this.alarms.awake);
    this.alarms.arm();
    this.quiet.touch();
  }

  /**
   * No request for QUIET_MS (quiet-timer.ts): a shard awake sends its last report now and
   * sleeps (unless it has reason to stay awake: a state the Coordinator waits on, hand-offs
   * owed, ready messages nobody takes), and everything held in memory is written.
   */
  async quietNow(): Promise<void> {
    const now = this.clock.now();
    if (this.alarms.awake) {
      const again = await this.report(now, true).catch(
        (err: unknown) => (console.error(`storage shard ${this.identity?.name}: heartbeat failed:`, err), true),
      );
      if (!again) this.alarms.sleep(this.nextDue(now));
      else if (this.reports.nextReportAt !== null) this.alarms.reportAt(this.reports.nextReportAt);
    }
    this.persistDeferred(now, true);
    this.leasesWritten = this.ctx.storage.transactionSync(() =>
      writeHeldLeases(this.sql, this.delivery, now, this.leasesWritten),
    );
    this.alarms.arm();
  }

  /**
   * Something came due while this shard slept: messages past retention are deleted, and if
   * a message is ready (a delay or a lease ended), the Coordinator hears of it and wakes a
   * consumer or a waiting pull. The shard wakes, so its next report carries the new figures.
   */
  protected dueWork(now: number): void {
    if (!this.identity || this.state === "retired") return;
    if (this.retentionMs !== null && this.backlogCount > 0) this.expirePastRetention(now, this.retentionMs);
    // Ready messages the last report already showed were there for anyone asking: a consumer was
    // told then. Not of those whose lease ran out since: the lapse tells.
    if (!this.takeLapsedLeases(now) && this.readyNow(now) && this.reports.reportedReady !== true)
      this.wakeups.notifyAgain();
    this.alarms.wake(now);
  }

  /** After due work, awake: the alarm stays no later than the next scheduled segment (shard-alarm.ts). */
  protected scheduledDueBy(now: number): void {
    const next = this.identity && this.state !== "retired" ? nextScheduledAfter(this.sql, now) : null;
    if (next !== null) this.alarms.dueBy(next);
  }

  /** Deletes the messages past `retentionMs`, and writes the releases of keys that frees; whether it deleted any. */
  protected expirePastRetention(now: number, retentionMs: number): boolean {
    const delta = this.ctx.storage.transactionSync(() => expireOld(this.sql, this.delivery, now, retentionMs, true));
    this.applyDelta(delta);
    this.flushReleases();
    return delta.count !== 0;
  }

  /**
   * Leases that ran out unsettled, dropped by their holder (a consumer shard reset, a pull never
   * acking): their messages are ready again, and the consumer shard that leased here last (else
   * the Coordinator) is told at once. Nobody else tells it: this shard told consumers already, and
   * the Coordinator counts a consumer shard delivering for a while after its last report, which a
   * reset instance cannot take back. Answers whether any had.
   */
  protected takeLapsedLeases(now: number): boolean {
    if (!this.delivery.hasLapsed(now)) return false;
    // As a lease's write: the rewrites may close the open head, whose deferred acks go with it.
    this.inTransaction(now, () => expireLeases(this.sql, this.delivery, now));
    this.leasedNow = leasedCount(this.delivery, now);
    this.wakeups.notifyAgain();
    return true;
  }

  /** Whether a message here is ready for a consumer now: one read of the first ready message's header. */
  protected readyNow(now: number): boolean {
    return (
      this.backlogCount > 0 &&
      (peekReady(this.sql, this.delivery, now, 1).length > 0 || this.delivery.keys.ready(now).length > 0)
    );
  }

  /**
   * When this shard next has work without a request: a message becoming ready (a delay, a
   * retry delay, a lease running out, a held key's next message), or the oldest message
   * reaching the queue's retention. Null when nothing comes due: it sleeps without an alarm.
   */
  protected nextDue(now: number): number | null {
    if (!this.identity || this.state === "retired" || this.backlogCount === 0) return null;
    const ready = nextDueAfter(this.sql, this.delivery, now);
    const oldest = this.retentionMs !== null ? this.oldestAt() : null;
    const expiry = oldest !== null ? Math.max(now + 1, oldest + this.retentionMs! + 1) : null;
    const times = [ready, expiry].filter((t): t is number => t !== null);
    return times.length === 0 ? null : Math.min(...times);
  }

  /** The report to the Coordinator (shard-reports.ts), called through the object so that a test can make the alarm's work fail by replacing it. */
  protected report(now: number, quiet = false): Promise<boolean> {
    return this.reports.report(now, quiet);
  }

  protected refuse(reason: ShardRefusal): { ok: false; refused: ShardRefusal } {
    this.activity.refusals++;
    return { ok: false, refused: reason };
  }
}
