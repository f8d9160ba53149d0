import type { ShardHeartbeat } from "../src/kernel/heartbeat";
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
 * Adds a point unless the latest is under a step old (or `always`: the point before the
 * control loop sleeps), and forgets points older than the span. Rates are summed over
 * the shards' latest reports that are still current: a sleeping shard's shows no activity.
 */
export function recordPoint(
  sql: SqlStorage,
  now: number,
  beats: ShardHeartbeat[],
  activeShards: number,
  consumersRunning: number,
  always = false,
): boolean {
  const last = sql.exec<{ at: number }>("SELECT at FROM series ORDER BY at DESC LIMIT 1").toArray()[0];
  if (last && now - last.at < SERIES_STEP_MS && !always) return false;
  let count = 0;
  let bytes = 0;
  let inPerS = 0;
  let outPerS = 0;
  for (const b of beats) {
    count += b.backlog_count;
    bytes += b.backlog_bytes;
    if (!b.healthy || b.sleeping || b.period_ms <= 0) continue;
    inPerS += (b.messages_in * 1000) / b.period_ms;
    outPerS += (b.messages_out * 1000) / b.period_ms;
  }
  sql.exec(
    "INSERT OR REPLACE INTO series (at, backlog_count, backlog_bytes, messages_in_per_second, messages_out_per_second, active_shards, consumer_shards_running) VALUES (?, ?, ?, ?, ?, ?, ?)",
    now,
    count,
    bytes,
    Math.round(inPerS * 10) / 10,
    Math.round(outPerS * 10) / 10,
    activeShards,
    consumersRunning,
  );
  sql.exec("DELETE FROM series WHERE at < ?", now - SERIES_SPAN_MS);
  return true;
}

/**
 * Points since `since` (default: the whole span), oldest first, a point every step. The
 * control loop writes none while the queue sleeps: the quiet time is filled here from the
 * point written before the sleep, with its backlog (nothing changed it: any change wakes
 * the loop) and no traffic.
 */
export function readSeries(sql: SqlStorage, now: number, since = now - SERIES_SPAN_MS): SeriesPoint[] {
  const stored = sql
    .exec<SeriesPoint & Record<string, SqlStorageValue>>(
      "SELECT at AS at_ms, backlog_count, backlog_bytes, messages_in_per_second, messages_out_per_second, active_shards, consumer_shards_running FROM series WHERE at >= ? ORDER BY at",
      since,
    )
    .toArray();
  // The last point before the window, so a window that begins asleep starts filled.
  const before = sql
    .exec<SeriesPoint & Record<string, SqlStorageValue>>(
      "SELECT at AS at_ms, backlog_count, backlog_bytes, messages_in_per_second, messages_out_per_second, active_shards, consumer_shards_running FROM series WHERE at < ? ORDER BY at DESC LIMIT 1",
      since,
    )
    .toArray()[0];
  return fillQuiet(before ? [{ ...before }, ...stored] : stored, now).filter((p) => p.at_ms >= since);
}

/**
 * Inserts a quiet point every step where a gap of more than a step and a half has none:
 * between two points, up to half a step before the later; after the last, up to `now`.
 */
export function fillQuiet(points: readonly SeriesPoint[], now: number): SeriesPoint[] {
  const out: SeriesPoint[] = [];
  points.forEach((p, i) => {
    out.push({ ...p });
    const next = points[i + 1];
    const until = next ? next.at_ms - SERIES_STEP_MS / 2 : now;
    if ((next ? next.at_ms : now) - p.at_ms <= SERIES_STEP_MS * 1.5) return;
    for (let at = p.at_ms + SERIES_STEP_MS; at <= until; at += SERIES_STEP_MS) {
      out.push({ ...p, at_ms: at, messages_in_per_second: 0, messages_out_per_second: 0, consumer_shards_running: 0 });
    }
  });
  return out;
}
