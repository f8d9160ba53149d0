import { z } from "zod";
import { crc32 } from "../kernel/checksum";
import { HttpError } from "../kernel/errors";
import { MESSAGE_ID_PATTERN } from "../kernel/ids";
import { LIMITS } from "../kernel/limits";
import type { ContentType } from "../kernel/protocol";
import {
  batchOptionsSchema,
  batchRequestSchema,
  checkSend,
  delaySecondsSchema,
  encodeMessage,
  fitsOneBatch,
  orderingKeySchema,
} from "../kernel/send-rules";
import { fieldName, parseWith } from "../kernel/validate";

/** A message validated and encoded by the broker, not yet given an id or a shard. */
export interface PendingMessage {
  body: Uint8Array;
  contentType: ContentType;
  delaySeconds: number | undefined;
  checksum: number;
  /** The id the producer chose (`id`, over HTTP or the binding); stored once under it (./idempotent-send.ts). */
  id?: string;
  /** Set on a move from another queue: which stored copy it moves (src/routing/move-messages.ts). */
  moveKey?: string;
  /** Set on a move: when the message was first sent, the timestamp consumers keep seeing. */
  sentAt?: number;
  /** Its ordering key: delivered after every message of the key accepted before it (docs/ordered-lanes.md). */
  orderingKey?: string;
}

/**
 * A message id the producer chooses, over HTTP and through the binding: the form of the ids
 * shardq draws, so that a queue's ids, chosen or drawn, are one set (src/routing/idempotent-send.ts).
 */
export const chosenIdSchema = z
  .string({ error: "must be a string" })
  .regex(MESSAGE_ID_PATTERN, "must be 32 lowercase hex characters");

/**
 * HTTP: Cloudflare's REST shapes. Only json and text travel over HTTP, as on Cloudflare.
 * Beyond Cloudflare, `id`: a message id of the producer's choosing, stored once; and
 * `ordering_key` (docs/ordered-lanes.md).
 */
export const httpMessage = z
  .object({
    body: z.unknown(),
    content_type: z.enum(["json", "text"], { error: 'must be "json" or "text"' }).optional(),
    delay_seconds: delaySecondsSchema.optional(),
    id: chosenIdSchema.optional(),
    ordering_key: orderingKeySchema.optional(),
  })
  .strict();

/** `messages` is checked here only for being an array: each item is an httpMessage, checked one by one so that errors name its index. */
export const httpBatch = z
  .object({
    messages: z.array(z.unknown(), { error: "must be an array of messages" }),
    delay_seconds: delaySecondsSchema.optional(),
  })
  .strict();

/**
 * One message of the binding's sendBatch(): Cloudflare's MessageSendRequest with shardq's
 * `orderingKey`, as batchingQueue checks it (src/kernel/send-rules.ts), and shardq's `id`.
 */
const bindingBatchRequestSchema = batchRequestSchema.extend({ id: chosenIdSchema.optional() }).strict();

export function fromHttpMessage(input: unknown): PendingMessage {
  const m = parseWith(httpMessage, input);
  const [one] = encodeAll(
    [
      {
        body: m.body,
        contentType: m.content_type ?? "json",
        delaySeconds: m.delay_seconds,
        id: m.id,
        orderingKey: m.ordering_key,
      },
    ],
    [],
  );
  return one!;
}

export function fromHttpBatch(input: unknown): { messages: PendingMessage[]; delaySeconds: number | undefined } {
  const b = parseWith(httpBatch, input);
  checkCount(b.messages.length);
  const distinct = distinctIds();
  const parsed = b.messages.map((raw, i) => {
    const m = parseWith(httpMessage, raw, ["messages", i]);
    distinct(m.id, i);
    return {
      body: m.body,
      contentType: m.content_type ?? ("json" as const),
      delaySeconds: m.delay_seconds,
      id: m.id,
      orderingKey: m.ordering_key,
    };
  });
  return { messages: encodeAll(parsed, ["messages"]), delaySeconds: b.delay_seconds };
}

