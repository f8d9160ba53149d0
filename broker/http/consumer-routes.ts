/** The routes on a queue's consumer (./route-table.ts): a Worker, or pull over HTTP. */
import { consumer, consumerList, nullResult } from "../openapi/queue-results";
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
import { param, type Route } from "./route";
import { A, account, ok, QUEUE, queueRef } from "./route-kit";

export const CONSUMER_ROUTES: readonly Route[] = [
  {
    method: "GET",
    path: `${QUEUE}/consumers`,
    access: [A],
    cloudflare: true,
    handle: (req, env) => listConsumers(env, account(req), queueRef(req)),
    operationId: "listConsumers",
    tag: "Consumers",
    summary: "The queue's consumers (at most one)",
    answer: ok(consumerList, "The consumers."),
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
    answer: { kind: "envelope", status: 201, result: consumer, description: "The consumer added." },
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
    answer: ok(consumer, "The consumer."),
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
      result: consumer,
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
    answer: ok(consumer, "The consumer as it is now."),
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
    answer: ok(nullResult, "Removed."),
  },
];
