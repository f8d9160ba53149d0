/**
 * Every route of the HTTP API, each declared once: its method and path, the token scopes it
 * accepts, its handler, and what it takes (the very schemas its handler parses with) and
 * answers (broker/openapi/result-schemas.ts). The router registers these routes under each
 * base (./router.ts), its check reads their access by path (./path-access.ts), and GET
 * /openapi.json describes them (broker/openapi/document.ts). Adding a route is adding an
 * entry here; test/workers/scopes.test.ts then calls it with every kind of token.
 *
 * Only /healthz and /openapi.json are PUBLIC (test/workers/healthz.test.ts fails if anything
 * else is): neither reads a binding nor says anything of an account. The fault harness's
 * test-hook routes are not here: they exist only in a build with SHARDQ_TEST_HOOKS on, never
 * in one users run, and are left out of the description (./test-hooks-api.ts).
 */
import type { z } from "zod";
import { HttpError } from "../../src/kernel/errors";
import { LIMITS } from "../../src/kernel/limits";
import { httpBatch, httpMessage } from "../../src/routing/pending-messages";
import { prometheusMetrics } from "../metrics/prometheus-api";
import * as R from "../openapi/result-schemas";
import {
  createConsumer,
  createConsumerBody,
  deleteConsumer,
  getConsumer,
  listConsumers,
  replaceConsumer,
  replaceConsumerBody,
  updateConsumer,
  updateConsumerBody,
} from "./consumers-api";
import {
  getSeries,
  peekBody,
  peekByPost,
  peekMessages,
  peekQuery,
  purgePeeked,
  purgePeekedBody,
} from "./dashboard-api";
import { eventSubscriptions } from "./event-subscriptions";
import { getMetrics, sendBatch, sendMessage } from "./messages-api";
import { cancelMessage, lookupMessage, purgeBody, purgeQueue, purgeStatus } from "./operations-api";
import { heldQuery, listHeldKeys, releaseBody, releaseKey } from "./ordering-api";
import { healthz, openApi } from "./public-api";
import {
  ackBody,
  ackMessages,
  cancelPull,
  cancelPullBody,
  extendBody,
  extendLeases,
  pullBody,
  pullMessages,
} from "./pull-api";
import {
  createQueue,
  createQueueBody,
  deleteQueue,
  getQueue,
  listQueues,
  listQueuesQuery,
  replaceQueue,
  replaceQueueBody,
  updateQueue,
  updateQueueBody,
} from "./queues-api";
import { redriveBody, redriveQueue } from "./redrive";
import { param, PUBLIC, type Answer, type ApiRequest, type Route } from "./route";
import { getShards } from "./shards-api";

const S = "send",
  C = "consume",
  A = "admin";
const ACCOUNT = "/accounts/{account_id}";
const QUEUE = `${ACCOUNT}/queues/{queue}`;
const SUBSCRIPTIONS = `${ACCOUNT}/event_subscriptions/subscriptions`;
const ok = (result: z.ZodType, description: string): Answer => ({ kind: "envelope", status: 200, result, description });

