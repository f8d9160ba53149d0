/**
 * One API call over fetch: the bearer token, a JSON body, a timeout, the envelope read,
 * and an answer that is not a success turned into the ApiError of its status. Only
 * `fetch`, AbortSignal and TextEncoder are used, so it runs wherever those are global:
 * Node 20+, Deno, Bun, browsers and Workers (where `fetch` may be a service binding's).
 */
import { AbortedError, apiError, NetworkError, type ApiErrorDetail } from "./errors.ts";
import { retryPolicy, withRetries, type RetryOptions, type RetryPolicy } from "./retry.ts";

/** What the client calls to reach the service: the global fetch, or a service binding's. */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface TransportOptions {
  /** The service's base URL: "http://127.0.0.1:8787", "https://shardq.example.com". */
  url: string;
  /** A bearer token holding the scopes the calls need (send, consume, admin). */
  token: string;
  /** The account the token belongs to. Default "local", the dev service's. */
  account?: string;
  /** Gives up on an answer after this long (a long poll's wait is added). Default 30 s. */
  timeoutMs?: number;
  /** Sending again after network errors, 429 and 503 (src/client/retry.ts). */
  retry?: RetryOptions;
  /** Another fetch: a service binding's (`env.SHARDQ.fetch.bind(env.SHARDQ)`), or one with a proxy. */
  fetch?: FetchLike;
}

/** Cloudflare's envelope, which every answer of the API has. */
export interface Envelope<T = unknown> {
  success: boolean;
  errors: ApiErrorDetail[];
  messages: unknown[];
  result: T;
  result_info?: { page: number; per_page: number; count: number; total_count: number; total_pages?: number };
}

export interface CallOptions {
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
  /** Added to the timeout: the time the service is asked to hold the request (a long poll). */
  extraTimeoutMs?: number;
  /** Overrides the client's retry policy for this call ({ attempts: 1 }: never again). */
  retry?: RetryPolicy | undefined;
  /** Hears of each error that is retried, and the wait before the next try. */
  onRetry?: ((err: unknown, waitMs: number) => void) | undefined;
}

export class Transport {
  readonly url: string;
  readonly account: string;
  readonly retry: RetryPolicy;
  readonly #base: string;
  readonly #token: string;
  readonly #timeoutMs: number;
  readonly #fetch: FetchLike;

  constructor(options: TransportOptions) {
    if (typeof options.url !== "string" || !/^https?:\/\//.test(options.url))
      throw new TypeError('url must be an http:// or https:// URL, such as "http://127.0.0.1:8787"');
    if (typeof options.token !== "string" || options.token === "")
      throw new TypeError("token must be a non-empty string");
    this.url = options.url.replace(/\/+$/, "");
    this.account = options.account ?? "local";
    this.#base = `${this.url}/accounts/${encodeURIComponent(this.account)}`;
    this.#token = options.token;
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.retry = retryPolicy(options.retry);
    // A bare reference to the global fetch loses its `this` in some runtimes (Workers).
    this.#fetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  /** One call, sent again as the retry policy says. `path` starts at the account: "/queues/orders". */
  async call<T = unknown>(method: string, path: string, opts: CallOptions = {}): Promise<Envelope<T>> {
    return withRetries(opts.retry ?? this.retry, () => this.once<T>(method, path, opts), {
      signal: opts.signal,
      onRetry: opts.onRetry,
    });
  }

  /** One request, never sent again. */
  async once<T>(method: string, path: string, opts: CallOptions = {}): Promise<Envelope<T>> {
    const url = this.#base + path;
    const timeoutMs = this.#timeoutMs + (opts.extraTimeoutMs ?? 0);
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}`, ...opts.headers };
    if (opts.body !== undefined) headers["content-type"] = "application/json";
    let res: Response;
    let text: string;
    try {
      res = await this.#fetch(url, {
        method,
        headers,
        body: opts.body === undefined ? null : JSON.stringify(opts.body),
        signal,
      });
      text = await res.text();
    } catch (err) {
      // The caller's own abort is not a network fault.
      if (opts.signal?.aborted) throw new AbortedError(opts.signal.reason);
      throw networkError(this.url, err, timeout.aborted ? timeoutMs : undefined);
    }
    const envelope = parseEnvelope<T>(text);
    if (!envelope) {
      const snippet = text.trim().slice(0, 200) || "(empty body)";
      const message = `unexpected answer from ${this.url} (HTTP ${res.status}, not shardq's JSON envelope; is the URL right?): ${snippet}`;
      throw apiError(res.status >= 400 ? res.status : 502, [{ message }], retryAfterOf(res));
    }
    if (!envelope.success || !res.ok) {
      throw apiError(
        res.status,
        envelope.errors?.length ? envelope.errors : [{ message: `HTTP ${res.status}` }],
        retryAfterOf(res),
      );
    }
    return envelope;
  }
}

function parseEnvelope<T>(text: string): Envelope<T> | undefined {
  try {
    const v = JSON.parse(text) as Envelope<T>;
    return v && typeof v === "object" && typeof v.success === "boolean" ? v : undefined;
  } catch {
    return undefined;
  }
}

/** Retry-After in seconds or as an HTTP date. */
function retryAfterOf(res: Response): number | undefined {
  const raw = res.headers.get("retry-after");
  if (raw === null) return undefined;
  const seconds = Number(raw);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const at = Date.parse(raw);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/**
 * fetch's "fetch failed" made readable: the system error code sits in `cause`, or in
 * `cause.errors` when a name resolved to several addresses (localhost: ::1 and 127.0.0.1).
 */
function networkError(url: string, err: unknown, timedOutAfterMs: number | undefined): NetworkError {
  if (timedOutAfterMs !== undefined)
    return new NetworkError(url, `no answer within ${timedOutAfterMs / 1000} s`, "ETIMEDOUT", err);
  const e = err as
    { message?: string; cause?: { code?: string; message?: string; errors?: Array<{ code?: string }> } } | undefined;
  const code = e?.cause?.code ?? e?.cause?.errors?.find((x) => x.code)?.code;
  const reason = (code && REASONS[code]) ?? e?.cause?.message ?? e?.message ?? String(err);
  return new NetworkError(url, reason, code, err);
}

const REASONS: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ENOTFOUND: "host not found",
  EAI_AGAIN: "host name lookup failed",
  ECONNRESET: "connection reset",
  ETIMEDOUT: "connection timed out",
  EHOSTUNREACH: "host unreachable",
  UND_ERR_SOCKET: "connection closed",
};
