import type { Env } from "../kernel/env";
import { notRetired, type ShardMap } from "../kernel/shard-map";
import type { ShardHeartbeat } from "../kernel/heartbeat";
import type { QueueMetrics } from "../kernel/queue-info";
import { coordinatorFor, storageShardFor } from "../kernel/addressing";
import { jurisdictionField } from "../kernel/jurisdiction";

/**
 * Exact figures: asks every shard that may still hold messages (active and draining).
 * With `heartbeats`, each shard's latest report to the Coordinator comes along.
 */
export async function queueMetrics(env: Env, map: ShardMap, opts: { heartbeats: boolean }): Promise<QueueMetrics> {
  const shards = notRetired(map.shards);
  const [stats, beats, consumers] = await Promise.all([
    Promise.all(shards.map((s) => storageShardFor(env, s.name, s.region).stats())),
    opts.heartbeats ? coordinatorFor(env, map.queueId).heartbeats() : [],
    opts.heartbeats ? coordinatorFor(env, map.queueId).consumerShards() : null,
  ]);
  const beatOf = new Map(beats.map((b) => [b.name, b]));
  let oldest: number | null = null;
  let count = 0;
  let bytes = 0;
  const ordering: QueueMetrics["ordering"] = {
    lanes: 0,
    held_keys: 0,
    held_by_reason: { leased: 0, retry: 0, delayed: 0, handoff: 0 },
    oldest_held_since_ms: null,
  };
  const perShard = shards.map((s, i) => {
    const st = stats[i]!;
    count += st.backlogCount;
    bytes += st.backlogBytes;
    if (st.oldestEnqueuedAt !== null && (oldest === null || st.oldestEnqueuedAt < oldest)) oldest = st.oldestEnqueuedAt;
    if (st.ordering) {
      ordering.lanes += st.ordering.lanes;
      for (const [reason, n] of Object.entries(st.ordering.held) as Array<
        [keyof typeof ordering.held_by_reason, number]
      >) {
        ordering.held_by_reason[reason] += n;
        ordering.held_keys += n;
      }
      const since = st.ordering.oldestHeldSince;
      if (since !== null && (ordering.oldest_held_since_ms === null || since < ordering.oldest_held_since_ms))
        ordering.oldest_held_since_ms = since;
    }
    return {
      name: s.name,
      region: s.region,
      state: s.state,
      backlog_count: st.backlogCount,
      backlog_bytes: st.backlogBytes,
      oldest_message_timestamp_ms: st.oldestEnqueuedAt,
      heartbeat: heartbeatOf(beatOf.get(s.name)),
    };
  });
  return {
    ...jurisdictionField(map.queueId),
    backlog_count: count,
    backlog_bytes: bytes,
    oldest_message_timestamp_ms: oldest,
    ordering,
    consumer_concurrency: consumers?.running ?? null,
    shards: perShard,
  };
}

function heartbeatOf(b: ShardHeartbeat | undefined) {
  if (!b) return null;
  const perSecond = (n: number) => (b.period_ms > 0 ? Math.round((n * 1000) / b.period_ms) : 0);
  return {
    received_at_ms: b.received_at,
    healthy: b.healthy,
    sleeping: b.sleeping,
    messages_in_per_second: perSecond(b.messages_in),
    messages_out_per_second: perSecond(b.messages_out),
    leased: b.leased_now,
    refusals: b.refusals,
    totals: b.totals,
  };
}
