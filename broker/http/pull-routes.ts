/** The routes of pull consumers (./route-table.ts): leasing, cancelling a long poll, acking and extending. */
import { ackResult, cancelPullResult, extendResult, pullResult } from "../openapi/pull-results";
import { ackBody, ackMessages, extendBody, extendLeases } from "./ack-api";
import { cancelPull, cancelPullBody, pullBody, pullMessages } from "./pull-api";
import type { Route } from "./route";
import { account, C, ok, QUEUE, queueRef } from "./route-kit";

export const PULL_ROUTES: readonly Route[] = [
  {
    method: "POST",
    path: `${QUEUE}/messages/pull`,
    access: [C],
    cloudflare: true,
    handle: (req, env, ctx) => pullMessages(req, env, ctx, account(req), queueRef(req), req.principal.tokenId),
    operationId: "pullMessages",
    tag: "Pull consumers",
    summary: "Lease a batch of messages",
    description:
      "Needs an http_pull consumer (409 otherwise, and while delivery is paused). With wait_time_ms, waits up to that long for messages (long polling) and answers within moments of one becoming ready, whatever made it ready (a send, a delay or retry delay ending, a lease running out, a redrive, a key released); an empty batch is not an error. A pull waiting when delivery is paused ends with the same 409, having leased nothing. Waiting pulls are capped at 1,000 per queue and 250 per token on a queue: one over a cap gets a 429 with Retry-After, its field `queue` or `authorization` naming the cap, having leased nothing. A wait_id (a new one per pull) lets POST .../messages/pull/cancel end the wait if the client goes away. No body at all reads as `{}`.",
    body: { id: "PullRequest", schema: pullBody, required: false },
    answer: ok(pullResult, "The messages leased, each with its lease id."),
    errors: [409, 503],
  },
  {
    method: "POST",
    path: `${QUEUE}/messages/pull/cancel`,
    access: [C],
    handle: (req, env) => cancelPull(req, env, account(req), queueRef(req)),
    operationId: "cancelPull",
    tag: "Pull consumers",
    summary: "End a long poll whose client went away",
    description:
      "Names the pull by the `wait_id` it was sent with. It stops waiting and leases nothing; a wake-up it already took goes to the next waiting pull. `cancelled` is false, with a `reason`, when the pull had already answered with messages (`answered`: nobody else is woken) or no such pull was waiting or just woken (`not_waiting`).",
    body: { id: "CancelPullRequest", schema: cancelPullBody, required: true },
    answer: ok(cancelPullResult, "Whether a waiting pull was found."),
    errors: [409],
  },
  {
    method: "POST",
    path: `${QUEUE}/messages/ack`,
    access: [C],
    cloudflare: true,
    handle: (req, env) => ackMessages(req, env, account(req), queueRef(req)),
    operationId: "ackMessages",
    tag: "Pull consumers",
    summary: "Acknowledge or retry leased messages",
    description:
      "Acks delete; retries come back after their delay, or go to the dead-letter queue when out of retries. A lease id that cannot be honoured is a warning in the answer, never a failed request. A lease id both in `acks` and in `retries` is a 400 naming `retries[i].lease_id`, and nothing of the request is applied.",
    body: { id: "AckRequest", schema: ackBody, required: true },
    answer: ok(ackResult, "What counted, and a warning for each lease id that did not."),
    errors: [409],
  },
  {
    method: "POST",
    path: `${QUEUE}/messages/extend`,
    access: [C],
    handle: (req, env) => extendLeases(req, env, account(req), queueRef(req)),
    operationId: "extendLeases",
    tag: "Pull consumers",
    summary: "Extend leases still held",
    body: { id: "ExtendRequest", schema: extendBody, required: true },
    answer: ok(extendResult, "How many leases were extended, and a warning for each that was not."),
  },
];
