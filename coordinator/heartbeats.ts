/** The latest report of every shard of a queue, kept by its Coordinator. */
import type { DeliveryTotals } from "../src/kernel/figures";
import type { StorageHeartbeat, ShardHeartbeat } from "../src/kernel/heartbeat";
import { carryShardRestart } from "./counters";
import type { CostMeter, MeterReading } from "../src/kernel/sql-meter";

/** What a consumer shard reports after each round of delivery. */
export interface ConsumerShardReport {
  index: number;
  running: boolean;
  /**
   * Until when the shard counts as delivering (deliveringNow): it reports at most every ~30 s
   * (consumer-shard.ts REPORT_EVERY_MS), and again when it stops before then. Null: stopped.
   * Absent from shards older than it, which reported every round.
   */
  runningUntil?: number | null;
  delivered: number;
  batches: number;
  errors: number;
  /** What the shard was billed for since it started (src/kernel/sql-meter.ts); absent from shards older than it. */
  cost?: MeterReading;
}

export interface ConsumerShardStatus extends Omit<ConsumerShardReport, "cost" | "runningUntil"> {
  received_at: number;
  /** ConsumerShardReport.runningUntil; null when stopped or from an older shard. */
  running_until?: number | null;
  /** Everything the shard reported it was billed for, over its restarts; null before its first report with a cost. */
  cost?: CostMeter | null;
}

export function recordStorageBeat(sql: SqlStorage, beat: StorageHeartbeat, now: number): void {
  carryShardRestart(sql, beat.shard, beat.totals, beat.sentAt);
  sql.exec(
    // An upsert: OR REPLACE deletes the old row and inserts another, two rows written a report.
    `INSERT INTO heartbeats
       (name, backlog_count, backlog_bytes, oldest_at, messages_in, messages_out, refusals, leased_now, handoffs, state, period_ms, sent_at, received_at, totals, cost, in_from, next_report_at, last)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT(name) DO UPDATE SET backlog_count = excluded.backlog_count, backlog_bytes = excluded.backlog_bytes, oldest_at = excluded.oldest_at, messages_in = excluded.messages_in, messages_out = excluded.messages_out, refusals = excluded.refusals, leased_now = excluded.leased_now, handoffs = excluded.handoffs, state = excluded.state, period_ms = excluded.period_ms, sent_at = excluded.sent_at, received_at = excluded.received_at, totals = excluded.totals, cost = excluded.cost, in_from = excluded.in_from, next_report_at = excluded.next_report_at, last = excluded.last`,
    beat.shard,
    beat.backlogCount,
    beat.backlogBytes,
    beat.oldestEnqueuedAt,
    beat.messagesIn,
    beat.messagesOut,
    beat.refusals,
    beat.leasedNow,
    beat.handoffs ?? 0,
    beat.state,
    beat.periodMs,
    beat.sentAt,
    now,
    JSON.stringify(beat.totals),
    JSON.stringify(beat.cost),
    beat.inFrom ? JSON.stringify(beat.inFrom) : null,
    // Its own clock's time, moved onto this one's.
    beat.nextReportAt !== undefined ? now + (beat.nextReportAt - beat.sentAt) : null,
    beat.last ? 1 : 0,
  );
}

export function readStorageBeats(sql: SqlStorage, now: number, intervalMs: number): ShardHeartbeat[] {
  const rows = sql
    .exec(
      "SELECT name, state, backlog_count, backlog_bytes, oldest_at, messages_in, messages_out, refusals, leased_now, handoffs, period_ms, received_at, totals, cost, in_from, next_report_at, last FROM heartbeats ORDER BY name",
    )
    .toArray() as unknown as Array<
    Omit<ShardHeartbeat, "totals" | "cost" | "healthy" | "sleeping" | "in_from"> & {
      totals: string;
      cost: string;
      in_from: string | null;
      last: number;
    }
  >;
  return rows.map(({ last, ...r }) => {
    // Late three intervals after the report it said was next (one interval on, unless it said later).
    const late = now - 3 * intervalMs - Math.max(0, (r.next_report_at ?? 0) - r.received_at - intervalMs);
    // A shard whose report said it was its last (its traffic stopped), or whose last report
    // showed no activity and that has not reported since, is asleep (storage-shard/shard-alarm.ts):
    // it reports again when anything changes. One that was busy and went quiet without that
    // last report is late.
    const sleeping =
      last === 1 ||
      (r.received_at < now - 2 * intervalMs && r.messages_in === 0 && r.messages_out === 0 && r.refusals === 0);
    const in_from = r.in_from ? (JSON.parse(r.in_from) as Record<string, number>) : null;
    return {
      ...r,
      in_from,
      totals: JSON.parse(r.totals) as DeliveryTotals,
      cost: JSON.parse(r.cost) as ShardHeartbeat["cost"],
      sleeping,
      healthy: r.received_at >= late || sleeping,
    };
  });
}

