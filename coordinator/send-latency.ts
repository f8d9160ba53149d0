import type { SendLatencyCounts } from "../src/kernel/figures";
/**
 * A queue's send latency histogram, kept by its Coordinator: the sum of what every
 * broker isolate measured (broker/metrics/latency-histogram.ts). An isolate's own counts die
 * with it and production runs many isolates, so each adds its counts here about once a
 * minute while sends go on, and GET /metrics reads the cumulative result.
 */

const LE = /^(?:\+Inf|(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)$/;

/**
 * Adds a broker's counts. Rejects a malformed batch whole (never half-added); the
 * broker logs the error. The histogram is one row, so a report is one row written.
 */
export function recordSendLatency(sql: SqlStorage, counts: SendLatencyCounts): void {
  if (typeof counts !== "object" || counts === null || typeof counts.buckets !== "object" || counts.buckets === null) {
    throw new Error("send latency: expected { buckets, sumSeconds, count }");
  }
  const entries = Object.entries(counts.buckets);
  let n = 0;
  for (const [le, c] of entries) {
    if (!LE.test(le) || !Number.isSafeInteger(c) || c < 0)
      throw new Error(`send latency: bad bucket ${JSON.stringify(le)}: ${c}`);
    n += c;
  }
  if (!Number.isSafeInteger(counts.count) || counts.count !== n)
    throw new Error(`send latency: count ${counts.count} is not the sum of the buckets (${n})`);
  if (!Number.isFinite(counts.sumSeconds) || counts.sumSeconds < 0)
    throw new Error(`send latency: bad sum ${counts.sumSeconds}`);
  if (n === 0) return;
  const total = readSendLatency(sql);
  for (const [le, c] of entries) if (c > 0) total.buckets[le] = (total.buckets[le] ?? 0) + c;
  sql.exec(
    "INSERT INTO send_latency_histogram (one, buckets, sum) VALUES (1, ?, ?) ON CONFLICT(one) DO UPDATE SET buckets = excluded.buckets, sum = excluded.sum",
    JSON.stringify(total.buckets),
    total.sumSeconds + counts.sumSeconds,
  );
}

/** Everything recorded since the queue was created. */
export function readSendLatency(sql: SqlStorage): SendLatencyCounts {
  const row = sql
    .exec<{ buckets: string; sum: number }>("SELECT buckets, sum FROM send_latency_histogram")
    .toArray()[0];
  const buckets = row ? (JSON.parse(row.buckets) as Record<string, number>) : {};
  return { buckets, sumSeconds: row?.sum ?? 0, count: Object.values(buckets).reduce((a, b) => a + b, 0) };
}
