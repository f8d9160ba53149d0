/**
 * A storage shard's reports to its Coordinator: what one says, whether it is sent at all (a
 * shard whose figures did not change since its last report sleeps instead), when the next is
 * due (shard-alarm.ts arms it), and what the reply leaves here: the queue's other shards'
 * figures, its retention, and whether to stay awake although nothing changes.
 */
import { coordinatorFor } from "../src/kernel/addressing";
import { serviceConfig } from "../src/kernel/config";
import type { Env } from "../src/kernel/env";
import {
  REPORT_BACKLOG_GROWTH,
  SLOW_BELOW_SHARE,
  SLOW_REPORT_MS,
  type StorageHeartbeat,
} from "../src/kernel/heartbeat";
import type { ShardBacklog, ShardStats } from "../src/kernel/figures";
import type { Epoch, ShardIdentity, ShardState } from "../src/kernel/shard-map";
import type { TestHooks } from "../src/kernel/test-hooks";
import type { ActivityMeter } from "./capacity";
import type { DeliveryState } from "./segments/delivery-state";
import { owedHandoffs } from "./handoff/handoff";

/**
 * Reports a shard sends, while a push consumer should be taking its ready messages and nobody
 * does, before it sleeps anyway: each wakes consumers (a round lost to a reset), and a
 * consumer that never comes (its Worker unbound) is a backlog waiting for a consumer.
 */
const STAY_AWAKE_REPORTS = 6;

/** What a report reads of its shard (shard-core.ts), and the shard's own work it does on the way. */
export interface ShardReportsDeps {
  env: Env;
  sql: SqlStorage;
  hooks: TestHooks;
  activity: ActivityMeter;
  delivery: DeliveryState;
  identity: () => ShardIdentity | null;
  state: () => ShardState;
  epoch: () => Epoch | null;
  backlogCount: () => number;
  /** Leases that ran out unsettled: their messages ready again. */
  takeLapsedLeases: (now: number) => void;
  /** Counts the leases held now, as the shard's running count from now on. */
  countLeases: (now: number) => number;
  /** Writes the releases of handed-off keys due (all of them, `force`) and sends those owed. */
  flushReleases: (force: boolean) => void;
  figures: () => ShardStats;
  readyNow: (now: number) => boolean;
  /** The queue's retention as the Coordinator says it: kept, and messages past it deleted; whether any were. */
  expire: (now: number, retentionMs: number) => boolean;
}

export class ShardReports {
  /** When the next report is due after the one under way: set by report(), null after a failure (an interval on). */
  nextReportAt: number | null = null;
  /** The backlog the last report showed (a slow shard reports sooner once it grows: busy). */
  private reportedBacklog = 0;
  /** The figures of the last report sent (in memory: a restart reports once more). */
  private lastReport: string | null = null;
  /** Whether that report said messages were ready (null: none sent since this instance started). */
  reportedReady: boolean | null = null;
  /** The Coordinator asked for reports although nothing changes (HeartbeatReply.stayAwake); how many such reports in a row. */
  private stayAwake = false;
  private idleReports = 0;
  /** The queue's other shards' figures as the Coordinator's last heartbeat reply gave them, handed on with appends and leases. */
  peers: ShardBacklog[] = [];
  /** The report under way: the alarm's and the quiet work's never run side by side. */
  private reporting: Promise<boolean> | null = null;

  constructor(private readonly deps: ShardReportsDeps) {}

  /**
   * Reports this shard's figures, unless nothing changed since the last report: then it
   * sleeps (answers false). Deletes messages past the queue's retention (the reply carries
   * it). Answers whether to stay awake: it does while the period had activity, while it owes
   * hand-offs of ordering keys (the report's alarm tries them again), and for a few reports
   * while the Coordinator says its ready messages wait for a push consumer.
   */
  report(now: number, quiet = false): Promise<boolean> {
    if (this.reporting) return this.reporting;
    this.reporting = this.sendReport(now, quiet).finally(() => (this.reporting = null));
    return this.reporting;
  }

