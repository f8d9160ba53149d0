import { restMetrics, type QueueFigures } from "../../src/routing/queue-figures";

/**
 * The queue's figures as a send's or a pull's `metadata.metrics` carries them, under both
 * spellings: `backlogCount`, `backlogBytes`, `oldestMessageTimestampMs`, as Cloudflare's API
 * schema named them when shardq took them up (shardq's clients read them), and
 * `backlog_count`, `backlog_bytes`, `oldest_message_timestamp_ms`, as Cloudflare's API and its
 * SDK (cloudflare 7.x) name them now. The oldest is 0 when unknown, in both.
 */
export function metadataMetrics(f: QueueFigures) {
  const m = restMetrics(f);
  return {
    ...m,
    backlog_count: m.backlogCount,
    backlog_bytes: m.backlogBytes,
    oldest_message_timestamp_ms: m.oldestMessageTimestampMs,
  };
}
