/**
 * What each route answers in its envelope's `result`, as zod schemas: the OpenAPI
 * description's responses are generated from them (./document.ts), and
 * test/workers/openapi-results.test.ts parses real answers with them. Objects are strict,
 * so a field renamed, added or dropped in a handler fails that test until this file says so.
 * The request side needs no such file: the description uses the schemas the handlers parse with.
 */
import { z } from "zod";
import type { ConsumerRecord } from "../../src/kernel/consumer-settings";
import { QUEUE_ID_PATTERN } from "../../src/kernel/ids";
import type { QueueInfo, QueueMetrics } from "../../src/kernel/queue-info";
import { jurisdictionSchema } from "../../src/kernel/settings";
import {
  contentType,
  count,
  described,
  epochMs,
  holdCounts,
  isoTime,
  messageId,
  named,
  shardState,
} from "./schema-kit";

export { resultRegistry } from "./schema-kit";

// --- The envelope every JSON answer comes in (broker/http/envelope.ts, src/kernel/errors.ts).

export const errorDetail = named(
  "ErrorDetail",
  z.strictObject({
    code: z.number().int(),
    message: z.string(),
    field: described(
      z.string().optional(),
      'The request field at fault, as a path ("messages[3].body"), or the header, path segment or query parameter ("authorization", "queue", "limit").',
    ),
  }),
);

export const errorEnvelope = named(
  "ErrorEnvelope",
  z.strictObject({
    success: z.literal(false),
    errors: z.array(errorDetail).min(1),
    messages: z.array(z.unknown()),
    result: z.null(),
  }),
  "Every refusal and failure: errors[0] says what and, where one is at fault, which field.",
);

export const resultInfo = named(
  "ResultInfo",
  z.strictObject({ page: count(), per_page: count(), count: count(), total_count: count(), total_pages: count() }),
);

/** A success: `result` is what the route answers; `result_info` only on lists that page. */
export function successEnvelope(result: z.ZodType, info?: z.ZodType) {
  return z.strictObject({
    success: z.literal(true),
    errors: z.array(errorDetail).max(0),
    messages: z.array(z.unknown()),
    result,
    ...(info ? { result_info: info } : {}),
  });
}

// --- Queues and consumers.

export const queueSettings = named(
  "QueueSettings",
  z.strictObject({ delivery_delay: count(), delivery_paused: z.boolean(), message_retention_period: count() }),
);

export const consumerSettings = named(
  "ConsumerSettings",
  z.strictObject({
    batch_size: count(),
    max_wait_time_ms: count(),
    max_retries: count(),
    retry_delay: count(),
    max_concurrency: described(count().nullable(), "null: consumer shards scale with the backlog, up to 250."),
    visibility_timeout_ms: count(),
    transport: z.enum(["queue", "rpc"]),
  }),
);

export const consumer = named(
  "Consumer",
  z.strictObject({
    consumer_id: z.string(),
    type: z.enum(["worker", "http_pull"]),
    script_name: z.string().nullable(),
    queue_name: z.string(),
    settings: consumerSettings,
    dead_letter_queue: z.string().nullable(),
    created_on: isoTime(),
    modified_on: isoTime(),
  }),
);

export const queueInfo = named(
  "Queue",
  z.strictObject({
    queue_id: z.string().regex(QUEUE_ID_PATTERN),
    queue_name: z.string(),
    created_on: isoTime(),
    modified_on: isoTime(),
    producers_total_count: count(),
    producers: z.array(z.strictObject({ type: z.literal("worker"), script: z.string() })),
    consumers_total_count: count(),
    consumers: z.array(
      consumer.extend({
        script: described(
          z.string().optional(),
          "A worker consumer's Worker (its script_name), under the name wrangler reads.",
        ),
      }),
    ),
    settings: queueSettings,
    jurisdiction: described(
      jurisdictionSchema.optional(),
      "Where the queue stores and processes its messages, chosen at creation; absent for a queue in no jurisdiction.",
    ),
  }),
);

