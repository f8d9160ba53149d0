/**
 * When a request is sent again: after a network error, a 429 or a 502/503/504, never
 * after any other answer (a 400 sent again is a 400 again; a 500 may have done its work).
 * Waits are capped exponential backoff with full jitter (a random wait between 0 and the
 * cap of the attempt), so that clients failing together do not come back together; a
 * Retry-After the API gave is waited out in full first.
 */
import { AbortedError, ApiError, NetworkError } from "./errors.ts";

export interface RetryOptions {
  /** Tries in all, the first included; 1 sends once. Default 5. */
  attempts?: number;
  /** The cap of the first retry's wait. Default 100 ms. */
  baseDelayMs?: number;
  /** No wait is longer than this (a Retry-After is still honoured). Default 10 s. */
  maxDelayMs?: number;
}

export interface RetryPolicy {
  attempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
  random: () => number;
}

export const DEFAULT_RETRY: RetryPolicy = { attempts: 5, baseDelayMs: 100, maxDelayMs: 10_000, random: Math.random };

export function retryPolicy(options: RetryOptions | undefined, base: RetryPolicy = DEFAULT_RETRY): RetryPolicy {
  const p = { ...base, ...definedOnly(options ?? {}) };
  if (!Number.isInteger(p.attempts) || p.attempts < 1)
    throw new RangeError("retry.attempts must be a whole number of at least 1");
  if (!(p.baseDelayMs >= 0) || !(p.maxDelayMs >= 0)) throw new RangeError("retry delays must be at least 0");
  return p;
}

/** Whether sending the same request again can succeed. */
export function isRetryable(err: unknown): boolean {
  if (err instanceof NetworkError) return true;
  return (
    err instanceof ApiError &&
    err.sent &&
    (err.status === 429 || err.status === 502 || err.status === 503 || err.status === 504)
  );
}

/** The wait before retry number `retry` (1 is the first retry). */
export function backoffMs(retry: number, policy: RetryPolicy, err?: unknown): number {
  const cap = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (retry - 1));
  const jittered = policy.random() * cap;
  const asked = err instanceof ApiError ? err.retryAfterMs : undefined;
  return asked === undefined ? jittered : Math.max(asked, jittered);
}

/**
 * Runs `attempt` until it succeeds, fails with an error not worth retrying, or runs out
 * of attempts; the last error is thrown as it was. `onRetry` hears of each error retried.
 */
export async function withRetries<T>(
  policy: RetryPolicy,
  attempt: () => Promise<T>,
  opts: { signal?: AbortSignal | undefined; onRetry?: ((err: unknown, waitMs: number) => void) | undefined } = {},
): Promise<T> {
  for (let tried = 1; ; tried++) {
    try {
      return await attempt();
    } catch (err) {
      if (tried >= policy.attempts || !isRetryable(err)) throw err;
      const wait = backoffMs(tried, policy, err);
      opts.onRetry?.(err, wait);
      await sleep(wait, opts.signal);
    }
  }
}

/** A wait the signal cuts short (rejecting with AbortedError). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(new AbortedError(signal.reason));
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(new AbortedError(signal?.reason));
    };
    const timer = setTimeout(
      () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      },
      Math.max(0, ms),
    );
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
