/** What pull consumers' routes answer (./envelope-schemas.ts says why these are schemas). */
import { z } from "zod";
import { sendMetadata } from "./message-results";
import { contentType, count, described, epochMs, messageId, named } from "./schema-kit";

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
