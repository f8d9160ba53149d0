/**
 * What operators' routes on a queue as a whole answer: purge, redrive, ordering keys held back
 * and their release (./envelope-schemas.ts says why these are schemas).
 */
import { z } from "zod";
import { queueInfo } from "./queue-results";
import { count, described, epochMs, holdCounts, isoTime, messageId, named } from "./schema-kit";

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
