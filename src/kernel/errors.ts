/**
 * Errors that reach a client. Thrown anywhere in the broker and turned into the
 * JSON envelope in exactly one place (broker/http/envelope.ts).
 */
export type ErrorKind =
  | "unauthorized"
  | "forbidden"
  | "invalid"
  | "not_found"
  | "too_large"
  | "conflict"
  | "unsupported_media_type"
  | "method_not_allowed"
  | "rate_limited"
  | "unavailable"
  | "not_implemented"
  | "internal";

const STATUS: Record<ErrorKind, number> = {
  unauthorized: 401,
  forbidden: 403,
  invalid: 400,
  not_found: 404,
  too_large: 413,
  conflict: 409,
  unsupported_media_type: 415,
  method_not_allowed: 405,
  rate_limited: 429,
  unavailable: 503,
  not_implemented: 501,
  internal: 500,
};

/** Stable numeric codes, in the style of Cloudflare's API errors. */
const CODE: Record<ErrorKind, number> = {
  unauthorized: 10001,
  invalid: 10002,
  not_found: 10003,
  too_large: 10004,
  conflict: 10005,
  unsupported_media_type: 10006,
  method_not_allowed: 10007,
  unavailable: 10008,
  forbidden: 10009,
  rate_limited: 10010,
  not_implemented: 10011,
  internal: 10000,
};

export interface ErrorDetail {
  code: number;
  message: string;
  /** The request field at fault, as a path: "messages[3].body". */
  field?: string;
}

export class HttpError extends Error {
  readonly status: number;
  readonly details: ErrorDetail[];
  /** Extra response headers, such as Retry-After. */
  headers: Record<string, string> = {};

  constructor(kind: ErrorKind, message: string, field?: string, more: ErrorDetail[] = []) {
    super(message);
    this.name = "HttpError";
    this.status = STATUS[kind];
    const first: ErrorDetail = { code: CODE[kind], message };
    if (field !== undefined) first.field = field;
    this.details = [first, ...more];
  }

  static invalid(field: string, message: string): HttpError {
    return new HttpError("invalid", `${field}: ${message}`, field);
  }

  static tooLarge(field: string, message: string): HttpError {
    return new HttpError("too_large", `${field}: ${message}`, field);
  }
}

export function errorCode(kind: ErrorKind): number {
  return CODE[kind];
}

/**
 * 404 for a queue the account does not have. Another account's queue is "not found"
 * too, never "forbidden": its existence is not disclosed. `field` is the request field
 * that named it, and names it in the message ("target_queue": `target queue "x" not found`).
 */
export function queueNotFound(queueRef: string, field = "queue"): HttpError {
  return new HttpError("not_found", `${field.replace(/_/g, " ")} "${queueRef}" not found`, field);
}

export function consumerNotFound(consumerId: string): HttpError {
  return new HttpError("not_found", `consumer "${consumerId}" not found`, "consumer_id");
}

export function messageNotFound(messageId: string): HttpError {
  return new HttpError("not_found", `message "${messageId}" not found`, "message_id");
}

/**
 * 503: a part of the service did not answer or took nothing just now, and the request
 * may be sent again. With Retry-After unless `retryAfterSeconds` is null.
 */
export function unavailable(message: string, retryAfterSeconds: number | null = 1): HttpError {
  const err = new HttpError("unavailable", message);
  if (retryAfterSeconds !== null) err.headers["retry-after"] = String(retryAfterSeconds);
  return err;
}
