import { unfaithful, UnfaithfulNumber } from "../../src/kernel/encoding";
import { HttpError } from "../../src/kernel/errors";
import { LIMITS } from "../../src/kernel/limits";

/** Requests on a route Cloudflare's API serves (`cloudflare` in the route groups, broker/http/*-routes.ts): their bodies are JSON whatever their content type says. */
const anyContentType = new WeakSet<Request>();

/**
 * Marks a request whose body is read as JSON when it parses as JSON, whatever its content type
 * says, as Cloudflare's API reads it: wrangler sends its JSON bodies as text/plain. The router
 * marks the requests of the routes Cloudflare serves; each carries a bearer token.
 */
export function acceptAnyContentType(request: Request): void {
  anyContentType.add(request);
}

const JSON_TYPE = /^application\/(?:[\w.+-]*\+)?json\b/i;

/**
 * Reads a JSON request body, refusing it before parsing when it is larger than any
 * valid request could be (by Content-Length, or by counting a body sent chunked).
 * A body declared as something other than JSON is refused (415), unless the request was
 * marked by acceptAnyContentType and the body parses as JSON.
 */
export async function readJson(request: Request, maxBytes: number = LIMITS.maxRequestBytes): Promise<unknown> {
  const type = request.headers.get("content-type");
  const notJson = type !== null && type !== "" && !JSON_TYPE.test(type);
  const wrongType = () =>
    new HttpError("unsupported_media_type", `content-type must be application/json, got "${type}"`, "content-type");
  if (notJson && !anyContentType.has(request)) throw wrongType();
  // JSON is UTF-8 (RFC 8259); a body declared as anything else would be misread.
  const charset = type && /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(type)?.[1];
  if (charset && !/^utf-?8$/i.test(charset)) {
    throw new HttpError(
      "unsupported_media_type",
      `content-type charset must be utf-8, got "${charset}"`,
      "content-type",
    );
  }
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) {
    throw HttpError.tooLarge("body", `request body of ${declared} bytes exceeds ${maxBytes} bytes`);
  }
  if (!request.body) throw HttpError.invalid("body", "request body is required");
  const { chunks, total } = await readBody(request.body, maxBytes);
  const bytes = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    bytes.set(c, at);
    at += c.byteLength;
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw HttpError.invalid("body", "request body is not valid UTF-8");
  }
  if (text.trim() === "") throw HttpError.invalid("body", "request body is required");
  if (nestedDeeperThan(text, MAX_JSON_DEPTH)) {
    throw HttpError.invalid("body", `JSON nested more than ${MAX_JSON_DEPTH} levels deep`);
  }
  try {
    // Only a long run of digits or a 3-digit exponent can be a number a double does not hold
    // as written: then (and only then) each number's source text is looked at.
    return MAYBE_UNFAITHFUL.test(text) ? JSON.parse(text, keepUnfaithful) : JSON.parse(text);
  } catch (err) {
    // Declared as something else and not JSON either: the content type is what to fix.
    if (notJson) throw wrongType();
    throw HttpError.invalid("body", `malformed JSON (${(err as Error).message})`);
  }
}

const MAYBE_UNFAITHFUL = /\d{16}|[eE][+-]?\d{3}/;

/** JSON.parse's reviver: a number that would read back as another one is kept as written, marked (src/kernel/encoding.ts). */
function keepUnfaithful(this: unknown, _key: string, value: unknown, context?: { source?: string }): unknown {
  if (typeof value !== "number") return value;
  const source = context?.source ?? String(value);
  return unfaithful(source, value) ? new UnfaithfulNumber(source, value) : value;
}

/**
 * Past the limit a body is still read to its end, kept nowhere, up to this many bytes,
 * and only then cancelled. Cancelling a body the client is still sending closes the
 * connection under it: the client (or wrangler dev's proxy in front of the Worker)
 * then sees a reset instead of the 413, or wrangler dev answers 500 "Network connection
 * lost" with its own stack. Bounded, so a body of any size costs a bounded read.
 */
export const DISCARD_LIMIT_BYTES = 32 * 1_048_576;

/**
 * Reads the body stream, keeping at most `maxBytes`. Every failure is an HttpError
 * naming `body`: 413 once the body passed the limit, whatever happens after; 400 when
 * the stream fails before (the client went away mid-body, a broken chunked encoding).
 * The stream's own error is not passed on: it can carry the runtime's internals.
 */
async function readBody(
  body: ReadableStream<Uint8Array>,
  maxBytes: number,
): Promise<{ chunks: Uint8Array[]; total: number }> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { chunks, total };
      total += value.byteLength;
      if (total > maxBytes) break;
      chunks.push(value);
    }
  } catch {
    throw HttpError.invalid(
      "body",
      "request body could not be read to its end: the connection closed mid-body, or its chunked encoding is broken",
    );
  }
  chunks.length = 0;
  await discardRest(reader, total);
  throw HttpError.tooLarge("body", `request body exceeds ${maxBytes} bytes`);
}

/** Reads on without keeping anything, up to DISCARD_LIMIT_BYTES in all, then cancels. Never throws. */
async function discardRest(reader: ReadableStreamDefaultReader<Uint8Array>, read: number): Promise<void> {
  try {
    while (read <= DISCARD_LIMIT_BYTES) {
      const { done, value } = await reader.read();
      if (done) return;
      read += value.byteLength;
    }
    await reader.cancel();
  } catch {
    // The client went away while we discarded: the answer is the 413 all the same.
  }
}

/**
 * Deepest nesting of arrays and objects a request may have, its envelope included.
 * Serialising a body (JSON.stringify, the v8 encoding) recurses once per level: a
 * limit well inside the stack makes a hostile body a 400, the same every time.
 */
export const MAX_JSON_DEPTH = 100;

/** Counts brackets outside strings: one pass, before the text is parsed. */
function nestedDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}

/** For endpoints whose every field is optional: no body at all (as `curl -X POST` sends) reads as `{}`. */
export async function readOptionalJson(request: Request): Promise<unknown> {
  if (request.body === null || request.headers.get("content-length") === "0") return {};
  return readJson(request);
}
