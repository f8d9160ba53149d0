import { parse, stringify } from "devalue";
import { HttpError } from "./errors";
import type { ContentType } from "./protocol";

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/**
 * Turns a message body into the bytes a storage shard keeps, with Cloudflare Queues'
 * rules per content type. `field` names the body in errors ("messages[2].body").
 */
export function encodeBody(body: unknown, contentType: ContentType, field: string): Uint8Array {
  switch (contentType) {
    case "json": {
      let text: string | undefined;
      try {
        text = JSON.stringify(body);
      } catch (err) {
        if (err instanceof UnfaithfulNumberError) throw HttpError.invalid(field, err.message);
        throw HttpError.invalid(field, `is not serialisable as JSON (${(err as Error).message})`);
      }
      // JSON.stringify returns undefined for undefined, functions and symbols.
      if (text === undefined) throw HttpError.invalid(field, "is not serialisable as JSON");
      // It also writes NaN and ±Infinity as null, silently; only a text with a null can hide one.
      if (text.includes("null")) {
        const at = nonFiniteIn(body, "", 0);
        if (at !== null)
          throw HttpError.invalid(
            field,
            `holds a number JSON cannot carry (${at.value}${at.path ? ` at ${at.path}` : ""}): it would arrive as null`,
          );
      }
      return utf8.encode(text);
    }
    case "text":
      if (typeof body !== "string") throw HttpError.invalid(field, 'must be a string when content type is "text"');
      // UTF-8 cannot carry a lone surrogate: encoding would put U+FFFD in its place (as Cloudflare's
      // runtime does, silently). A body is stored as sent or refused. JSON escapes it, so it travels there.
      if (!body.isWellFormed()) {
        const i = loneSurrogateAt(body);
        throw HttpError.invalid(
          field,
          `is not well-formed Unicode: a lone surrogate (U+${body.charCodeAt(i).toString(16).toUpperCase()}) at index ${i}, which UTF-8 cannot carry; send it as JSON or bytes`,
        );
      }
      return utf8.encode(body);
    case "bytes":
      if (body instanceof ArrayBuffer) return new Uint8Array(body.slice(0));
      if (ArrayBuffer.isView(body)) {
        return new Uint8Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength) as ArrayBuffer);
      }
      throw HttpError.invalid(field, 'must be an ArrayBuffer or typed array when content type is "bytes"');
    case "v8":
      try {
        return utf8.encode(stringify(body, REDUCERS));
      } catch (err) {
        throw HttpError.invalid(field, `cannot be structured-cloned (${(err as Error).message})`);
      }
  }
}

/**
 * A number of a JSON request that a double cannot hold as written (1e400, 1e-400,
 * 12345678901234567890): what JSON.parse made of it would reach the consumer as something
 * else (null, 0, 12345678901234567000). A request's JSON is read with this in its place
 * (broker/http/read-json.ts); a body holding one is refused, and any other field is not a number.
 */
export class UnfaithfulNumber {
  constructor(
    readonly source: string,
    readonly parsed: number,
  ) {}
  toJSON(): never {
    const arrives = Number.isFinite(this.parsed) ? JSON.stringify(this.parsed) : "null";
    throw new UnfaithfulNumberError(
      `holds the number ${this.source}, which a double cannot hold: it would arrive as ${arrives}; send it as a string`,
    );
  }
}
class UnfaithfulNumberError extends Error {}

/** Whether JSON.parse turned the number written `source` into something that reads back differently. */
export function unfaithful(source: string, value: number): boolean {
  if (!Number.isFinite(value)) return true;
  // Underflow: a mantissa with a non-zero digit read as 0.
  if (value === 0) return /[1-9]/.test(source.replace(/[eE].*$/, ""));
  // An integer as written that arrives as another integer (12345678901234567890 as
  // 12345678901234567000). Fractions are rounded by any JSON reader of doubles: not refused.
  if (!/^-?\d+$/.test(source)) return false;
  return Math.abs(value) < 1e21 ? String(value) !== source : BigInt(source) !== BigInt(value);
}

function loneSurrogateAt(s: string): number {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = s.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
      else return i;
    } else if (c >= 0xdc00 && c <= 0xdfff) return i;
  }
  return -1;
}

/** Where a value JSON.stringify would write as null holds NaN or ±Infinity (a path like "a[1]"), or null. */
function nonFiniteIn(v: unknown, path: string, depth: number): { value: string; path: string } | null {
  if (typeof v === "number") return Number.isFinite(v) ? null : { value: String(v), path };
  if (typeof v !== "object" || v === null || depth > 200) return null;
  if (typeof (v as { toJSON?: unknown }).toJSON === "function") return null;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const r = nonFiniteIn(v[i], `${path}[${i}]`, depth + 1);
      if (r) return r;
    }
    return null;
  }
  for (const [k, x] of Object.entries(v)) {
    const r = nonFiniteIn(x, path ? `${path}.${k}` : k, depth + 1);
    if (r) return r;
  }
  return null;
}

/** The inverse of encodeBody: what a consumer's `message.body` is. */
export function decodeBody(bytes: Uint8Array, contentType: ContentType): unknown {
  switch (contentType) {
    case "json":
      return JSON.parse(utf8Decoder.decode(bytes));
    case "text":
      return utf8Decoder.decode(bytes);
    case "bytes":
      return bytes.slice().buffer;
    case "v8":
      return parse(utf8Decoder.decode(bytes), REVIVERS);
  }
}

/*
 * The "v8" content type promises what structured clone promises: Dates, RegExps, Maps,
 * Sets, BigInts, typed arrays, undefined, NaN, cycles and shared references survive.
 * workerd does not implement node:v8's serialize(), so bodies are kept in devalue's
 * format (a JSON superset with references), extended with Error, which structured
 * clone also carries. Only the round trip is promised, not V8's wire format.
 */
const ERROR_TYPES: Record<string, ErrorConstructor> = {
  Error,
  EvalError,
  RangeError,
  ReferenceError,
  SyntaxError,
  TypeError,
  URIError,
};

const REDUCERS = {
  Error: (value: unknown) => value instanceof Error && [value.name, value.message, value.stack ?? ""],
};

const REVIVERS = {
  Error: ([name, message, stack]: [string, string, string]) => {
    const err = new (ERROR_TYPES[name] ?? Error)(message);
    if (stack) err.stack = stack;
    return err;
  },
};
