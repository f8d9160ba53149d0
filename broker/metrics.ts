import type { Env } from "../src/env";
import type { ShardMap } from "../src/protocol";
import type { QueueMetrics } from "../src/queue-info";
import { storageShardFor } from "../src/stubs";

/** Exact figures: asks every shard that may still hold messages (active and draining). */
export async function queueMetrics(env: Env, map: ShardMap): Promise<QueueMetrics> {
  const shards = map.shards.filter((s) => s.state !== "retired");
  const stats = await Promise.all(shards.map((s) => storageShardFor(env, s.name, s.region).stats()));
  let oldest: number | null = null;
  let count = 0;
  let bytes = 0;
  const perShard = shards.map((s, i) => {
    const st = stats[i]!;
    count += st.backlogCount;
    bytes += st.backlogBytes;
    if (st.oldestEnqueuedAt !== null && (oldest === null || st.oldestEnqueuedAt < oldest)) oldest = st.oldestEnqueuedAt;
    return {
      name: s.name,
      region: s.region,
      state: s.state,
      backlog_count: st.backlogCount,
      backlog_bytes: st.backlogBytes,
      oldest_message_timestamp_ms: st.oldestEnqueuedAt,
    };
  });
  return { backlog_count: count, backlog_bytes: bytes, oldest_message_timestamp_ms: oldest, shards: perShard };
}
