/**
 * What a producer binding's send() and sendBatch() accept, in one place: the options'
 * shapes, the per-message and per-batch limits, and the error a refusal turns into. The
 * broker enforces them (src/routing/pending-messages.ts); the batching producer
 * (src/producer/) runs the same checks inside the user's Worker, so that a message the
 * binding would refuse fails alone, with the binding's own error, before it joins a batch.
 */
import { z } from "zod";
import { encodeBody } from "./encoding";
import { HttpError } from "./errors";
import { LIMITS } from "./limits";
import { CONTENT_TYPES, type ContentType } from "./protocol";
import { fieldName, parseWith } from "./validate";

export const delaySecondsSchema = z
  .number({ error: "must be a number of seconds" })
  .int("must be a whole number of seconds")
  .min(0, "must be at least 0")
  .max(LIMITS.maxDelaySeconds, `must be at most ${LIMITS.maxDelaySeconds} (24 hours)`);

/**
 * An ordering key (docs/ordered-lanes.md): messages of one key are delivered in the order
 * they were accepted. Printable ASCII, so a key reads the same in logs, URLs and JSON.
 */
export const orderingKeySchema = z
  .string({ error: "must be a string" })
  .regex(/^[\x20-\x7e]{1,128}$/, "must be 1 to 128 printable ASCII characters (U+0020 to U+007E)");

/**
 * The options of Cloudflare's Queue.send(), and shardq's `orderingKey`. The binding also takes
 * shardq's `id`, checked by the broker alone (src/routing/pending-messages.ts): batchingQueue,
 * whose send() checks these, does not carry an id through its batches, and so refuses one.
 */
export const sendOptionsSchema = z
  .object({
    contentType: z
      .enum(CONTENT_TYPES as [ContentType, ...ContentType[]], { error: `must be one of ${CONTENT_TYPES.join(", ")}` })
      .optional(),
    delaySeconds: delaySecondsSchema.optional(),
    orderingKey: orderingKeySchema.optional(),
  })
  .strict();

/** One message of Cloudflare's Queue.sendBatch() (MessageSendRequest). */
export const batchRequestSchema = z
  .object({
    body: z.unknown(),
    contentType: sendOptionsSchema.shape.contentType,
    delaySeconds: delaySecondsSchema.optional(),
    orderingKey: orderingKeySchema.optional(),
  })
  .strict();

/** The options of Cloudflare's Queue.sendBatch(). */
export const batchOptionsSchema = z.object({ delaySeconds: delaySecondsSchema.optional() }).strict();

/** A body encoded as a storage shard keeps it; refused past the per-message limit. `field` names it in errors. */
export function encodeMessage(body: unknown, contentType: ContentType, field: string): Uint8Array {
  const bytes = encodeBody(body, contentType, field);
  if (bytes.byteLength > LIMITS.maxMessageBytes) {
    throw HttpError.tooLarge(
      field,
      `is ${bytes.byteLength} bytes; a message holds at most ${LIMITS.maxMessageBytes} bytes`,
    );
  }
  return bytes;
}

/**
 * Whether `count` messages whose encoded bodies sum to `bytes` make one batch: a batch's size
 * is the sum of its encoded bodies, as Cloudflare counts it (100 messages, 256 KB).
 */
export function fitsOneBatch(count: number, bytes: number): boolean {
  return count <= LIMITS.maxBatchMessages && bytes <= LIMITS.maxBatchBytes;
}

/** A send() checked as the binding checks it: its options, then its body. */
export function checkSend(
  body: unknown,
  options: unknown,
): { bytes: Uint8Array; contentType: ContentType; delaySeconds: number | undefined; orderingKey: string | undefined } {
  const o = parseWith(sendOptionsSchema, options ?? {}, ["options"]);
  const contentType = o.contentType ?? "json";
  return {
    bytes: encodeMessage(body, contentType, fieldName(["body"])),
    contentType,
    delaySeconds: o.delaySeconds,
    orderingKey: o.orderingKey,
  };
}

/**
 * The error a producer binding call rejects with. RPC keeps an error's name and message, not
 * its status: the message is what the HTTP API says, the type says which kind (RangeError for
 * a limit, TypeError for a malformed call). Anything but an HttpError passes unchanged.
 */
export function bindingError(err: unknown): unknown {
  if (!(err instanceof HttpError)) return err;
  const Kind = err.status === 413 ? RangeError : err.status === 400 ? TypeError : Error;
  return new Kind(err.message);
}