export const ROUTES: readonly Route[] = [
  {
    method: "GET",
    path: "/healthz",
    access: PUBLIC,
    handle: healthz,
    operationId: "health",
    tag: "Health",
    summary: "Readiness probe",
    description: "200 from a Worker that is up and routing. Reads no binding and needs no token; never cached.",
    answer: ok(R.healthResult, "Up."),
  },
  {
    method: "HEAD",
    path: "/healthz",
    access: PUBLIC,
    handle: healthz,
    operationId: "healthHead",
    tag: "Health",
    summary: "Readiness probe, headers only",
    answer: { kind: "empty", description: "Up." },
  },
  {
    method: "GET",
    path: "/openapi.json",
    access: PUBLIC,
    handle: (req) => openApi(req, ROUTES),
    operationId: "openApiDescription",
    tag: "Health",
    summary: "This description",
    description:
      "The OpenAPI 3.1 description of the API, generated from the schemas the routes validate with. Needs no token.",
    answer: {
      kind: "raw",
      mediaType: "application/json",
      schema: { type: "object", description: "An OpenAPI 3.1 document." },
      description: "The description.",
    },
  },
  {
    method: "HEAD",
    path: "/openapi.json",
    access: PUBLIC,
    handle: (req) => openApi(req, ROUTES),
    operationId: "openApiDescriptionHead",
    tag: "Health",
    summary: "This description, headers only",
    answer: { kind: "empty", description: "The description's headers." },
  },
  {
    method: "GET",
    path: "/metrics",
    access: [A],
    handle: (req, env) => prometheusMetrics(env, account(req)),
    operationId: "prometheusMetrics",
    tag: "Figures",
    summary: "Every queue of the token's account, in Prometheus' text format",
    description:
      "Gauges read now from the storage shards and Coordinators; counters as the shards' heartbeats last reported them (docs/monitoring.md).",
    answer: {
      kind: "raw",
      mediaType: "text/plain",
      schema: { type: "string" },
      description: "The Prometheus text exposition format, version 0.0.4.",
    },
  },
  {
    method: "GET",
    path: `${ACCOUNT}/queues`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => listQueues(req.query, env, account(req)),
    operationId: "listQueues",
    tag: "Queues",
    summary: "List the account's queues",
    query: listQueuesQuery,
    description:
      "Queues by name, a page at a time: page (from 1) and per_page (1 to 100, default 20), as Cloudflare pages its lists. " +
      "name: only the queue of exactly that name, or none when the account has no queue of that name (wrangler resolves a queue name this way and takes the first queue listed). " +
      "name_prefix (shardq's own): only the queues whose name starts with it; empty means all. " +
      "Answered from the account's catalog alone, without asking each queue's Coordinator; a page past the last is empty.",
    answer: {
      kind: "envelope",
      status: 200,
      result: R.queueList,
      paged: true,
      description:
        "One page of queues; result_info: this page's number and size, count on it, total_count matching the filters, total_pages.",
    },
  },
  {
    method: "POST",
    path: `${ACCOUNT}/queues`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => createQueue(req, env, account(req)),
    operationId: "createQueue",
    tag: "Queues",
    summary: "Create a queue",
    description: "409 when the account already has a queue of that name.",
    body: { id: "CreateQueueRequest", schema: createQueueBody, required: true },
    answer: { kind: "envelope", status: 201, result: R.queueInfo, description: "The queue created." },
    errors: [409],
  },
  {
    method: "GET",
    path: QUEUE,
    access: [A],
    cloudflare: true,
    handle: (req, env) => getQueue(env, account(req), queueRef(req)),
    operationId: "getQueue",
    tag: "Queues",
    summary: "Read a queue",
    answer: ok(R.queueInfo, "The queue."),
  },
  {
    method: "PUT",
    path: QUEUE,
    access: [A],
    cloudflare: true,
    handle: (req, env) => replaceQueue(req, env, account(req), queueRef(req)),
    operationId: "replaceQueue",
    tag: "Queues",
    summary: "Replace a queue's settings",
    description:
      "Cloudflare's update, which takes no partial update: the queue's settings become those given, and any left out goes back to its default (delivery_delay 0, delivery_paused false, the default retention), as on a queue just created. " +
      "queue_name may be given but must not change: a queue cannot be renamed. A jurisdiction is refused (400): shardq does not place queues in one.",
    body: { id: "ReplaceQueueRequest", schema: replaceQueueBody, required: true },
    answer: ok(R.queueInfo, "The queue as it is now."),
  },
  {
    method: "PATCH",
    path: QUEUE,
    access: [A],
    cloudflare: true,
    handle: (req, env) => updateQueue(req, env, account(req), queueRef(req)),
    operationId: "updateQueue",
    tag: "Queues",
    summary: "Change a queue's settings",
    description:
      "Cloudflare's edit: only the settings given change. queue_name may be given but must not change: a queue cannot be renamed.",
    body: { id: "UpdateQueueRequest", schema: updateQueueBody, required: true },
    answer: ok(R.queueInfo, "The queue as it is now."),
  },
  {
    method: "DELETE",
    path: QUEUE,
    access: [A],
    cloudflare: true,
    handle: (req, env) => deleteQueue(env, account(req), queueRef(req)),
    operationId: "deleteQueue",
    tag: "Queues",
    summary: "Delete a queue and every message in it",
    description:
      "409 naming the consumer and the queue it consumes when the queue is some consumer's dead-letter queue: its messages out of retries would have nowhere to go. Remove that consumer or change its dead_letter_queue first.",
    answer: ok(R.nullResult, "Deleted."),
    errors: [409],
  },
  {
    method: "GET",
    path: `${QUEUE}/messages`,
    access: [A],
    handle: (req, env) => peekMessages(new URL(req.url), env, account(req), queueRef(req)),
    operationId: "peekMessages",
    tag: "Messages",
    summary: "Peek at ready messages, bodies included",
    description:
      "Oldest first over all shards, keyed messages (with their `ordering_key`) among them: those a consumer could be given now. Leases nothing and counts no attempt.",
    query: peekQuery,
    answer: ok(R.peekResult, "Up to `limit` ready messages."),
    errors: [503],
  },
  {
    method: "POST",
    path: `${QUEUE}/messages`,
    access: [S],
    cloudflare: true,
    handle: (req, env, ctx) => sendMessage(req, env, ctx, account(req), queueRef(req)),
    operationId: "sendMessage",
    tag: "Messages",
    summary: "Send one message",
    description:
      "Stored on a storage shard before the answer. With an Idempotency-Key header or an `id`, stored once however often the request is retried within 24 hours; " +
      "409 when the key or id was used for a different request, or while a request holding it is in progress (with Retry-After). " +
      "Ids are unique per queue, whoever chose them: an `id` the queue drew for another send (answered to a plain, keyed or Idempotency-Key send, consumed or not) is 409 naming `id`, unless it is that very message (same body, content type and ordering key): then 200 with the id, nothing stored. " +
      "A body is delivered as sent or refused (400 naming `body`): a text body with a lone surrogate (UTF-8 cannot carry it; inside a JSON string it travels escaped), " +
      "or a JSON number a double cannot hold as written (1e400, 1e-400, an integer such as 12345678901234567890 that would arrive as another): send such a number as a string.",
    idempotencyKey: true,
    body: { id: "SendMessageRequest", schema: httpMessage, required: true },
    answer: ok(R.sendResult, "Stored: the message's id, and the queue's figures."),
    errors: [409, 413, 503],
  },
  {
    method: "POST",
    path: `${QUEUE}/messages/batch`,
    access: [S],
    cloudflare: true,
    handle: (req, env, ctx) => sendBatch(req, env, ctx, account(req), queueRef(req)),
    operationId: "sendBatch",
    tag: "Messages",
    summary: "Send up to 100 messages, stored all together or not at all",
    description:
      "At most 100 messages and 256 KB of encoded bodies. Idempotent as POST .../messages is, by key and by each message's `id`. A body that could not be delivered as sent is refused as there (400 naming `messages[i].body`).",
    idempotencyKey: true,
    body: {
      id: "SendBatchRequest",
      schema: httpBatch,
      required: true,
      items: {
        messages: { id: "SendMessageRequest", schema: httpMessage, minItems: 1, maxItems: LIMITS.maxBatchMessages },
      },
    },
    answer: ok(R.batchResult, "Stored: the messages' ids in the request's order, and the queue's figures."),
    errors: [409, 413, 503],
  },
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
    answer: ok(R.pullResult, "The messages leased, each with its lease id."),
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
    answer: ok(R.cancelPullResult, "Whether a waiting pull was found."),
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
    answer: ok(R.ackResult, "What counted, and a warning for each lease id that did not."),
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
    answer: ok(R.extendResult, "How many leases were extended, and a warning for each that was not."),
  },
  {
    method: "POST",
    path: `${QUEUE}/messages/peek`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => peekByPost(req, env, account(req), queueRef(req)),
    operationId: "peekMessagesCloudflare",
    tag: "Messages",
    summary: "Peek at ready messages, as Cloudflare's API does",
    description:
      "GET .../messages in the shape of Cloudflare's peek: up to batch_size (default 10, at most 100) ready messages, oldest first over all shards, leasing nothing and counting no attempt. " +
      "Each carries a `ref` that POST .../messages/purge deletes it by. No body at all reads as `{}`.",
    body: { id: "PeekRequest", schema: peekBody, required: false },
    answer: ok(R.peekPostResult, "Up to `batch_size` ready messages, each with its ref."),
    errors: [503],
  },
  {
    method: "POST",
    path: `${QUEUE}/messages/purge`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => purgePeeked(req, env, account(req), queueRef(req)),
    operationId: "purgePeekedMessages",
    tag: "Messages",
    summary: "Delete peeked messages by their refs",
    description:
      "Cloudflare's purge of peeked messages: each message a ref names is deleted wherever it stands (ready, delayed or leased), as DELETE .../messages/{message_id} deletes one. " +
      "A ref that cannot be honoured (the message is gone, or it is not a ref a peek gave) is a warning under it, never a failed request.",
    body: { id: "PurgePeekedRequest", schema: purgePeekedBody, required: true },
    answer: ok(R.purgePeekedResult, "How many were deleted, and a warning for each ref that was not."),
    errors: [503],
  },
  {
    method: "GET",
    path: `${QUEUE}/messages/{message_id}`,
    access: [A],
    handle: (req, env) => withMessageId(req, (id) => lookupMessage(env, account(req), queueRef(req), id)),
    operationId: "getMessage",
    tag: "Messages",
    summary: "Look up a message by id",
    description: "Its state and figures, without its body; a message dead-lettered is found in the dead-letter queue.",
    answer: ok(R.messageStatus, "The message."),
    errors: [503],
  },
  {
    method: "DELETE",
    path: `${QUEUE}/messages/{message_id}`,
    access: [A],
    handle: (req, env) => withMessageId(req, (id) => cancelMessage(env, account(req), queueRef(req), id)),
    operationId: "cancelMessage",
    tag: "Messages",
    summary: "Cancel a message by id",
    answer: ok(R.cancelResult, "Deleted."),
    errors: [503],
  },
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
    answer: ok(R.purgeResult, "The queue, as Cloudflare's purge answers it, with how many were deleted."),
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
    answer: ok(R.purgeStatusResult, "The last purge."),
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
    answer: ok(R.redriveResult, "How many moved, and how many still match."),
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
    answer: ok(R.heldKeysResult, "The keys held back, with counts by reason."),
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
    answer: ok(R.releaseResult, "The message moved."),
    errors: [409],
  },
  {
    method: "GET",
    path: `${QUEUE}/metrics`,
    access: [S, C, A],
    cloudflare: true,
    handle: (req, env) => getMetrics(env, account(req), queueRef(req)),
    operationId: "getQueueMetrics",
    tag: "Figures",
    summary: "The queue's backlog, summed and per shard",
    answer: ok(R.queueMetrics, "The queue's figures."),
  },
  {
    method: "GET",
    path: `${QUEUE}/shards`,
    access: [A],
    handle: (req, env) => getShards(env, account(req), queueRef(req)),
    operationId: "getShards",
    tag: "Figures",
    summary: "The queue's control plane",
    answer: ok(R.shardsResult, "Shard map, heartbeats, consumer shards, decisions."),
  },
  {
    method: "GET",
    path: `${QUEUE}/series`,
    access: [A],
    handle: (req, env) => getSeries(env, account(req), queueRef(req)),
    operationId: "getSeries",
    tag: "Figures",
    summary: "The queue's last hour, a point per step",
    answer: ok(R.seriesResult, "Points, oldest first."),
  },
  {
    method: "GET",
    path: `${QUEUE}/consumers`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => listConsumers(env, account(req), queueRef(req)),
    operationId: "listConsumers",
    tag: "Consumers",
    summary: "The queue's consumers (at most one)",
    answer: ok(R.consumerList, "The consumers."),
  },
  {
    method: "POST",
    path: `${QUEUE}/consumers`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => createConsumer(req, env, account(req), queueRef(req)),
    operationId: "createConsumer",
    tag: "Consumers",
    summary: "Add the queue's consumer",
    description:
      "A worker consumer names, exactly, a Worker shardq has a service binding to (CONSUMER_<NAME>) for the caller's account (WORKER_CONSUMER_ACCOUNTS; unset: the local account only); any other name, or a Worker bound for other accounts only, is the same 400 naming script_name. 409 when the queue already has a consumer.",
    body: { id: "CreateConsumerRequest", schema: createConsumerBody, required: true },
    answer: { kind: "envelope", status: 201, result: R.consumer, description: "The consumer added." },
    errors: [409],
  },
  {
    method: "GET",
    path: `${QUEUE}/consumers/{consumer_id}`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => getConsumer(env, account(req), queueRef(req), param(req, "consumer_id")),
    operationId: "getConsumer",
    tag: "Consumers",
    summary: "Read a consumer",
    answer: ok(R.consumer, "The consumer."),
  },
  {
    method: "PUT",
    path: `${QUEUE}/consumers/{consumer_id}`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => replaceConsumer(req, env, account(req), queueRef(req), param(req, "consumer_id")),
    operationId: "replaceConsumer",
    tag: "Consumers",
    summary: "Replace the queue's consumer, or add it",
    description:
      "Cloudflare's update. Replaced (the path names the queue's consumer): its settings become those given over a new consumer's defaults (its transport stays), and no dead_letter_queue means none; type and script_name must not change. " +
      "Added (the queue has no consumer): under the id the path names, checked as POST .../consumers checks it, so the same PUT sent again replaces it; 201 then. " +
      "409 when the queue has another consumer: a queue has one.",
    body: { id: "ReplaceConsumerRequest", schema: replaceConsumerBody, required: true },
    answer: {
      kind: "envelope",
      status: 200,
      result: R.consumer,
      description: "Replaced: the consumer as it is now.",
      created: "Added: the consumer, under the id the path names.",
    },
    errors: [409],
  },
  {
    method: "PATCH",
    path: `${QUEUE}/consumers/{consumer_id}`,
    access: [A],
    handle: (req, env) => updateConsumer(req, env, account(req), queueRef(req), param(req, "consumer_id")),
    operationId: "updateConsumer",
    tag: "Consumers",
    summary: "Change a consumer's settings or dead-letter queue",
    description: "type and script_name may be given but must not change.",
    body: { id: "UpdateConsumerRequest", schema: updateConsumerBody, required: true },
    answer: ok(R.consumer, "The consumer as it is now."),
  },
  {
    method: "DELETE",
    path: `${QUEUE}/consumers/{consumer_id}`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => deleteConsumer(env, account(req), queueRef(req), param(req, "consumer_id")),
    operationId: "deleteConsumer",
    tag: "Consumers",
    summary: "Remove a consumer",
    answer: ok(R.nullResult, "Removed."),
  },
  ...(
    [
      ["GET", SUBSCRIPTIONS, "listEventSubscriptions", "List event subscriptions"],
      ["POST", SUBSCRIPTIONS, "createEventSubscription", "Create an event subscription"],
      ["GET", `${SUBSCRIPTIONS}/{subscription_id}`, "getEventSubscription", "Read an event subscription"],
      ["PATCH", `${SUBSCRIPTIONS}/{subscription_id}`, "updateEventSubscription", "Change an event subscription"],
      ["DELETE", `${SUBSCRIPTIONS}/{subscription_id}`, "deleteEventSubscription", "Delete an event subscription"],
    ] as const
  ).map(([method, path, operationId, summary]): Route => ({
    method,
    path,
    access: [A],
    cloudflare: true,
    handle: eventSubscriptions,
    operationId,
    tag: "Event subscriptions",
    summary,
    description:
      "Not served: 501. Cloudflare's event subscriptions deliver events of its own products (R2, KV, Workers AI, Workflows...) into a queue, and shardq has no such sources. Send such events from a Worker, through a producer binding or POST .../messages.",
    answer: { kind: "unsupported", description: "Never: every call answers 501." },
    errors: [501],
  })),
];

/** The token's account: the router has checked it is the one the path names. */
function account(req: ApiRequest): string {
  return req.principal.accountId;
}

function queueRef(req: ApiRequest): string {
  return param(req, "queue");
}

/** Verbs that share the shape of .../messages/{message_id} but are POST-only. */
const MESSAGE_VERBS = new Set(["batch", "pull", "ack", "extend", "peek", "purge"]);

/**
 * A GET or DELETE on .../messages/pull is not a lookup of a message named "pull". The path
 * check answers such a request 405 before any handler runs; returning nothing here keeps it
 * from ever being read as a message id, whatever the order of the router's routes.
 */
function withMessageId(req: ApiRequest, handle: (id: string) => Promise<Response>): Promise<Response> | undefined {
  const id = param(req, "message_id");
  return MESSAGE_VERBS.has(id) ? undefined : handle(id);
}
