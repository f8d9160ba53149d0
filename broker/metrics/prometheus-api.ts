/**
 * GET /metrics: every queue of the token's account in the Prometheus text format.
 *
 * Gauges (backlog, bytes, oldest message, leases, consumer concurrency, shards) are read
 * now, from the storage shards and the Coordinator, as GET .../metrics reads them.
 * Counters come from the shards' running totals as their heartbeats last reported them
 * (so up to HEARTBEAT_INTERVAL_MS behind), summed by the Coordinator, which keeps them
 * from ever going down (coordinator/counters.ts). The send latency histogram is what
 * every broker isolate has flushed to the Coordinator (broker/metrics/latency-histogram.ts);
 * the isolate answering the scrape flushes its own counts first.
 */
import { catalogFor, coordinatorFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import type { CounterName, QueueCounters, SendLatencyCounts } from "../../src/kernel/figures";
import type { ShardMap, ShardState } from "../../src/kernel/shard-map";
import type { QueueMetrics } from "../../src/kernel/queue-info";
import { cumulativeBuckets, sendLatency } from "./latency-histogram";
import { queueMetrics } from "../../src/routing/queue-metrics";
import { EXPOSITION_CONTENT_TYPE, Exposition, type Labels } from "./prometheus";

/** Queues read at once: each read is a few DO RPCs (Coordinator, every live storage shard). */
const CONCURRENT_QUEUES = 8;
const SHARD_STATES: readonly ShardState[] = ["active", "draining", "retired"];

const COUNTERS: ReadonlyArray<[CounterName, string, string]> = [
  [
    "stored",
    "shardq_messages_in_total",
    "Messages stored by the queue's storage shards: sends, and moves in (dead-letter moves, redrives).",
  ],
  [
    "leased",
    "shardq_messages_delivered_total",
    "Deliveries: messages leased to a consumer (push or pull), redeliveries included.",
  ],
  ["acked", "shardq_messages_acked_total", "Messages acknowledged, and so deleted."],
  [
    "retried",
    "shardq_messages_retried_total",
    "Deliveries that ended in a retry (explicit, a throwing handler, an expired lease).",
  ],
  [
    "deadLettered",
    "shardq_messages_dead_lettered_total",
    "Messages moved to the dead-letter queue after their last retry.",
  ],
  [
    "dropped",
    "shardq_messages_dropped_total",
    "Messages deleted after their last retry, the consumer having no dead-letter queue.",
  ],
  ["expired", "shardq_messages_expired_total", "Messages deleted unread past the queue's message_retention_period."],
  [
    "quarantined",
    "shardq_messages_quarantined_total",
    "Messages whose stored body no longer matched its checksum, set aside and never delivered.",
  ],
  ["purged", "shardq_messages_purged_total", "Messages deleted by a purge."],
  ["cancelled", "shardq_messages_cancelled_total", "Messages deleted one by one (DELETE .../messages/:id)."],
];

interface QueueFigures {
  labels: Labels;
  map: ShardMap;
  metrics: QueueMetrics;
  counters: QueueCounters;
  sendLatency: SendLatencyCounts;
}

export async function prometheusMetrics(env: Env, accountId: string): Promise<Response> {
  // Sends this isolate answered are counted in the histogram below, not a flush later.
  await sendLatency.flush(accountId);
  const queues = await catalogFor(env, accountId).queueIds();
  const now = Date.now();
  const read: Array<QueueFigures | { labels: Labels; failed: true } | null> = [];
  for (let i = 0; i < queues.length; i += CONCURRENT_QUEUES) {
    read.push(...(await Promise.all(queues.slice(i, i + CONCURRENT_QUEUES).map((q) => readQueue(env, q)))));
  }

  const out = declareFamilies(new Exposition());
  for (const q of read) {
    if (!q) continue;
    out.gauge("shardq_queue_scrape_ok", q.labels, "failed" in q ? 0 : 1);
    if ("failed" in q) continue;
    const { labels, metrics, map } = q;
    out.gauge("shardq_queue_backlog_messages", labels, metrics.backlog_count);
    out.gauge("shardq_queue_backlog_bytes", labels, metrics.backlog_bytes);
    const oldest = metrics.oldest_message_timestamp_ms;
    out.gauge(
      "shardq_queue_oldest_message_age_seconds",
      labels,
      oldest === null ? 0 : Math.max(0, now - oldest) / 1000,
    );
    out.gauge(
      "shardq_leased_messages",
      labels,
      metrics.shards.reduce((n, s) => n + (s.heartbeat?.leased ?? 0), 0),
    );
    out.gauge("shardq_consumer_concurrency", labels, metrics.consumer_concurrency ?? 0);
    out.gauge("shardq_ordering_lanes", labels, metrics.ordering.lanes);
    for (const [reason, n] of Object.entries(metrics.ordering.held_by_reason))
      out.gauge("shardq_ordering_held_keys", { ...labels, reason }, n);
    const held = metrics.ordering.oldest_held_since_ms;
    out.gauge("shardq_ordering_oldest_held_seconds", labels, held === null ? 0 : Math.max(0, now - held) / 1000);
    for (const [region, byState] of shardCounts(map)) {
      for (const state of SHARD_STATES)
        out.gauge("shardq_storage_shards", { ...labels, region, state }, byState.get(state) ?? 0);
    }
    for (const [key, name] of COUNTERS) out.counter(name, labels, q.counters[key]);
    out.histogram("shardq_send_latency_seconds", labels, cumulativeBuckets(q.sendLatency));
  }
  return new Response(out.text(), {
    headers: { "content-type": EXPOSITION_CONTENT_TYPE, "cache-control": "no-store" },
  });
}

function declareFamilies(out: Exposition): Exposition {
  out
    .declare(
      "shardq_queue_scrape_ok",
      "gauge",
      "1 when the queue's figures below were read for this scrape; 0 when reading them failed (they are missing).",
    )
    .declare(
      "shardq_queue_backlog_messages",
      "gauge",
      "Messages stored and not yet acknowledged or removed: ready, delayed and leased.",
    )
    .declare("shardq_queue_backlog_bytes", "gauge", "Bytes of the bodies of the backlog's messages.")
    .declare(
      "shardq_queue_oldest_message_age_seconds",
      "gauge",
      "Age of the oldest message in the backlog; 0 when it is empty.",
    )
    .declare(
      "shardq_leased_messages",
      "gauge",
      "Messages leased to a consumer and not yet settled, as the storage shards last reported.",
    )
    .declare("shardq_consumer_concurrency", "gauge", "Consumer shards delivering now.")
    .declare("shardq_ordering_lanes", "gauge", "Ordering keys with messages stored (docs/ordered-lanes.md).")
    .declare(
      "shardq_ordering_held_keys",
      "gauge",
      "Ordering keys held back, by reason: leased (a batch in flight), retry or delayed (its next message not due), handoff (another shard holds older messages of it).",
    )
    .declare(
      "shardq_ordering_oldest_held_seconds",
      "gauge",
      "How long the longest-held ordering key has been held back; 0 when none is.",
    )
    .declare("shardq_storage_shards", "gauge", "Storage shards of the queue by region and state.");
  for (const [, name, help] of COUNTERS) out.declare(name, "counter", help);
  return out.declare(
    "shardq_send_latency_seconds",
    "histogram",
    "Time from a send or sendBatch reaching the broker to its messages stored, in seconds.",
  );
}

async function readQueue(
  env: Env,
  q: { queue_name: string; queue_id: string },
): Promise<QueueFigures | { labels: Labels; failed: true } | null> {
  const labels: Labels = { queue: q.queue_name, queue_id: q.queue_id };
  try {
    const coordinator = coordinatorFor(env, q.queue_id);
    const map = await coordinator.shardMap();
    if (!map) return null; // being created or deleted right now
    const [metrics, totals] = await Promise.all([
      queueMetrics(env, map, { heartbeats: true }),
      coordinator.metricsTotals(),
    ]);
    return { labels, map, metrics, counters: totals.counters, sendLatency: totals.sendLatency };
  } catch (err) {
    console.error(`GET /metrics: queue ${q.queue_id} could not be read:`, err);
    return { labels, failed: true };
  }
}

/** Shards per region and state; every region of the map appears. */
function shardCounts(map: ShardMap): Map<string, Map<ShardState, number>> {
  const out = new Map<string, Map<ShardState, number>>();
  for (const s of map.shards) {
    const byState = out.get(s.region) ?? new Map<ShardState, number>();
    byState.set(s.state, (byState.get(s.state) ?? 0) + 1);
    out.set(s.region, byState);
  }
  return new Map([...out].sort(([a], [b]) => a.localeCompare(b)));
}
