/**
 * The envelope shardq/outbox puts around a body when the queue's binding cannot carry the
 * message's id itself (a Cloudflare Queues binding has no `id` option), and shardq/inbox takes
 * off again. Both libraries import this module and nothing else of shardq: they run inside
 * users' Durable Objects, beside whatever binding those hold.
 *
 *   { "shardq_outbox": 1, "id": "<32 lowercase hex>", "body": <the body> }
 *   { "shardq_outbox": 1, "id": "<32 lowercase hex>", "bytes": "<base64>" }   (a `bytes` body)
 *
 * A `bytes` body travels as base64 inside a JSON envelope rather than as a V8-serialised
 * ArrayBuffer so that every consumer can read it: pull consumers (HTTP) read JSON, never V8.
 * The envelope is recognised by its exact shape (these keys and no others, the marker 1, an id of
 * the outbox's form), so a user's body that only happens to carry a `shardq_outbox` field is
 * left alone.
 */

/** The envelope's marker field; its value is the envelope's version. */
export const ENVELOPE_MARKER = "shardq_outbox";
const ENVELOPE_VERSION = 1;

/** An outbox id: 128 random bits as 32 lowercase hex characters, the form of shardq's (and Cloudflare's) message ids. */
export const OUTBOX_ID_PATTERN = /^[0-9a-f]{32}$/;

export interface Unwrapped {
  id: string;
  body: unknown;
}

/** A new id, drawn at record time: 128 random bits never repeat in practice. */
export function newOutboxId(): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/** The envelope around a body (anything but bytes); its content type is the body's own, or json for text. */
export function envelopeOf(id: string, body: unknown): Record<string, unknown> {
  return { [ENVELOPE_MARKER]: ENVELOPE_VERSION, id, body };
}

/** The envelope around a `bytes` body: JSON, the bytes in base64. */
export function bytesEnvelopeOf(id: string, bytes: Uint8Array): Record<string, unknown> {
  return { [ENVELOPE_MARKER]: ENVELOPE_VERSION, id, bytes: toBase64(bytes) };
}

/**
 * The id and the body inside an outbox envelope, or null when `body` is not one. A `bytes` body
 * comes back as an ArrayBuffer, what a push consumer on Cloudflare receives for one.
 */
export function unwrapEnvelope(body: unknown): Unwrapped | null {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return null;
  const o = body as Record<string, unknown>;
  if (o[ENVELOPE_MARKER] !== ENVELOPE_VERSION || typeof o.id !== "string" || !OUTBOX_ID_PATTERN.test(o.id)) return null;
  const keys = Object.keys(o);
  if (keys.length !== 3) return null;
  if (keys.includes("body")) return { id: o.id, body: o.body };
  if (typeof o.bytes !== "string") return null;
  const bytes = fromBase64(o.bytes);
  return bytes === null ? null : { id: o.id, body: bytes.buffer };
}

/** Standard base64 of `bytes`, in chunks: String.fromCharCode takes only so many arguments at once. */
export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  const CHUNK = 0x8000;
  for (let i = 0; i < bytes.length; i += CHUNK)
    binary += String.fromCharCode(...bytes.subarray(i, Math.min(i + CHUNK, bytes.length)));
  return btoa(binary);
}

/** The bytes of standard base64, or null when `text` is not base64. */
export function fromBase64(text: string): Uint8Array<ArrayBuffer> | null {
  let binary: string;
  try {
    binary = atob(text);
  } catch {
    return null;
  }
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}