  /** report(): `quiet`, its requests stopped, so this report is its last unless it has reason to stay awake. */
  private async sendReport(now: number, quiet: boolean): Promise<boolean> {
    const d = this.deps;
    d.hooks.alarmStarts();
    const identity = d.identity();
    const state = d.state();
    if (!identity || state === "retired") return false;
    d.takeLapsedLeases(now);
    const period = d.activity.roll(now);
    // Reset to the truth: the running count drifts up (leases run out), and a draining shard reporting leases it does not hold is never retired.
    const leasedNow = d.countLeases(now);
    d.flushReleases(true);
    const epoch = d.epoch();
    const beat: StorageHeartbeat = {
      ...d.figures(),
      ...period,
      shard: identity.name,
      state,
      leasedNow,
      sentAt: now,
      handoffs: owedHandoffs(d.sql),
      readyNow: d.readyNow(now),
      ...(epoch ? { epoch: epoch.seq } : {}),
    };
    // Far below what the autoscaler acts on, an active shard reports on the slow cadence, and says so.
    const config = serviceConfig(d.env);
    const slow = state === "active" && !this.stayAwake && (beat.handoffs ?? 0) === 0 && !this.busyPeriod(period);
    const nextReportAt =
      now + (slow ? Math.max(SLOW_REPORT_MS, config.heartbeatIntervalMs) : config.heartbeatIntervalMs);
    const owes = (beat.handoffs ?? 0) > 0;
    const last = quiet && state === "active" && !this.stayAwake && !owes;
    if (last) beat.last = true;
    else beat.nextReportAt = nextReportAt;
    const { cost: _cost, periodMs: _period, sentAt: _sent, nextReportAt: _next, last: _last, ...figures } = beat;
    const signature = JSON.stringify(figures);
    if (signature === this.lastReport && !this.stayAwake && !owes) {
      d.hooks.alarmEnds(now);
      return false;
    }
    const notable = d.delivery.notable;
    d.delivery.notable = false;
    const reply = await coordinatorFor(d.env, identity.queueId)
      .heartbeat(beat)
      .catch((err: unknown) => {
        d.activity.unroll(period, now);
        d.delivery.notable ||= notable;
        throw err;
      });
    if (!reply.known) return false;
    this.lastReport = signature;
    this.reportedReady = beat.readyNow ?? null;
    this.reportedBacklog = beat.backlogCount;
    // Asked to stay awake (ready messages nobody took, or the autoscaler waiting): within an interval.
    this.nextReportAt = reply.stayAwake ? now + config.heartbeatIntervalMs : nextReportAt;
    if (reply.backlogs) this.peers = reply.backlogs.filter((b) => b.shard !== beat.shard);
    const expired = reply.retentionMs !== null && d.expire(now, reply.retentionMs);
    // The running totals, when a minute passed; a shard going to sleep writes them at once (alarm(): persistDeferred).
    d.delivery.flushTotals(now);
    d.hooks.alarmEnds(now);
    const active = period.messagesIn + period.messagesOut + period.refusals > 0;
    this.idleReports = active ? 0 : this.idleReports + 1;
    this.stayAwake = reply.stayAwake === true && this.idleReports < STAY_AWAKE_REPORTS;
    // Messages it expired after the report are not in it: one more report, so its last one is true.
    return (active && !last) || this.stayAwake || owes || expired;
  }

  /** Whether a period's traffic (in, out, refused) reaches SLOW_BELOW_SHARE of what the autoscaler aims a shard at. */
  private busyPeriod(p: { messagesIn: number; messagesOut: number; refusals: number; periodMs: number }): boolean {
    if (p.refusals > 0) return true;
    const config = serviceConfig(this.deps.env);
    const target = config.targetPerShard * SLOW_BELOW_SHARE;
    return ((p.messagesIn + p.messagesOut) * 1000) / Math.max(p.periodMs, config.heartbeatIntervalMs) >= target;
  }

  /** Traffic since the last report that the Coordinator should hear of within an interval (shard-alarm.ts). */
  busy(now: number): boolean {
    const a = this.deps.activity;
    return (
      this.deps.delivery.notable ||
      this.deps.backlogCount() - this.reportedBacklog >= REPORT_BACKLOG_GROWTH ||
      this.busyPeriod({
        messagesIn: a.messagesIn,
        messagesOut: a.messagesOut,
        refusals: a.refusals,
        periodMs: now - a.periodStart,
      })
    );
  }
}
