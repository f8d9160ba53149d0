/** The latest report of every shard of a queue, kept by its Coordinator. */
import type { DeliveryTotals, StorageHeartbeat, ShardHeartbeat } from "../src/kernel/protocol";
import { carryShardRestart } from "./counters";


/** What a consumer shard reports after each round of delivery. */
export interface ConsumerShardReport {
  index: number;
  running: boolean;
  delivered: number;
  batches: number;
  errors: number;
}

export interface ConsumerShardStatus extends ConsumerShardReport {
  received_at: number;
}

export function recordStorageBeat(sql: SqlStorage, beat: StorageHeartbeat, now: number): void {
  carryShardRestart(sql, beat.shard, beat.totals, beat.sentAt);
  sql.exec(
    `INSERT OR REPLACE INTO heartbeats
       (name, backlog_count, backlog_bytes, oldest_at, messages_in, messages_out, refusals, leased_now, state, period_ms, sent_at, received_at, totals, cost)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    beat.shard, beat.backlogCount, beat.backlogBytes, beat.oldestEnqueuedAt, beat.messagesIn, beat.messagesOut, beat.refusals, beat.leasedNow,
    beat.state, beat.periodMs, beat.sentAt, now, JSON.stringify(beat.totals), JSON.stringify(beat.cost),
  );
}

export function readStorageBeats(sql: SqlStorage, now: number, intervalMs: number): ShardHeartbeat[] {
  const rows = sql
    .exec("SELECT name, state, backlog_count, backlog_bytes, oldest_at, messages_in, messages_out, refusals, leased_now, period_ms, received_at, totals, cost FROM heartbeats ORDER BY name")
    .toArray() as unknown as Array<Omit<ShardHeartbeat, "totals" | "cost" | "healthy"> & { totals: string; cost: string }>;
  const late = now - 3 * intervalMs;
  return rows.map((r) => ({ ...r, totals: JSON.parse(r.totals) as DeliveryTotals, cost: JSON.parse(r.cost) as ShardHeartbeat["cost"], healthy: r.received_at >= late }));
}

/** Drops the report of a shard the queue has forgotten. */
export function forgetStorageBeat(sql: SqlStorage, name: string): void {
  sql.exec("DELETE FROM heartbeats WHERE name = ?", name);
}

export function recordConsumerReport(sql: SqlStorage, r: ConsumerShardReport, now: number): void {
  sql.exec(
    `INSERT INTO consumer_shards (idx, running, delivered, batches, errors, received_at) VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT(idx) DO UPDATE SET running = excluded.running, delivered = delivered + excluded.delivered,
       batches = batches + excluded.batches, errors = errors + excluded.errors, received_at = excluded.received_at`,
    // Delivering now, or delivered since its last report: it counts toward concurrency.
    r.index, r.running || r.delivered > 0 ? 1 : 0, r.delivered, r.batches, r.errors, now,
  );
}

export function readConsumerShards(sql: SqlStorage): ConsumerShardStatus[] {
  const rows = sql.exec("SELECT idx, running, delivered, batches, errors, received_at FROM consumer_shards ORDER BY idx").toArray() as unknown as Array<{
    idx: number; running: number; delivered: number; batches: number; errors: number; received_at: number;
  }>;
  return rows.map((r) => ({ index: r.idx, running: r.running === 1, delivered: r.delivered, batches: r.batches, errors: r.errors, received_at: r.received_at }));
}
