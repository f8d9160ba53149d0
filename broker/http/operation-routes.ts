/**
 * The operators' routes on a queue as a whole (./route-table.ts): purge, redrive from a
 * dead-letter queue, ordering keys held back and their release.
 */
import {
  heldKeysResult,
  purgeResult,
  purgeStatusResult,
  redriveResult,
  releaseResult,
} from "../openapi/operation-results";
import { purgeBody, purgeQueue, purgeStatus } from "./operations-api";
import { heldQuery, listHeldKeys, releaseBody, releaseKey } from "./ordering-api";
import { redriveBody, redriveQueue } from "./redrive";
import type { Route } from "./route";
import { A, account, ok, QUEUE, queueRef } from "./route-kit";

export const OPERATION_ROUTES: readonly Route[] = [
  {
    method: "POST",
    path: `${QUEUE}/purge`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => purgeQueue(req, env, account(req), queueRef(req)),
    operationId: "purgeQueue",
    tag: "Operations",
    summary: "Delete every message of the queue",
    description:
      "Ready, delayed and leased messages alike, in bounded steps: `completed: false` means call again. Answers the queue, as Cloudflare's purge does, with shardq's counts beside its fields. With `return_ids: true` the answer lists the ids deleted, and one request deletes at most 10,000. Messages a redrive is moving out of the queue at that moment are left to it (they go to its target, counted in its `moved`, not in `purged`).",
    body: { id: "PurgeRequest", schema: purgeBody, required: true },
    answer: ok(purgeResult, "The queue, as Cloudflare's purge answers it, with how many were deleted."),
    errors: [503],
  },
  {
    method: "GET",
    path: `${QUEUE}/purge`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => purgeStatus(env, account(req), queueRef(req)),
    operationId: "purgeStatus",
    tag: "Operations",
    summary: "How the queue's last purge went",
    description:
      'Cloudflare\'s purge status: when the last purge started, and whether it emptied the queue ("true" or "false", strings as Cloudflare types them). `{}` for a queue never purged.',
    answer: ok(purgeStatusResult, "The last purge."),
  },
  {
    method: "POST",
    path: `${QUEUE}/redrive`,
    access: [A],
    handle: (req, env) => redriveQueue(req, env, account(req), queueRef(req)),
    operationId: "redriveQueue",
    tag: "Operations",
    summary: "Move messages from this dead-letter queue back to a queue",
    description:
      "By default to the one queue whose consumer dead-letters here. Keeps ids and ordering keys, each key's messages in their order; never loses a message. " +
      "`moved` counts the messages written to the target; `remaining_matching` counts keyed and unkeyed ones alike. A purge of this queue meanwhile leaves the messages being moved to the redrive. No body at all reads as `{}`.",
    body: { id: "RedriveRequest", schema: redriveBody, required: false },
    answer: ok(redriveResult, "How many moved, and how many still match."),
    errors: [503],
  },
  {
    method: "GET",
    path: `${QUEUE}/ordering/held`,
    access: [A],
    handle: (req, env) => listHeldKeys(req, env, account(req), queueRef(req)),
    operationId: "listHeldKeys",
    tag: "Operations",
    summary: "Ordering keys held back, longest held first",
    description:
      "Why each is held: `leased` (a batch in flight), `retry` (its head waits out a retry delay), `delayed` (its head was sent with a delay not over yet), `handoff` (another shard holds older messages of it). A retry or a delay that is over no longer holds its key.",
    query: heldQuery,
    answer: ok(heldKeysResult, "The keys held back, with counts by reason."),
  },
  {
    method: "POST",
    path: `${QUEUE}/ordering/release`,
    access: [A],
    handle: (req, env) => releaseKey(req, env, account(req), queueRef(req)),
    operationId: "releaseOrderingKey",
    tag: "Operations",
    summary: "Release a held ordering key",
    description:
      "Moves the message holding the key, named by `message_id` as `GET .../ordering/held` lists it, to the consumer's dead-letter queue, and the key goes on. " +
      "409 naming `dead_letter_queue` without one; 404 naming `dead_letter_queue` when that queue is gone; 409 naming `message_id` when another message holds the key " +
      "(the one named was acked or released meanwhile); 404 naming `ordering_key` when the key holds nothing back (no message, or its next one can be delivered). " +
      "A refused release leaves the key as it was.",
    body: { id: "ReleaseRequest", schema: releaseBody, required: true },
    answer: ok(releaseResult, "The message moved."),
    errors: [409],
  },
];
