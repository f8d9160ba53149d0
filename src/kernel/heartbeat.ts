/**
 * A storage shard's heartbeat: what it reports to its Coordinator, the Coordinator's answer,
 * and the report as the Coordinator keeps it (coordinator/heartbeats.ts). One of the modules
 * beside protocol.ts that each hold one conversation of what crosses RPC between the parts.
 */
import type { CostFigures, DeliveryTotals, ShardBacklog, ShardStats } from "./figures";
import type { ShardState } from "./shard-map";

/**
 * How often a storage shard awake with traffic far below what the autoscaler acts on
 * reports (storage-shard/shard-alarm.ts): a shard busier than SLOW_BELOW_SHARE of
 * TARGET_MESSAGES_PER_SHARD reports every HEARTBEAT_INTERVAL_MS.
 */
export const SLOW_REPORT_MS = 5 * 60_000;
export const SLOW_BELOW_SHARE = 0.05;
/** Backlog growth since its last report that brings a slow shard's next report forward (consumer scaling reads the backlog). */
export const REPORT_BACKLOG_GROWTH = 100;

/**
 * What a storage shard reports to its Coordinator every HEARTBEAT_INTERVAL_MS while it is
 * awake (storage-shard/shard-alarm.ts): after anything changed here, until a report finds
 * nothing changed since the last one. A shard's last report before it sleeps shows no
 * activity, so its figures stay true for as long as it sleeps.
 */
export interface StorageHeartbeat extends ShardStats {
  shard: string;
  state: ShardState;
  /** Messages stored since the previous heartbeat. */
  messagesIn: number;
  /** Messages leased to consumers since the previous heartbeat. */
  messagesOut: number;
  /** Sends refused since the previous heartbeat (overloaded, draining, corrupt). */
  refusals: number;
  /** Messages currently leased and not yet settled. */
  leasedNow: number;
  /** Milliseconds those messages were counted over. */
  periodMs: number;
  sentAt: number;
  /**
   * Hand-offs of ordering keys this shard still owes other shards (docs/ordered-lanes.md):
   * a shard that owes one is not empty, and is not retired.
   */
  handoffs?: number;
  /** The epoch this shard was last told. */
  epoch?: number;
  /** Whether a message here is ready for a consumer now (absent from shards older than sleeping). */
  readyNow?: boolean;
  /** Messages stored since the previous heartbeat from senders in other regions, by region; absent when none. */
  inFrom?: Record<string, number>;
  /**
   * When this shard reports next if it stays awake. A shard whose traffic is far below what
   * the autoscaler acts on reports less often (storage-shard/shard-alarm.ts); the Coordinator
   * counts it late only past this. Absent: one heartbeat interval on.
   */
  nextReportAt?: number;
  /**
   * The shard sleeps after this report (storage-shard/quiet-timer.ts): no request came for a
   * while, so its traffic stopped, and its figures stay true until it reports again. The
   * activity it carries is its last period's; the Coordinator counts no traffic from it now.
   */
  last?: boolean;
}

/** The Coordinator's answer to a heartbeat. */
export interface HeartbeatReply {
  /** False: the shard is not (or no longer) one of the queue's; it stops reporting. */
  known: boolean;
  /** The queue's retention, so a shard no consumer visits still honours it. */
  retentionMs: number | null;
  /**
   * Report again in an interval even if nothing changes: the shard holds ready messages
   * that a push consumer should be taking and nobody took (the report wakes consumers), or
   * the autoscaler waits for every shard's report from after its last change.
   */
  stayAwake?: boolean;
  /**
   * The figures of the queue's other shards not retired, as their latest reports gave them:
   * the shard hands them on with its append and lease answers, so brokers and consumer
   * shards need not ask the Coordinator for them (src/routing/queue-figures.ts).
   */
  backlogs?: ShardBacklog[];
}

export interface ShardHeartbeat {
  name: string;
  state: string;
  backlog_count: number;
  backlog_bytes: number;
  oldest_at: number | null;
  messages_in: number;
  messages_out: number;
  refusals: number;
  leased_now: number;
  /** Hand-offs of ordering keys the shard still owes (StorageHeartbeat.handoffs). */
  handoffs?: number;
  /** StorageHeartbeat.inFrom; null when the report had none. */
  in_from?: Record<string, number> | null;
  period_ms: number;
  received_at: number;
  /** When the shard said it reports next (StorageHeartbeat.nextReportAt); null: an interval after received_at. */
  next_report_at?: number | null;
  totals: DeliveryTotals;
  /** What the shard object was billed for since it last started (sql-meter.ts). */
  cost: CostFigures;
  /**
   * Asleep: its last report said so (StorageHeartbeat.last) or showed no activity, and it has
   * not reported since because nothing changed (storage-shard/shard-alarm.ts). Its figures
   * are still exact; its activity is of a period that is over.
   */
  sleeping: boolean;
  /** False once a shard that was busy at its last report has missed three heartbeats; a sleeping shard is healthy. */
  healthy: boolean;
}