/** Drops the report of a shard the queue has forgotten. */
export function forgetStorageBeat(sql: SqlStorage, name: string): void {
  sql.exec("DELETE FROM heartbeats WHERE name = ?", name);
}

export function recordConsumerReport(sql: SqlStorage, r: ConsumerShardReport, now: number): void {
  // A shard's cost figures count from its last start: when it restarted (another `since`), the
  // figures of its life before are kept in cost_carried, so its total never goes down.
  let carried: string | null = null;
  if (r.cost) {
    const prev = sql
      .exec<{ cost: string | null; cost_carried: string | null }>(
        "SELECT cost, cost_carried FROM consumer_shards WHERE idx = ?",
        r.index,
      )
      .toArray()[0];
    const before = prev?.cost ? (JSON.parse(prev.cost) as MeterReading) : null;
    const kept = prev?.cost_carried ? (JSON.parse(prev.cost_carried) as CostMeter) : null;
    carried =
      before && before.since !== r.cost.since ? JSON.stringify(addCost(kept, before)) : (prev?.cost_carried ?? null);
  }
  sql.exec(
    `INSERT INTO consumer_shards (idx, running, delivered, batches, errors, received_at, cost, cost_carried, running_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT(idx) DO UPDATE SET running = excluded.running, delivered = delivered + excluded.delivered,
       batches = batches + excluded.batches, errors = errors + excluded.errors, received_at = excluded.received_at,
       cost = COALESCE(excluded.cost, cost), cost_carried = COALESCE(excluded.cost_carried, cost_carried), running_until = excluded.running_until`,
    // An older shard's report: delivering now, or delivered since its last report, counts toward concurrency.
    r.index,
    r.runningUntil !== undefined ? (r.runningUntil !== null ? 1 : 0) : r.running || r.delivered > 0 ? 1 : 0,
    r.delivered,
    r.batches,
    r.errors,
    now,
    r.cost ? JSON.stringify(r.cost) : null,
    carried,
    r.runningUntil ?? null,
  );
}

/** Each consumer shard's latest report; `running` is false once the time it said it runs until is past (`now`). */
export function readConsumerShards(sql: SqlStorage, now?: number): ConsumerShardStatus[] {
  const rows = sql
    .exec(
      "SELECT idx, running, delivered, batches, errors, received_at, cost, cost_carried, running_until FROM consumer_shards ORDER BY idx",
    )
    .toArray() as unknown as Array<{
    idx: number;
    running: number;
    delivered: number;
    batches: number;
    errors: number;
    received_at: number;
    cost: string | null;
    cost_carried: string | null;
    running_until: number | null;
  }>;
  return rows.map((r) => ({
    index: r.idx,
    running: r.running === 1 && (r.running_until === null || now === undefined || r.running_until >= now),
    running_until: r.running_until,
    delivered: r.delivered,
    batches: r.batches,
    errors: r.errors,
    received_at: r.received_at,
    cost: r.cost
      ? addCost(r.cost_carried ? (JSON.parse(r.cost_carried) as CostMeter) : null, JSON.parse(r.cost) as MeterReading)
      : null,
  }));
}

/** Each consumer shard's latest reported figures, with the start of the life they count (the benchmark's). */
export function latestConsumerCosts(sql: SqlStorage): Record<string, MeterReading> {
  const out: Record<string, MeterReading> = {};
  for (const r of sql
    .exec<{ idx: number; cost: string }>("SELECT idx, cost FROM consumer_shards WHERE cost IS NOT NULL")
    .toArray())
    out[String(r.idx)] = JSON.parse(r.cost) as MeterReading;
  return out;
}

function addCost(a: CostMeter | null, b: CostMeter): CostMeter {
  return {
    rpcs: (a?.rpcs ?? 0) + b.rpcs,
    rowsWritten: (a?.rowsWritten ?? 0) + b.rowsWritten,
    rowsRead: (a?.rowsRead ?? 0) + b.rowsRead,
    alarms: (a?.alarms ?? 0) + b.alarms,
  };
}