export const queueList = z.array(queueInfo);

export const consumerList = z.array(consumer);

// --- Sending, pulling, settling.

/** The queue's figures after the call, as Cloudflare's REST answers carry them (src/routing/queue-figures.ts). */
const sendMetadata = named(
  "QueueFiguresMetadata",
  z.strictObject({
    metrics: z.strictObject({
      backlogCount: count(),
      backlogBytes: count(),
      oldestMessageTimestampMs: described(epochMs(), "0 when the queue is empty or this is not known."),
      backlog_count: described(count(), "backlogCount, as Cloudflare's API and SDK name it now."),
      backlog_bytes: described(count(), "backlogBytes, as Cloudflare's API and SDK name it now."),
      oldest_message_timestamp_ms: described(
        epochMs(),
        "oldestMessageTimestampMs, as Cloudflare's API and SDK name it now: 0 when the queue is empty or this is not known.",
      ),
    }),
  }),
  "Best-effort figures: exact for the storage shards the call used, as of their latest heartbeat for the others. Each under shardq's first spelling and under Cloudflare's.",
);

export const sendResult = named("SendResult", z.strictObject({ message_id: messageId(), metadata: sendMetadata }));

export const batchResult = named(
  "SendBatchResult",
  z.strictObject({ message_ids: z.array(messageId()), metadata: sendMetadata }),
);

export const pullResult = named(
  "PullResult",
  z.strictObject({
    message_backlog_count: count(),
    messages: z.array(
      z.strictObject({
        id: messageId(),
        body: described(
          z.string(),
          "A text message's body as it was sent; any other, base64 of its stored bytes (CF-Content-Type says which).",
        ),
        timestamp_ms: epochMs(),
        attempts: z.number().int().min(1),
        lease_id: described(z.string(), "What ack and extend name this delivery by; valid until the lease ends."),
        metadata: z.strictObject({ "CF-Content-Type": contentType() }),
        ordering_key: z.string().optional(),
      }),
    ),
    metadata: sendMetadata,
  }),
);

/** A lease id that could not be honoured, and why: a warning, never a failed request. */
const warnings = () => described(z.record(z.string(), z.string()), "Lease ids not applied, each with the reason.");

export const ackResult = named(
  "AckResult",
  z.strictObject({ ackCount: count(), retryCount: count(), warnings: warnings() }),
);

export const extendResult = named("ExtendResult", z.strictObject({ extended: count(), warnings: warnings() }));
export const cancelPullResult = named(
  "CancelPullResult",
  z.strictObject({
    cancelled: z.boolean(),
    reason: described(
      z.enum(["answered", "not_waiting"]),
      "Only when not cancelled: `answered`, the pull had already answered with messages (nobody else is woken); `not_waiting`, no pull waited under this id or was just woken (it answered empty, never waited, or was cancelled already).",
    ).optional(),
  }),
);

// --- Operations on messages and queues.

export const peekResult = named(
  "PeekResult",
  z.strictObject({
    messages: z.array(
      z.strictObject({
        id: messageId(),
        body: z.string(),
        content_type: contentType(),
        attempts: count(),
        timestamp_ms: epochMs(),
        size: count(),
        ordering_key: described(z.string(), "The message's ordering key, when it was sent with one.").optional(),
      }),
    ),
    incomplete: described(z.boolean(), "True when a storage shard did not answer: its messages are missing."),
  }),
);

export const messageStatus = named(
  "MessageStatus",
  z.strictObject({
    id: messageId(),
    state: z.enum(["ready", "delayed", "leased", "dead_lettered"]),
    attempts: count(),
    timestamp_ms: epochMs(),
    visible_at_ms: epochMs(),
    size: count(),
    content_type: contentType(),
    shard: z.string(),
    dead_letter_queue: described(
      z.string().optional(),
      "With state dead_lettered: the queue it was moved to, where it is now.",
    ),
  }),
);

export const cancelResult = named("CancelResult", z.strictObject({ id: messageId(), cancelled: z.literal(true) }));

