/** The routes that create, read, change and delete an account's queues (./route-table.ts). */
import { nullResult, queueInfo, queueList } from "../openapi/queue-results";
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
import type { Route } from "./route";
import { A, account, ACCOUNT, ok, QUEUE, queueRef } from "./route-kit";

export const QUEUE_ROUTES: readonly Route[] = [
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
      result: queueList,
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
    answer: { kind: "envelope", status: 201, result: queueInfo, description: "The queue created." },
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
    answer: ok(queueInfo, "The queue."),
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
    answer: ok(queueInfo, "The queue as it is now."),
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
    answer: ok(queueInfo, "The queue as it is now."),
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
    answer: ok(nullResult, "Deleted."),
    errors: [409],
  },
];
