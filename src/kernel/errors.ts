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
