/**
 * A message as the outbox records it and as it sends it: the body serialised at record time by
 * its content type's rule (the rules of Cloudflare's binding and shardq's, checked here so that
 * a message the binding would refuse is refused when it is recorded, inside the caller's
 * transaction, never after it committed: a refusal at send time would hold up every message
 * behind it), its size as the binding counts it, and the MessageSendRequest built from the row.
 *
 *   json   JSON text (what the binding sends is JSON.parse of it: the same text again)
 *   text   the string          bytes  the bytes (a BLOB)
 *   v8     clone-codec.ts's text of a structuredClone of the body
 */
import { bytesEnvelopeOf, envelopeOf } from "../envelope/envelope";
import { decodeClone, encodeClone } from "./clone-codec";

/** Cloudflare Queues' documented limits (1 KB = 1000 bytes, as Cloudflare counts). */
export const LIMITS = { messageBytes: 128_000, batchMessages: 100, batchBytes: 256_000, delaySeconds: 86_400 } as const;

const CONTENT_TYPES: readonly QueueContentType[] = ["json", "text", "bytes", "v8"];
/** shardq's ordering keys (docs/ordered-lanes.md); a Cloudflare binding ignores the field. */
const ORDERING_KEY = /^[\x20-\x7e]{1,128}$/;

export type IdMode = "envelope" | "id";

/** What a row holds of one message. */
export interface Recorded {
  id: string;
  contentType: QueueContentType;
  body: string | Uint8Array;
  delaySeconds: number | null;
  orderingKey: string | null;
  /** The bytes the binding counts for it (in envelope mode, the envelope's). */
  size: number;
}

export interface SendOptions {
  contentType?: QueueContentType;
  delaySeconds?: number;
  orderingKey?: string;
}

const utf8 = new TextEncoder();

/** The message checked and serialised; throws the binding's kind of error (TypeError, RangeError). */
export function record(
  id: string,
  body: unknown,
  options: SendOptions,
  defaultContentType: QueueContentType,
  mode: IdMode,
): Recorded {
  if (body === undefined) throw new TypeError("Message body cannot be undefined");
  const contentType = options.contentType ?? defaultContentType;
  if (!CONTENT_TYPES.includes(contentType))
    throw new TypeError(`Unsupported queue message content type: ${String(contentType)}`);
  const delaySeconds = options.delaySeconds ?? null;
  if (
    delaySeconds !== null &&
    !(Number.isInteger(delaySeconds) && delaySeconds >= 0 && delaySeconds <= LIMITS.delaySeconds)
  )
    throw new RangeError(`delaySeconds: must be a whole number of seconds from 0 to ${LIMITS.delaySeconds}`);
  const orderingKey = options.orderingKey ?? null;
  if (orderingKey !== null && !(typeof orderingKey === "string" && ORDERING_KEY.test(orderingKey)))
    throw new TypeError("orderingKey: must be 1 to 128 printable ASCII characters (U+0020 to U+007E)");

  const stored = serialise(body, contentType);
  const size = mode === "envelope" ? envelopeSize(id, stored, contentType) : byteLength(stored);
  if (size > LIMITS.messageBytes)
    throw new RangeError(
      `body: is ${size} bytes${mode === "envelope" ? " in its envelope" : ""}; a message holds at most ${LIMITS.messageBytes} bytes`,
    );
  return { id, contentType, body: stored, delaySeconds, orderingKey, size };
}

function serialise(body: unknown, contentType: QueueContentType): string | Uint8Array {
  switch (contentType) {
    case "json": {
      let text: string | undefined;
      try {
        text = JSON.stringify(body);
      } catch (err) {
        throw new TypeError(`body: is not serialisable as JSON (${(err as Error).message})`);
      }
      if (text === undefined) throw new TypeError("body: is not serialisable as JSON");
      // JSON writes NaN and ±Infinity as null without a word; shardq's binding refuses them, so
      // the outbox does too, rather than record what one binding would take and the other not.
      if (text.includes("null") && holdsNonFinite(body, 0))
        throw new TypeError("body: holds a number JSON cannot carry (NaN or Infinity): it would arrive as null");
      return text;
    }
    case "text":
      if (typeof body !== "string") throw new TypeError('body: must be a string when content type is "text"');
      // UTF-8 cannot carry a lone surrogate: Cloudflare's binding puts U+FFFD in its place, shardq's refuses it.
      if (!body.isWellFormed()) throw new TypeError("body: is not well-formed Unicode (a lone surrogate)");
      return body;
    case "bytes":
      if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
      if (ArrayBuffer.isView(body))
        return new Uint8Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength) as ArrayBuffer);
      throw new TypeError('body: must be an ArrayBuffer or typed array when content type is "bytes"');
    case "v8":
      try {
        return encodeClone(body);
      } catch (err) {
        throw new TypeError(`body: cannot be structured-cloned (${(err as Error).message})`);
      }
  }
}

function holdsNonFinite(v: unknown, depth: number): boolean {
  if (typeof v === "number") return !Number.isFinite(v);
  if (typeof v !== "object" || v === null || depth > 200) return false;
  if (typeof (v as { toJSON?: unknown }).toJSON === "function") return false;
  return Object.values(v).some((x) => holdsNonFinite(x, depth + 1));
}

function byteLength(stored: string | Uint8Array): number {
  return typeof stored === "string" ? utf8.encode(stored).byteLength : stored.byteLength;
}

/**
 * The envelope's size as the binding will count it: exact for json, text and bytes (the JSON the
 * binding writes), and for v8 the outbox's own encoding of the body, which is larger than V8's
 * for any body (it names every node and writes numbers as digits), so a v8 body close to the
 * limit may be refused that the binding would take, never the other way round.
 */
function envelopeSize(id: string, stored: string | Uint8Array, contentType: QueueContentType): number {
  const frame = JSON.stringify(envelopeOf(id, null)).length - "null".length;
  switch (contentType) {
    case "json":
    case "v8":
      return frame + byteLength(stored);
    case "text":
      return frame + utf8.encode(JSON.stringify(stored)).byteLength;
    case "bytes":
      return (
        JSON.stringify(bytesEnvelopeOf(id, new Uint8Array(0))).length + Math.ceil((stored as Uint8Array).length / 3) * 4
      );
  }
}

/** The message the binding is given for a row: with its id as `id`, or in the envelope. */
export function messageOf(row: Recorded, mode: IdMode): MessageSendRequest & { id?: string; orderingKey?: string } {
  const body = bodyOf(row);
  const message: MessageSendRequest & { id?: string; orderingKey?: string } =
    mode === "id"
      ? { body, contentType: row.contentType, id: row.id }
      : row.contentType === "bytes"
        ? { body: bytesEnvelopeOf(row.id, row.body as Uint8Array), contentType: "json" }
        : { body: envelopeOf(row.id, body), contentType: row.contentType === "text" ? "json" : row.contentType };
  if (row.delaySeconds !== null) message.delaySeconds = row.delaySeconds;
  if (row.orderingKey !== null) message.orderingKey = row.orderingKey;
  return message;
}

function bodyOf(row: Recorded): unknown {
  switch (row.contentType) {
    case "json":
      return JSON.parse(row.body as string);
    case "text":
      return row.body;
    case "bytes":
      // Cloudflare's binding takes a view for bytes, not a bare ArrayBuffer.
      return row.body;
    case "v8":
      return decodeClone(row.body as string);
  }
}