/**
 * The binding's send(): Cloudflare's options and shardq's `orderingKey`, checked as batchingQueue
 * checks them (src/kernel/send-rules.ts), and shardq's `id`, checked here. A bad id is named `id`,
 * as the HTTP API names it, so that its refusals read the same over both.
 */
export function fromSend(body: unknown, options: unknown): PendingMessage {
  const { id, rest } = splitId(options);
  const chosen = id === undefined ? undefined : parseWith(chosenIdSchema, id, ["id"]);
  const { bytes, contentType, delaySeconds, orderingKey } = checkSend(body, rest);
  return {
    body: bytes,
    contentType,
    delaySeconds,
    checksum: crc32(bytes),
    ...(chosen !== undefined ? { id: chosen } : {}),
    ...(orderingKey !== undefined ? { orderingKey } : {}),
  };
}

/** send()'s options without `id`, and the id: options without one pass on as they came. */
function splitId(options: unknown): { id: unknown; rest: unknown } {
  if (typeof options !== "object" || options === null || !("id" in options)) return { id: undefined, rest: options };
  const { id, ...rest } = options as Record<string, unknown>;
  return { id, rest };
}

export function fromSendBatch(
  messages: unknown,
  options: unknown,
): { messages: PendingMessage[]; delaySeconds: number | undefined } {
  if (!Array.isArray(messages))
    throw HttpError.invalid("messages", "must be an array of { body, contentType?, delaySeconds? }");
  checkCount(messages.length);
  const o = parseWith(batchOptionsSchema, options ?? {}, ["options"]);
  const distinct = distinctIds();
  const parsed = messages.map((raw, i) => {
    const m = parseWith(bindingBatchRequestSchema, raw, ["messages", i]);
    distinct(m.id, i);
    return {
      body: m.body,
      contentType: m.contentType ?? ("json" as const),
      delaySeconds: m.delaySeconds,
      id: m.id,
      orderingKey: m.orderingKey,
    };
  });
  return { messages: encodeAll(parsed, ["messages"]), delaySeconds: o.delaySeconds };
}

/** Refuses a batch's message whose id an earlier one gave: one id, one message, a repeat is no retry. */
function distinctIds(): (id: string | undefined, index: number) => void {
  const seen = new Map<string, number>();
  return (id, i) => {
    if (id === undefined) return;
    const first = seen.get(id);
    if (first !== undefined) throw HttpError.invalid(`messages[${i}].id`, `repeats the id of messages[${first}]`);
    seen.set(id, i);
  };
}

function checkCount(n: number): void {
  if (n === 0) throw HttpError.invalid("messages", "must hold at least one message");
  if (n > LIMITS.maxBatchMessages) {
    throw HttpError.tooLarge("messages", `holds ${n} messages; a batch holds at most ${LIMITS.maxBatchMessages}`);
  }
}

/** Encodes and checksums each body; enforces the per-message and per-batch byte limits. */
function encodeAll(
  messages: Array<{
    body: unknown;
    contentType: ContentType;
    delaySeconds: number | undefined;
    id?: string | undefined;
    orderingKey?: string | undefined;
  }>,
  path: Array<string | number>,
): PendingMessage[] {
  let total = 0;
  const out = messages.map((m, i) => {
    const at = path.length ? [...path, i, "body"] : ["body"];
    const bytes = encodeMessage(m.body, m.contentType, fieldName(at));
    total += bytes.byteLength;
    return {
      body: bytes,
      contentType: m.contentType,
      delaySeconds: m.delaySeconds,
      checksum: crc32(bytes),
      ...(m.id !== undefined ? { id: m.id } : {}),
      ...(m.orderingKey !== undefined ? { orderingKey: m.orderingKey } : {}),
    };
  });
  if (!fitsOneBatch(out.length, total)) {
    throw HttpError.tooLarge(
      path.length ? fieldName(path) : "body",
      `batch is ${total} bytes; a batch holds at most ${LIMITS.maxBatchBytes} bytes`,
    );
  }
  return out;
}
