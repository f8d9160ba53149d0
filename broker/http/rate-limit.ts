/**
 * Request rate limits per account and per queue, so that one tenant cannot starve the
 * others: every API call and every producer-binding send counts once against its
 * account and once against its queue. The counters are Workers' Rate Limiting binding
 * (`[[ratelimits]]` in wrangler.toml), which deploys and which miniflare simulates
 * locally; an in-memory counter would count per isolate, and a busy tenant is served
 * by many isolates at once. As Cloudflare documents, the binding counts per Cloudflare
 * location and approximately, over a period of 10 or 60 s.
 *
 * On when RATE_LIMITS is "on" (wrangler.toml); `.dev.vars` turns it off for local dev,
 * the tests and the benchmark, where each count would be one more call into workerd.
 */
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import { QUEUE_ID_PATTERN } from "../../src/kernel/ids";
import { findQueue } from "../../src/routing/queue-lookup";

/**
 * The binding says only whether a call is within its limit, not when its window ends.
 * Both limiters in wrangler.toml count over 10 s periods, so after 10 s a caller is
 * within its limit again; a shorter wait could only be refused again.
 */
export const RATE_LIMIT_RETRY_AFTER_SECONDS = 10;

let lastFailureLog = 0;

/** Throws a 429 (with Retry-After) when the account or the queue is over its rate. */
export async function enforceRateLimits(env: Env, accountId: string, queueRef: string | undefined): Promise<void> {
  if (env.RATE_LIMITS !== "on") return;
  const [account, queue] = await Promise.all([
    withinLimit(env.ACCOUNT_RATE_LIMITER, accountId),
    queueRef === undefined
      ? true
      : queueKey(env, accountId, queueRef).then((key) => withinLimit(env.QUEUE_RATE_LIMITER, key)),
  ]);
  if (account && queue) return;
  const err = account
    ? new HttpError(
        "rate_limited",
        `queue "${queueRef}" is over its request rate; retry after ${RATE_LIMIT_RETRY_AFTER_SECONDS} s`,
        "queue",
      )
    : new HttpError(
        "rate_limited",
        `account "${accountId}" is over its request rate; retry after ${RATE_LIMIT_RETRY_AFTER_SECONDS} s`,
        "account_id",
      );
  err.headers["retry-after"] = String(RATE_LIMIT_RETRY_AFTER_SECONDS);
  throw err;
}

/**
 * One counter per queue, however a call names it: keyed by name and by id, a queue would
 * have its allowance twice over. A name is resolved through the cached shard map, which the
 * call's own handler reads next anyway. A name no queue has (its call is a 404) and a lookup
 * that fails count under the name: the limiter must not fail the calls it guards.
 */
async function queueKey(env: Env, accountId: string, queueRef: string): Promise<string> {
  if (QUEUE_ID_PATTERN.test(queueRef)) return `${accountId}/${queueRef}`;
  try {
    const map = await findQueue(env, accountId, queueRef);
    return `${accountId}/${map?.queueId ?? queueRef}`;
  } catch {
    return `${accountId}/${queueRef}`;
  }
}

async function withinLimit(limiter: RateLimit | undefined, key: string): Promise<boolean> {
  if (!limiter) return true;
  try {
    return (await limiter.limit({ key })).success;
  } catch (err) {
    // A limiter that fails must not fail the sends it guards: let the call through.
    if (Date.now() - lastFailureLog > 60_000) {
      lastFailureLog = Date.now();
      console.error("rate limiter failed; letting calls through:", err);
    }
    return true;
  }
}
