/**
 * Sending over HTTP: one message (POST .../messages), or a batch of any length, cut into
 * requests the API takes (at most 100 messages and 256 KB of bodies each, counted as the
 * broker counts them, and at most the broker's request size on the wire). Each request
 * carries an Idempotency-Key, so a request sent again after a network error or a 503 is
 * stored once (src/routing/idempotent-send.ts); a batch's requests go one after another,
 * so messages of one ordering key keep their order.
 */
import { LIMITS } from "../kernel/limits.ts";
import { invalid, PartialSendError, ShardqError, tooLarge, ApiError, type ApiErrorDetail } from "./errors.ts";
import type { Transport } from "./transport.ts";

/** How a body travels over HTTP: JSON (the default) or text. */
export type HttpContentType = "json" | "text";

/** One message of sendBatch(), in the shape of the producer binding's MessageSendRequest. */
export interface MessageSendRequest<Body = unknown> {
  body: Body;
  contentType?: HttpContentType;
  delaySeconds?: number;
  /** Delivered after every message of this key accepted before it (docs/ordered-lanes.md). */
  orderingKey?: string;
  /** A message id of your choosing (32 lowercase hex): stored once under it, however often sent. */
  id?: string;
}

export interface SendOptions {
  contentType?: HttpContentType;
  delaySeconds?: number;
  orderingKey?: string;
  id?: string;
  /** Makes the send idempotent under your key; without one the client draws a key per request. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface SendBatchOptions {
  /** The delay of every message that does not give its own. */
  delaySeconds?: number;
  /** A batch cut into several requests sends the first under this key, the others under `<key>.<n>`. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface SendResult {
  messageId: string;
}

export interface SendBatchResult {
  /** The messages' ids, in the order they were given. */
  messageIds: string[];
  /** The requests the batch took. */
  requests: number;
}

/** Visible ASCII, as the broker takes an Idempotency-Key. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;
const ORDERING_KEY = /^[\x20-\x7e]{1,128}$/;
const MESSAGE_ID = /^[0-9a-f]{32}$/;
/** Room a request's envelope takes around its messages: `{"messages":[...],"delay_seconds":86400}`. */
const REQUEST_OVERHEAD = 64;
const utf8 = new TextEncoder();

/** A message as it goes on the wire, with the sizes the broker will count. */
interface Wire {
  json: Record<string, unknown>;
  /** The body's stored size: what the 256 KB batch limit counts. */
  bodyBytes: number;
  /** The message's size in the request. */
  wireBytes: number;
}

export async function send(
  transport: Transport,
  queue: string,
  body: unknown,
  opts: SendOptions = {},
  autoIdempotency = true,
): Promise<SendResult> {
  const wire = toWire({ body, ...pick(opts) }, "");
  checkIdempotencyKey(opts.idempotencyKey);
  const headers = idempotencyHeader(opts.idempotencyKey, autoIdempotency);
  const env = await transport.call<{ message_id: string }>("POST", `/queues/${encodeURIComponent(queue)}/messages`, {
    body: wire.json,
    headers,
    signal: opts.signal,
  });
  return { messageId: env.result.message_id };
}

export async function sendBatch(
  transport: Transport,
  queue: string,
  messages: MessageSendRequest[],
  opts: SendBatchOptions = {},
  autoIdempotency = true,
): Promise<SendBatchResult> {
  if (!Array.isArray(messages))
    throw invalid("messages", "must be an array of { body, contentType?, delaySeconds?, orderingKey?, id? }");
  if (messages.length === 0) throw invalid("messages", "must hold at least one message");
  if (opts.delaySeconds !== undefined) checkDelay(opts.delaySeconds, "delay_seconds");
  checkIdempotencyKey(opts.idempotencyKey);
  const wires = messages.map((m, i) => toWire(m, `messages[${i}].`));
  const chunks = split(wires);
  if (opts.idempotencyKey !== undefined && chunks.length > 1)
    checkIdempotencyKey(
      `${opts.idempotencyKey}.${chunks.length - 1}`,
      `a batch cut into ${chunks.length} requests uses keys up to "<key>.${chunks.length - 1}", so the key`,
    );
  const ids: string[] = [];
  for (const [n, chunk] of chunks.entries()) {
    const key =
      opts.idempotencyKey === undefined ? undefined : n === 0 ? opts.idempotencyKey : `${opts.idempotencyKey}.${n}`;
    const body: Record<string, unknown> = { messages: chunk.map((w) => w.json) };
    if (opts.delaySeconds !== undefined) body.delay_seconds = opts.delaySeconds;
    try {
      const env = await transport.call<{ message_ids: string[] }>(
        "POST",
        `/queues/${encodeURIComponent(queue)}/messages/batch`,
        { body, headers: idempotencyHeader(key, autoIdempotency), signal: opts.signal },
      );
      ids.push(...env.result.message_ids);
    } catch (err) {
      const shifted = err instanceof ApiError ? shiftFields(err, ids.length) : err;
      if (ids.length > 0 && shifted instanceof ShardqError) throw new PartialSendError(ids, shifted);
      throw shifted;
    }
  }
  return { messageIds: ids, requests: chunks.length };
}

