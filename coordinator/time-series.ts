import type { ShardHeartbeat } from "../src/kernel/protocol";
/**
 * A queue's recent history for the dashboard: one point per SERIES_STEP_MS from the
 * shards' heartbeats (backlog, bytes, messages in and out per second, shards and
 * consumer shards at work), the last hour kept. A point a step is 360 rows an hour,
 * each written once: cheap enough to keep always, small enough to send whole.
 */

export const SERIES_STEP_MS = 10_000;
export const SERIES_SPAN_MS = 60 * 60 * 1000;

export interface SeriesPoint {
  at_ms: number;
  backlog_count: number;
  backlog_bytes: number;
  messages_in_per_second: number;
  messages_out_per_second: number;
  active_shards: number;
  consumer_shards_running: number;
}

/**
 * Adds a point unless the latest is under a step old, and forgets points older than
 * the span. Rates are summed over healthy shards' latest reports.
 */
export function recordPoint(sql: SqlStorage, now: number, beats: ShardHeartbeat[], activeShards: number, consumersRunning: number): boolean {
  const last = sql.exec<{ at: number }>("SELECT at FROM series ORDER BY at DESC LIMIT 1").toArray()[0];
  if (last && now - last.at < SERIES_STEP_MS) return false;
  let count = 0;
  let bytes = 0;
  let inPerS = 0;
  let outPerS = 0;
  for (const b of beats) {
    count += b.backlog_count;
    bytes += b.backlog_bytes;
    if (!b.healthy || b.period_ms <= 0) continue;
    inPerS += (b.messages_in * 1000) / b.period_ms;
    outPerS += (b.messages_out * 1000) / b.period_ms;
  }
  sql.exec(
    "INSERT OR REPLACE INTO series (at, backlog_count, backlog_bytes, messages_in_per_second, messages_out_per_second, active_shards, consumer_shards_running) VALUES (?, ?, ?, ?, ?, ?, ?)",
    now, count, bytes, Math.round(inPerS * 10) / 10, Math.round(outPerS * 10) / 10, activeShards, consumersRunning,
  );
  sql.exec("DELETE FROM series WHERE at < ?", now - SERIES_SPAN_MS);
  return true;
}

/** Points since `since` (default: the whole span), oldest first. */
export function readSeries(sql: SqlStorage, now: number, since = now - SERIES_SPAN_MS): SeriesPoint[] {
  return sql.exec<SeriesPoint & Record<string, SqlStorageValue>>("SELECT at AS at_ms, backlog_count, backlog_bytes, messages_in_per_second, messages_out_per_second, active_shards, consumer_shards_running FROM series WHERE at >= ? ORDER BY at", since).toArray();
}
