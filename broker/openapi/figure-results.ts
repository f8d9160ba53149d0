/** What the routes that read figures and the control plane answer (./envelope-schemas.ts says why these are schemas). */
import { z } from "zod";
import { jurisdictionSchema } from "../../src/kernel/settings";
import { count, epochMs, holdCounts, named, shardState } from "./schema-kit";

/**
 * A shard's running totals. `stored`, `purged` and `cancelled` are missing from heartbeats
 * stored before those counters existed (src/kernel/figures.ts, DeliveryTotals).
 */
const deliveryTotals = named(
  "DeliveryTotals",
  z.strictObject({
    stored: count().optional(),
    leased: count(),
    acked: count(),
    retried: count(),
    deadLettered: count(),
    dropped: count(),
    expired: count(),
    quarantined: count(),
    purged: count().optional(),
    cancelled: count().optional(),
  }),
);

export const queueMetrics = named(
  "QueueMetrics",
  z.strictObject({
    jurisdiction: jurisdictionSchema.optional(),
    backlog_count: count(),
    backlog_bytes: count(),
    oldest_message_timestamp_ms: epochMs().nullable(),
    ordering: z.strictObject({
      lanes: count(),
      held_keys: count(),
      held_by_reason: holdCounts(),
      oldest_held_since_ms: epochMs().nullable(),
    }),
    consumer_concurrency: count().nullable(),
    shards: z.array(
      z.strictObject({
        name: z.string(),
        region: z.string(),
        state: z.string(),
        backlog_count: count(),
        backlog_bytes: count(),
        oldest_message_timestamp_ms: epochMs().nullable(),
        heartbeat: z
          .strictObject({
            received_at_ms: epochMs(),
            healthy: z.boolean(),
            sleeping: z.boolean(),
            messages_in_per_second: count(),
            messages_out_per_second: count(),
            leased: count(),
            refusals: count(),
            totals: deliveryTotals,
          })
          .nullable(),
      }),
    ),
  }),
  "Exact figures, read from every storage shard that may hold messages.",
);

const shardEntry = named("ShardEntry", z.strictObject({ name: z.string(), region: z.string(), state: shardState() }));

/** What a Durable Object was billed for (src/kernel/sql-meter.ts); older reports lack the optional parts. */
const costFigures = z.strictObject({
  rpcs: count(),
  rowsWritten: count(),
  rowsRead: count().optional(),
  alarms: count().optional(),
});

const shardHeartbeat = z.strictObject({
  name: z.string(),
  state: z.string(),
  backlog_count: count(),
  backlog_bytes: count(),
  oldest_at: epochMs().nullable(),
  messages_in: count(),
  messages_out: count(),
  refusals: count(),
  leased_now: count(),
  handoffs: count().nullable().optional(),
  in_from: z.record(z.string(), count()).nullable().optional(),
  period_ms: count(),
  received_at: epochMs(),
  // When the shard said it reports next: minutes on while its traffic is far below what the autoscaler acts on.
  next_report_at: epochMs().nullable().optional(),
  totals: deliveryTotals,
  cost: costFigures,
  sleeping: z.boolean(),
  healthy: z.boolean(),
});

export const shardsResult = named(
  "ShardsResult",
  z.strictObject({
    version: count().nullable(),
    published: z.strictObject({ version: count(), published_at_ms: epochMs(), shards: z.array(shardEntry) }).nullable(),
    shards: z.array(shardEntry.extend({ heartbeat: shardHeartbeat.nullable() })),
    consumer_shards: z.strictObject({
      running: count(),
      shards: z.array(
        z.strictObject({
          index: count(),
          running: z.boolean(),
          delivered: count(),
          batches: count(),
          errors: count(),
          received_at: epochMs(),
          // Until when its report said it counts as delivering (it reports every ~30 s while it does); null once stopped.
          running_until: epochMs().nullable().optional(),
          cost: z
            .strictObject({ rpcs: count(), rowsWritten: count(), rowsRead: count(), alarms: count() })
            .nullable()
            .optional(),
        }),
      ),
    }),
    decisions: z.array(
      z.strictObject({
        at: epochMs(),
        kind: z.string(),
        region: z.string().nullable(),
        target: z.string().nullable(),
        reason: z.string(),
        figures: z.record(z.string(), z.number()),
      }),
    ),
  }),
  "The control plane laid open: the Coordinator's map, the copy in KV, heartbeats, consumer shards and the autoscaler's recent decisions.",
);

export const seriesResult = named(
  "SeriesResult",
  z.strictObject({
    step_ms: count(),
    points: z.array(
      z.strictObject({
        at_ms: epochMs(),
        backlog_count: count(),
        backlog_bytes: count(),
        messages_in_per_second: z.number().min(0),
        messages_out_per_second: z.number().min(0),
        active_shards: count(),
        consumer_shards_running: count(),
      }),
    ),
  }),
);
