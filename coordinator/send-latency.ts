import type { SendLatencyCounts } from "../src/kernel/protocol";
/**
 * A queue's send latency histogram, kept by its Coordinator: the sum of what every
 * broker isolate measured (broker/metrics/latency-histogram.ts). An isolate's own counts die
 * with it and production runs many isolates, so each adds its counts here every few
 * seconds, and GET /metrics reads the cumulative result.
 */


const LE = /^(?:\+Inf|(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)$/;
const SUM = "_sum";

/**
 * Adds a broker's counts. Rejects a malformed batch whole (never half-added); the
 * broker logs the error. One synchronous block: committed as one write.
 */
export function recordSendLatency(sql: SqlStorage, counts: SendLatencyCounts): void {
  if (typeof counts !== "object" || counts === null || typeof counts.buckets !== "object" || counts.buckets === null) {
    throw new Error("send latency: expected { buckets, sumSeconds, count }");
  }
  const entries = Object.entries(counts.buckets);
  let n = 0;
  for (const [le, c] of entries) {
    if (!LE.test(le) || !Number.isSafeInteger(c) || c < 0) throw new Error(`send latency: bad bucket ${JSON.stringify(le)}: ${c}`);
    n += c;
  }
  if (!Number.isSafeInteger(counts.count) || counts.count !== n) throw new Error(`send latency: count ${counts.count} is not the sum of the buckets (${n})`);
  if (!Number.isFinite(counts.sumSeconds) || counts.sumSeconds < 0) throw new Error(`send latency: bad sum ${counts.sumSeconds}`);
  if (n === 0) return;
  for (const [le, c] of entries) {
    if (c > 0) sql.exec("INSERT INTO send_latency (le, n) VALUES (?, ?) ON CONFLICT(le) DO UPDATE SET n = n + excluded.n", le, c);
  }
  sql.exec("INSERT INTO send_latency (le, n) VALUES (?, ?) ON CONFLICT(le) DO UPDATE SET n = n + excluded.n", SUM, counts.sumSeconds);
}

/** Everything recorded since the queue was created. */
export function readSendLatency(sql: SqlStorage): SendLatencyCounts {
  const out: SendLatencyCounts = { buckets: {}, sumSeconds: 0, count: 0 };
  for (const r of sql.exec<{ le: string; n: number }>("SELECT le, n FROM send_latency")) {
    if (r.le === SUM) out.sumSeconds = r.n;
    else {
      out.buckets[r.le] = r.n;
      out.count += r.n;
    }
  }
  return out;
}
