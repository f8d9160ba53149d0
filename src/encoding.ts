import { serialize, deserialize } from "node:v8";
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
        const buf = serialize(body);
        return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
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
      return deserialize(bytes);
  }
}
