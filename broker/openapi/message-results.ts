/**
 * What the routes on a queue's messages answer: sends, peeks, a lookup or cancel by id
 * (./envelope-schemas.ts says why these are schemas).
 */
import { z } from "zod";
import { contentType, count, described, epochMs, messageId, named } from "./schema-kit";

/** The queue's figures after the call, as Cloudflare's REST answers carry them (src/routing/queue-figures.ts). */
export const sendMetadata = named(
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
