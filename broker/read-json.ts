import { HttpError } from "../src/errors";
import { LIMITS } from "../src/limits";

/**
 * Reads a JSON request body, refusing it before parsing when it is larger than any
 * valid request could be (by Content-Length, or by counting a body sent chunked).
 */
export async function readJson(request: Request, maxBytes: number = LIMITS.maxRequestBytes): Promise<unknown> {
  const type = request.headers.get("content-type");
  if (type && !/^application\/(?:[\w.+-]*\+)?json\b/i.test(type)) {
    throw new HttpError("unsupported_media_type", `content-type must be application/json, got "${type}"`, "content-type");
  }
  // JSON is UTF-8 (RFC 8259); a body declared as anything else would be misread.
  const charset = type && /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(type)?.[1];
  if (charset && !/^utf-?8$/i.test(charset)) {
    throw new HttpError("unsupported_media_type", `content-type charset must be utf-8, got "${charset}"`, "content-type");
  }
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) {
    throw HttpError.tooLarge("body", `request body of ${declared} bytes exceeds ${maxBytes} bytes`);
  }
  if (!request.body) throw HttpError.invalid("body", "request body is required");
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel();
      throw HttpError.tooLarge("body", `request body exceeds ${maxBytes} bytes`);
    }
    chunks.push(value);
  }
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
    return JSON.parse(text);
  } catch (err) {
    throw HttpError.invalid("body", `malformed JSON (${(err as Error).message})`);
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
      if (c === 0x5c) i++; // backslash: skip the escaped character
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
