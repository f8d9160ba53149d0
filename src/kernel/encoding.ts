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
        throw HttpError.invalid(field, `is not serialisable as JSON (${(err as Error).message})`);
      }
      // JSON.stringify returns undefined for undefined, functions and symbols.
      if (text === undefined) throw HttpError.invalid(field, "is not serialisable as JSON");
      return utf8.encode(text);
    }
    case "text":
      if (typeof body !== "string") throw HttpError.invalid(field, 'must be a string when content type is "text"');
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
  Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError,
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