export const purgeResult = named(
  "PurgeResult",
  queueInfo.extend({
    purged: count(),
    completed: described(z.boolean(), "False when the purge stopped at its bound with messages left: call it again."),
    ids: described(z.array(messageId()), "With `return_ids`: the ids of the messages deleted.").optional(),
  }),
  "The queue, as Cloudflare's purge answers it, with shardq's counts beside its fields.",
);

export const purgeStatusResult = named(
  "PurgeStatusResult",
  z.strictObject({
    completed: described(
      z.enum(["true", "false"]),
      'Whether the last purge emptied the queue: "false" while it runs, when it stopped at its bound with messages left, or when it failed. A string, as Cloudflare types it.',
    ).optional(),
    started_at: described(isoTime(), "When the last purge started.").optional(),
  }),
  "The queue's last purge; empty when it was never purged.",
);

export const peekPostResult = named(
  "CloudflarePeekResult",
  z.strictObject({
    messages: z.array(
      z.strictObject({
        id: messageId(),
        body: described(
          z.string(),
          "A text message's body as it was sent; any other, base64 of its stored bytes (CF-Content-Type says which).",
        ),
        attempts: count(),
        timestamp_ms: epochMs(),
        metadata: z.strictObject({ "CF-Content-Type": contentType() }),
        ref: described(z.string(), "What POST .../messages/purge deletes this message by."),
        ordering_key: described(z.string(), "The message's ordering key, when it was sent with one.").optional(),
      }),
    ),
    incomplete: described(z.boolean(), "True when a storage shard did not answer: its messages are missing."),
  }),
);

export const purgePeekedResult = named(
  "PurgePeekedResult",
  z.strictObject({
    purged: count(),
    warnings: described(z.record(z.string(), z.string()), "Refs not purged, each with the reason."),
  }),
);

export const redriveResult = named(
  "RedriveResult",
  z.strictObject({
    moved: count(),
    target_queue: z.string(),
    remaining_matching: described(
      count().nullable(),
      "Messages still matching in the dead-letter queue; null when a shard could not be counted.",
    ),
  }),
);

const heldKey = z.discriminatedUnion("reason", [
  z.strictObject({
    ordering_key: z.string(),
    reason: z.enum(["leased", "retry", "delayed"]),
    message_id: z.string().nullable(),
    since_ms: epochMs(),
    messages: count(),
    shard: z.string(),
  }),
  z.strictObject({
    ordering_key: z.string(),
    reason: z.literal("handoff"),
    waiting_on_shard: z.string().nullable(),
    since_ms: epochMs(),
    messages: count(),
    shard: z.string(),
  }),
]);

export const heldKeysResult = named(
  "HeldKeysResult",
  z.strictObject({
    keys: z.array(heldKey),
    lanes: count(),
    held_keys: count(),
    held_by_reason: holdCounts(),
    oldest_held_since_ms: epochMs().nullable(),
  }),
);

export const releaseResult = named(
  "ReleaseResult",
  z.strictObject({ ordering_key: z.string(), message_id: messageId(), moved_to: z.string() }),
);

// --- Figures and the control plane.

/**
 * A shard's running totals. `stored`, `purged` and `cancelled` are missing from heartbeats
 * stored before those counters existed (src/kernel/protocol.ts, DeliveryTotals).
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

/** DELETE of a queue or a consumer. */
export const nullResult = z.null();

export const healthResult = named("HealthResult", z.strictObject({ ok: z.literal(true) }));

// The compiler holds these schemas to the types the handlers build their answers from, where
// such types exist: a field added to QueueInfo without a word here fails `npm run typecheck`.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
export type ResultSchemasMatchTypes = [
  Expect<Same<z.infer<typeof queueInfo>, QueueInfo>>,
  Expect<Same<z.infer<typeof consumer>, ConsumerRecord>>,
  Expect<Same<Omit<z.infer<typeof queueMetrics>, "shards">, Omit<QueueMetrics, "shards">>>,
];
type Expect<T extends true> = T;
