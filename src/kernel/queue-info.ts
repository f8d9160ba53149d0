import type { QueueSettings } from "./settings";
import type { HoldReason } from "./figures";
import type { Jurisdiction } from "./jurisdiction";
import type { ConsumerRecord } from "./consumer-settings";

/** A queue as the REST API shows it (Cloudflare's field names). */
export interface QueueInfo {
  queue_id: string;
  queue_name: string;
  created_on: string;
  modified_on: string;
  producers_total_count: number;
  producers: Array<{ type: "worker"; script: string }>;
  consumers_total_count: number;
  /** Each whole, as Cloudflare lists them, with `script` (the Worker's name, as wrangler reads it) for a worker. */
  consumers: Array<ConsumerRecord & { script?: string }>;
  settings: QueueSettings;
  /** Chosen at creation, for good (./jurisdiction.ts); absent for a queue in none, as Cloudflare shows it. */
  jurisdiction?: Jurisdiction;
}

/** Figures of one queue, summed over its shards (`GET .../metrics`, producer `metrics()`). */
export interface QueueMetrics {
  /** The queue's jurisdiction, when it has one (as QueueInfo's). */
  jurisdiction?: Jurisdiction;
  backlog_count: number;
  backlog_bytes: number;
  oldest_message_timestamp_ms: number | null;
  /** Ordered lanes (docs/ordered-lanes.md): keys with messages, keys held back by reason, since when the longest. */
  ordering: {
    lanes: number;
    held_keys: number;
    held_by_reason: Record<HoldReason, number>;
    oldest_held_since_ms: number | null;
  };
  /** Consumer shards delivering now (null when not asked for). */
  consumer_concurrency: number | null;
  shards: Array<{
    name: string;
    region: string;
    state: string;
    backlog_count: number;
    backlog_bytes: number;
    oldest_message_timestamp_ms: number | null;
    /** From the shard's latest heartbeat to the Coordinator; null before its first. */
    heartbeat: {
      received_at_ms: number;
      healthy: boolean;
      /** Its last report showed no activity and nothing changed since: it reports again when something does. */
      sleeping: boolean;
      messages_in_per_second: number;
      messages_out_per_second: number;
      leased: number;
      refusals: number;
      totals: import("./figures").DeliveryTotals;
    } | null;
  }>;
}