/** The messages cut into requests the API takes, in their order. */
export function split<T extends { bodyBytes: number; wireBytes: number }>(wires: T[]): T[][] {
  const chunks: T[][] = [];
  let chunk: T[] = [];
  let bodyBytes = 0;
  let wireBytes = REQUEST_OVERHEAD;
  for (const w of wires) {
    const fits =
      chunk.length < LIMITS.maxBatchMessages &&
      bodyBytes + w.bodyBytes <= LIMITS.maxBatchBytes &&
      wireBytes + w.wireBytes + 1 <= LIMITS.maxRequestBytes;
    if (!fits && chunk.length > 0) {
      chunks.push(chunk);
      chunk = [];
      bodyBytes = 0;
      wireBytes = REQUEST_OVERHEAD;
    }
    chunk.push(w);
    bodyBytes += w.bodyBytes;
    wireBytes += w.wireBytes + 1;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** A message checked as the broker checks it, in the API's field names (`at` prefixes them). */
function toWire(m: MessageSendRequest, at: string): Wire {
  if (m === null || typeof m !== "object")
    throw invalid(
      at.slice(0, -1) || "message",
      "must be an object { body, contentType?, delaySeconds?, orderingKey?, id? }",
    );
  const contentType = m.contentType ?? "json";
  if (contentType !== "json" && contentType !== "text")
    throw invalid(
      `${at}content_type`,
      'must be "json" or "text" (bytes and v8 bodies travel only through the producer binding)',
    );
  let stored: string | undefined;
  if (contentType === "text") {
    if (typeof m.body !== "string") throw invalid(`${at}body`, 'must be a string when content type is "text"');
    stored = m.body;
  } else {
    try {
      stored = JSON.stringify(m.body);
    } catch (err) {
      throw invalid(`${at}body`, `is not serialisable as JSON (${(err as Error).message})`);
    }
    if (stored === undefined) throw invalid(`${at}body`, "is not serialisable as JSON");
  }
  const bodyBytes = utf8.encode(stored).byteLength;
  if (bodyBytes > LIMITS.maxMessageBytes)
    throw tooLarge(`${at}body`, `is ${bodyBytes} bytes; a message holds at most ${LIMITS.maxMessageBytes} bytes`);
  const json: Record<string, unknown> = { body: m.body };
  if (m.contentType !== undefined) json.content_type = contentType;
  if (m.delaySeconds !== undefined) json.delay_seconds = checkDelay(m.delaySeconds, `${at}delay_seconds`);
  if (m.orderingKey !== undefined) {
    if (typeof m.orderingKey !== "string" || !ORDERING_KEY.test(m.orderingKey))
      throw invalid(`${at}ordering_key`, "must be 1 to 128 printable ASCII characters (U+0020 to U+007E)");
    json.ordering_key = m.orderingKey;
  }
  if (m.id !== undefined) {
    if (typeof m.id !== "string" || !MESSAGE_ID.test(m.id))
      throw invalid(`${at}id`, "must be 32 lowercase hex characters");
    json.id = m.id;
  }
  return { json, bodyBytes, wireBytes: utf8.encode(JSON.stringify(json)).byteLength };
}

function checkDelay(seconds: unknown, field: string): number {
  if (typeof seconds !== "number" || !Number.isInteger(seconds) || seconds < 0 || seconds > LIMITS.maxDelaySeconds) {
    throw invalid(field, `must be a whole number of seconds from 0 to ${LIMITS.maxDelaySeconds}`);
  }
  return seconds;
}

function checkIdempotencyKey(key: string | undefined, what = "the key"): void {
  if (key !== undefined && (typeof key !== "string" || !IDEMPOTENCY_KEY.test(key))) {
    throw invalid(
      "idempotency-key",
      `${what} must be 1 to 255 visible ASCII characters (no spaces or control characters)`,
    );
  }
}

function idempotencyHeader(key: string | undefined, auto: boolean): Record<string, string> {
  if (key !== undefined) return { "idempotency-key": key };
  return auto ? { "idempotency-key": crypto.randomUUID() } : {};
}

function pick(o: SendOptions): Omit<MessageSendRequest, "body"> {
  const out: Omit<MessageSendRequest, "body"> = {};
  if (o.contentType !== undefined) out.contentType = o.contentType;
  if (o.delaySeconds !== undefined) out.delaySeconds = o.delaySeconds;
  if (o.orderingKey !== undefined) out.orderingKey = o.orderingKey;
  if (o.id !== undefined) out.id = o.id;
  return out;
}

/** A request's error with its fields renumbered from the request's messages to the batch's. */
function shiftFields(err: ApiError, offset: number): ApiError {
  if (offset === 0) return err;
  const renumber = (s: string) => s.replace(/messages\[(\d+)\]/g, (_, i: string) => `messages[${Number(i) + offset}]`);
  const errors: ApiErrorDetail[] = err.errors.map((e) => ({
    ...e,
    message: renumber(e.message),
    ...(e.field !== undefined ? { field: renumber(e.field) } : {}),
  }));
  const Class = err.constructor as new (
    status: number,
    errors: ApiErrorDetail[],
    opts?: { retryAfterMs?: number; sent?: boolean },
  ) => ApiError;
  return new Class(err.status, errors, {
    ...(err.retryAfterMs !== undefined ? { retryAfterMs: err.retryAfterMs } : {}),
    sent: err.sent,
  });
}
