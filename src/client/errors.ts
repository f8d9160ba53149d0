/**
 * The client's errors. An answer of the API becomes an ApiError of the class its status
 * names, carrying the envelope's errors as the broker wrote them, and the field at fault
 * ("messages[3].body") as the API names it. A request the client can tell is bad before
 * sending it fails with the same classes and the same field names, so a caller handles
 * one set of errors whichever side caught the mistake.
 */

/** One entry of the envelope's `errors`. */
export interface ApiErrorDetail {
  code?: number;
  message: string;
  /** The request field at fault, as the API names it: "messages[3].body", "wait_time_ms". */
  field?: string;
}

/** Everything this library throws is a ShardqError. */
export class ShardqError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ShardqError";
  }
}

/** The API answered with an error (or the client refused a request the API would refuse). */
export class ApiError extends ShardqError {
  /** The HTTP status: the API's, or the one it would have answered. */
  readonly status: number;
  /** The envelope's errors, first one first. */
  readonly errors: ApiErrorDetail[];
  /** The first error's code (Cloudflare's numbering: 10001 invalid, 10004 not found, ...). */
  readonly code: number | undefined;
  /** The first error's field, as the API names it. */
  readonly field: string | undefined;
  /** From a Retry-After header: how long the API asked to wait before sending again. */
  readonly retryAfterMs: number | undefined;
  /** False when the client refused the request itself, before sending anything. */
  readonly sent: boolean;

  constructor(status: number, errors: ApiErrorDetail[], opts: { retryAfterMs?: number; sent?: boolean } = {}) {
    super(errors[0]?.message ?? `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.errors = errors;
    this.code = errors[0]?.code;
    this.field = errors[0]?.field;
    this.retryAfterMs = opts.retryAfterMs;
    this.sent = opts.sent ?? true;
  }
}

/** 400: a field is missing or wrong; `field` names it. */
export class InvalidRequestError extends ApiError {
  override readonly name = "InvalidRequestError";
}
/** 401: no token, or one the service does not know. */
export class AuthenticationError extends ApiError {
  override readonly name = "AuthenticationError";
}
/** 403: the token lacks the scope the route needs (send, consume or admin). */
export class PermissionError extends ApiError {
  override readonly name = "PermissionError";
}
/** 404: no such queue, consumer, message or route. */
export class NotFoundError extends ApiError {
  override readonly name = "NotFoundError";
}
/** 409: the queue's state refuses it (delivery paused, no HTTP pull consumer, a name taken). */
export class ConflictError extends ApiError {
  override readonly name = "ConflictError";
}
/** 413: a message or a batch over Cloudflare's limits; `field` names it. */
export class PayloadTooLargeError extends ApiError {
  override readonly name = "PayloadTooLargeError";
}
/** 429: over the account's or the queue's request rate; `retryAfterMs` says when to come back. */
export class RateLimitedError extends ApiError {
  override readonly name = "RateLimitedError";
}
/** 502, 503, 504: a part of the service did not answer; the request may be sent again. */
export class UnavailableError extends ApiError {
  override readonly name = "UnavailableError";
}

const BY_STATUS: Record<
  number,
  new (status: number, errors: ApiErrorDetail[], opts?: { retryAfterMs?: number; sent?: boolean }) => ApiError
> = {
  400: InvalidRequestError,
  401: AuthenticationError,
  403: PermissionError,
  404: NotFoundError,
  405: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  429: RateLimitedError,
  502: UnavailableError,
  503: UnavailableError,
  504: UnavailableError,
};

/** The error class for an API answer's status. */
export function apiError(status: number, errors: ApiErrorDetail[], retryAfterMs?: number): ApiError {
  const Class = BY_STATUS[status] ?? ApiError;
  return new Class(status, errors, retryAfterMs === undefined ? {} : { retryAfterMs });
}

/** A 400 the client raises itself, before sending: the same class and field the API would give. */
export function invalid(field: string, message: string): InvalidRequestError {
  return new InvalidRequestError(400, [{ code: 10001, message: `${field}: ${message}`, field }], { sent: false });
}

/** A 413 the client raises itself, before sending. */
export function tooLarge(field: string, message: string): PayloadTooLargeError {
  return new PayloadTooLargeError(413, [{ code: 10006, message: `${field}: ${message}`, field }], { sent: false });
}

/** The service could not be reached, or did not answer in time: nothing is known of the request's fate. */
export class NetworkError extends ShardqError {
  override readonly name = "NetworkError";
  readonly url: string;
  /** The system's code when there is one: ECONNREFUSED, ENOTFOUND, ECONNRESET, ETIMEDOUT. */
  readonly code: string | undefined;

  constructor(url: string, reason: string, code: string | undefined, cause: unknown) {
    super(`cannot reach ${url}: ${reason}`, { cause });
    this.url = url;
    this.code = code;
  }
}

/**
 * A batch split into several requests failed part of the way: the messages before
 * `acceptedIds.length` were stored (their ids, in order); the rest were not sent or not stored.
 */
export class PartialSendError extends ShardqError {
  override readonly name = "PartialSendError";
  readonly acceptedIds: string[];

  constructor(acceptedIds: string[], cause: ShardqError) {
    super(`${acceptedIds.length} messages were stored before a request failed: ${cause.message}`, { cause });
    this.acceptedIds = acceptedIds;
  }
}

/** The caller's AbortSignal ended the call (or the wait before a retry); `cause` is the signal's reason. */
export class AbortedError extends ShardqError {
  override readonly name = "AbortedError";
  constructor(cause?: unknown) {
    super("aborted", { cause });
  }
}
