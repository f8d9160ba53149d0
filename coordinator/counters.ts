/**
 * A queue's delivery counters (stored, leased, acked, retried, dead-lettered, ...) as
 * Prometheus counters: cumulative, and never going down.
 *
 * Each storage shard keeps running totals and reports them in every heartbeat; the sum
 * over the queue's shards would be the queue's counter, except that it can drop:
 *
 * - A shard writes its totals to SQLite at most once a second (storage-shard/
 *   delivery-state.ts). When its object restarts (a deploy, an eviction under load, a
 *   crash) it starts again from the last write, so it may report a little less than
 *   before. The counts lost that way are the only inexactness left.
 * - A retired shard is forgotten ten minutes after it retired (control-loop.ts
 *   pruneRetired), and its heartbeat, totals included, with it.
 *
 * Prometheus reads any drop as a counter reset and counts the whole new value as an
 * increase, so a queue's rate() would spike. Here the Coordinator carries what the sum
 * would lose: when a shard reports less than its previous report, the difference goes
 * to that shard's carry (a report sent before the one on file, a late duplicate, is
 * not taken for a restart); a forgotten shard's totals and carry go to the queue's.
 */
import { type DeliveryTotals, COUNTER_NAMES, type QueueCounters } from "../src/kernel/figures";

/** The carry row of shards no longer on file. No shard is named "". */
const FORGOTTEN = "";

/** Call before a shard's new report replaces the one on file. */
export function carryShardRestart(sql: SqlStorage, shard: string, next: Partial<DeliveryTotals>, sentAt: number): void {
  const prev = sql
    .exec<{ totals: string; sent_at: number }>("SELECT totals, sent_at FROM heartbeats WHERE name = ?", shard)
    .toArray()[0];
  if (!prev || sentAt <= prev.sent_at) return;
  const before = JSON.parse(prev.totals) as Partial<DeliveryTotals>;
  const lost: Partial<QueueCounters> = {};
  let any = false;
  for (const k of COUNTER_NAMES) {
    const drop = (before[k] ?? 0) - (next[k] ?? 0);
    if (drop > 0) {
      lost[k] = drop;
      any = true;
    }
  }
  if (any) addCarry(sql, shard, lost);
}

/** Call before a shard's heartbeat is deleted: its figures stay in the queue's counters. */
export function carryForgottenShard(sql: SqlStorage, shard: string): void {
  const beat = sql.exec<{ totals: string }>("SELECT totals FROM heartbeats WHERE name = ?", shard).toArray()[0];
  const carry = sql.exec<{ totals: string }>("SELECT totals FROM counter_carry WHERE name = ?", shard).toArray()[0];
  if (beat) addCarry(sql, FORGOTTEN, JSON.parse(beat.totals) as Partial<QueueCounters>);
  if (carry) addCarry(sql, FORGOTTEN, JSON.parse(carry.totals) as Partial<QueueCounters>);
  sql.exec("DELETE FROM counter_carry WHERE name = ?", shard);
}

/** The queue's counters: every shard's latest totals plus what was carried. */
export function queueCounters(sql: SqlStorage): QueueCounters {
  const sum = Object.fromEntries(COUNTER_NAMES.map((k) => [k, 0])) as QueueCounters;
  const add = (json: string) => {
    const t = JSON.parse(json) as Partial<QueueCounters>;
    for (const k of COUNTER_NAMES) sum[k] += t[k] ?? 0;
  };
  for (const r of sql.exec<{ totals: string }>("SELECT totals FROM heartbeats")) add(r.totals);
  for (const r of sql.exec<{ totals: string }>("SELECT totals FROM counter_carry")) add(r.totals);
  return sum;
}

function addCarry(sql: SqlStorage, name: string, add: Partial<QueueCounters>): void {
  const row = sql.exec<{ totals: string }>("SELECT totals FROM counter_carry WHERE name = ?", name).toArray()[0];
  const t = (row ? JSON.parse(row.totals) : {}) as Partial<QueueCounters>;
  for (const k of COUNTER_NAMES) {
    const v = (t[k] ?? 0) + (add[k] ?? 0);
    if (v !== 0) t[k] = v;
  }
  sql.exec("INSERT OR REPLACE INTO counter_carry (name, totals) VALUES (?, ?)", name, JSON.stringify(t));
}
