/**
 * The figures the parts report to one another: a storage shard's backlog, stats and running
 * totals, the queue's counters summed from those totals, and sends counted by latency. Split
 * from protocol.ts, which holds a message's own calls.
 */

/**
 * One storage shard's backlog: exact as the shard answers a call, or as its latest
 * heartbeat reported it. What the queue-wide figures of send, pull and MessageBatch
 * answers are summed from (src/routing/queue-figures.ts).
 */
export interface ShardBacklog {
  shard: string;
  count: number;
  bytes: number;
  /** When its oldest message arrived, or null when it is empty or this is not known. */
  oldestAt: number | null;
  /**
   * When these figures were last known true (a shard's own figures: when it answered; a
   * heartbeat's: when it came, or when it was asked for a sleeping shard, whose figures stay
   * true). Absent from answers older than it. Whoever gathers figures keeps the freshest.
   */
  at?: number;
}

/**
 * A Durable Object's billable work since it last started: requests (RPC calls served and
 * alarms run) and SQLite rows written and read (index entries included), as Cloudflare
 * counts them. Heartbeats stored before rowsRead and alarms existed lack them.
 */
export interface CostFigures {
  rpcs: number;
  rowsWritten: number;
  rowsRead?: number;
  alarms?: number;
}

/** Exact per-shard figures, kept in the same transaction as the rows they count. */
export interface ShardStats {
  backlogCount: number;
  backlogBytes: number;
  /** enqueued-at of the oldest message still stored, or null when empty. */
  oldestEnqueuedAt: number | null;
  /** Running totals since the shard was created. */
  totals: DeliveryTotals;
  /** Since this object last started: what Cloudflare bills a Durable Object for (sql-meter.ts). */
  cost: CostFigures;
  /** Ordered lanes here (docs/ordered-lanes.md): how many, how many held back by reason, and since when the longest. */
  ordering?: LaneFigures;
}

export interface LaneFigures {
  lanes: number;
  held: Record<HoldReason, number>;
  oldestHeldSince: number | null;
}

/** Why an ordering key is held back: a batch in flight, a retry or a delay not due, a hand-off from another shard. */
export type HoldReason = "leased" | "retry" | "delayed" | "handoff";

export interface DeliveryTotals {
  /**
   * Messages stored (sends, and moves in: dead-letter moves, redrives; deduplicated
   * retries not counted). Optional only because heartbeats a Coordinator stored before
   * this counter existed lack it; stats() always sets it.
   */
  stored?: number;
  leased: number;
  acked: number;
  retried: number;
  deadLettered: number;
  dropped: number;
  expired: number;
  quarantined: number;
  /**
   * Deleted by a purge, and cancelled one by one. Optional only because heartbeats a
   * Coordinator stored before these counters existed lack them; stats() always sets them.
   */
  purged: number;
  cancelled: number;
}

export type CounterName = keyof DeliveryTotals;
export const COUNTER_NAMES: readonly CounterName[] = [
  "stored",
  "leased",
  "acked",
  "retried",
  "deadLettered",
  "dropped",
  "expired",
  "quarantined",
  "purged",
  "cancelled",
];
export type QueueCounters = Record<CounterName, number>;

/** Sends counted by latency. Crosses DO RPC from the broker to the Coordinator. */
export interface SendLatencyCounts {
  /** Sends per bucket, NOT cumulative, by the bucket's upper bound in seconds as an `le` label: "0.005", "1", "+Inf". */
  buckets: Record<string, number>;
  sumSeconds: number;
  count: number;
}
