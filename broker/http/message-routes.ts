/**
 * The routes on a queue's messages (./route-table.ts): sending, peeking, and looking up or
 * cancelling one by id. Pull consumers' routes are ./pull-routes.ts.
 */
import { LIMITS } from "../../src/kernel/limits";
import { httpBatch, httpMessage } from "../../src/routing/pending-messages";
import {
  batchResult,
  cancelResult,
  messageStatus,
  peekPostResult,
  peekResult,
  purgePeekedResult,
  sendResult,
} from "../openapi/message-results";
import { peekBody, peekByPost, peekMessages, peekQuery, purgePeeked, purgePeekedBody } from "./dashboard-api";
import { sendBatch, sendMessage } from "./messages-api";
import { cancelMessage, lookupMessage } from "./operations-api";
import { param, type ApiRequest, type Route } from "./route";
import { A, account, ok, QUEUE, queueRef, S } from "./route-kit";

export const MESSAGE_ROUTES: readonly Route[] = [
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
    answer: ok(peekResult, "Up to `limit` ready messages."),
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
    answer: ok(sendResult, "Stored: the message's id, and the queue's figures."),
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
    answer: ok(batchResult, "Stored: the messages' ids in the request's order, and the queue's figures."),
    errors: [409, 413, 503],
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
    answer: ok(peekPostResult, "Up to `batch_size` ready messages, each with its ref."),
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
    answer: ok(purgePeekedResult, "How many were deleted, and a warning for each ref that was not."),
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
    answer: ok(messageStatus, "The message."),
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
    answer: ok(cancelResult, "Deleted."),
    errors: [503],
  },
];

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
