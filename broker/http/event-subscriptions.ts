/**
 * Cloudflare's event subscriptions (/accounts/:account/event_subscriptions/subscriptions,
 * wrangler's `queues subscription ...`): events of Cloudflare's own products (R2, KV, Workers
 * AI, Workflows, Workers Builds...) delivered into a queue. shardq has none of those sources to
 * take events from, so every call of them answers 501 saying so, and what to do instead: send
 * the events from a Worker (a producer binding, or POST .../messages). Listed in ROUTES like any
 * route, so it needs the admin scope and a token of the account first.
 */
import { HttpError } from "../../src/kernel/errors";

export const EVENT_SUBSCRIPTIONS_UNSUPPORTED =
  "shardq does not serve event subscriptions: they deliver events of Cloudflare's own products (R2, KV, Workers AI, Workflows...) into a queue, and shardq has no such sources. Send such events from a Worker instead, through a producer binding or POST /accounts/:account_id/queues/:queue/messages (see docs/rest-api-clients.md)";

/**
 * The 501. `x-should-retry: false` tells the `cloudflare` SDK, which retries every 5xx by
 * default, that asking again changes nothing.
 */
export function eventSubscriptions(_request: Request): never {
  const err = new HttpError("not_implemented", EVENT_SUBSCRIPTIONS_UNSUPPORTED);
  err.headers["x-should-retry"] = "false";
  throw err;
}
