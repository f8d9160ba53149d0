import type { IRequest } from "itty-router";
import { Router } from "itty-router/Router";
import type { Env } from "../src/env";
import { HttpError } from "../src/errors";
import { authenticate, type Principal } from "./auth";
import { errorResponse } from "./envelope";
import { getMetrics, sendBatch, sendMessage } from "./messages-api";
import { prometheusMetrics } from "./prometheus-api";
import { getShards } from "./shards-api";
import { createConsumer, deleteConsumer, getConsumer, listConsumers, updateConsumer } from "./consumers-api";
import { createQueue, deleteQueue, getQueue, listQueues, updateQueue } from "./queues-api";
import { ackMessages, extendLeases, pullMessages } from "./pull-api";
import { cancelMessage, lookupMessage, purgeQueue } from "./operations-api";
import { redriveQueue } from "./redrive";
import { getSeries, peekMessages } from "./dashboard-api";

type ApiRequest = IRequest & { principal: Principal };
type Args = [Env, ExecutionContext];

const QUEUE = "/accounts/:account_id/queues/:queue";

/**
 * The broker's HTTP API: Cloudflare's REST paths and envelope. Every route needs a
 * bearer token; a token only reaches its own account, and another account's paths
 * answer 404 exactly as a queue that does not exist would.
 */
export const router = Router<ApiRequest, Args>({
  before: [
    async (request, env) => {
      request.principal = await authenticate(request, env);
    },
  ],
  catch: errorResponse,
});

router
  // Prometheus scrapes: the token's account's queues (broker/prometheus-api.ts).
  .get("/metrics", (req, env) => prometheusMetrics(env, req.principal.accountId))
  .all("/accounts/:account_id/*", (request) => {
    if (param(request, "account_id") !== request.principal.accountId) {
      throw new HttpError("not_found", "account not found", "account_id");
    }
  })
  .post("/accounts/:account_id/queues", (req, env) => createQueue(req, env, req.principal.accountId))
  .get("/accounts/:account_id/queues", (req, env) => listQueues(req.query, env, req.principal.accountId))
  .get(QUEUE, (req, env) => getQueue(env, req.principal.accountId, queueRef(req)))
  .patch(QUEUE, (req, env) => updateQueue(req, env, req.principal.accountId, queueRef(req)))
  .delete(QUEUE, (req, env) => deleteQueue(env, req.principal.accountId, queueRef(req)))
  .get(`${QUEUE}/messages`, (req, env) => peekMessages(new URL(req.url), env, req.principal.accountId, queueRef(req)))
  .post(`${QUEUE}/messages`, (req, env, ctx) => sendMessage(req, env, ctx, req.principal.accountId, queueRef(req)))
  .post(`${QUEUE}/messages/batch`, (req, env, ctx) => sendBatch(req, env, ctx, req.principal.accountId, queueRef(req)))
  .post(`${QUEUE}/messages/pull`, (req, env) => pullMessages(req, env, req.principal.accountId, queueRef(req)))
  .post(`${QUEUE}/messages/ack`, (req, env) => ackMessages(req, env, req.principal.accountId, queueRef(req)))
  .post(`${QUEUE}/messages/extend`, (req, env) => extendLeases(req, env, req.principal.accountId, queueRef(req)))
  .get(`${QUEUE}/messages/:message_id`, (req, env) => withMessageId(req, (id) => lookupMessage(env, req.principal.accountId, queueRef(req), id)))
  .delete(`${QUEUE}/messages/:message_id`, (req, env) => withMessageId(req, (id) => cancelMessage(env, req.principal.accountId, queueRef(req), id)))
  .post(`${QUEUE}/purge`, (req, env) => purgeQueue(req, env, req.principal.accountId, queueRef(req)))
  .post(`${QUEUE}/redrive`, (req, env) => redriveQueue(req, env, req.principal.accountId, queueRef(req)))
  .get(`${QUEUE}/metrics`, (req, env) => getMetrics(env, req.principal.accountId, queueRef(req)))
  .get(`${QUEUE}/shards`, (req, env) => getShards(env, req.principal.accountId, queueRef(req)))
  .get(`${QUEUE}/series`, (req, env) => getSeries(env, req.principal.accountId, queueRef(req)))
  .post(`${QUEUE}/consumers`, (req, env) => createConsumer(req, env, req.principal.accountId, queueRef(req)))
  .get(`${QUEUE}/consumers`, (req, env) => listConsumers(env, req.principal.accountId, queueRef(req)))
  .get(`${QUEUE}/consumers/:consumer_id`, (req, env) => getConsumer(env, req.principal.accountId, queueRef(req), param(req, "consumer_id")))
  .patch(`${QUEUE}/consumers/:consumer_id`, (req, env) => updateConsumer(req, env, req.principal.accountId, queueRef(req), param(req, "consumer_id")))
  .delete(`${QUEUE}/consumers/:consumer_id`, (req, env) => deleteConsumer(env, req.principal.accountId, queueRef(req), param(req, "consumer_id")))
  .all("*", (req) => {
    const path = new URL(req.url).pathname;
    const allowed = ROUTES.find(([pattern]) => pattern.test(path))?.[1];
    if (allowed) throw new HttpError("method_not_allowed", `${req.method} is not allowed on ${path}; use ${allowed.join(" or ")}`);
    throw new HttpError("not_found", `no route for ${req.method} ${path}`);
  });

/** Known paths and their methods, to tell "wrong method" (405) from "no such path" (404). */
const ROUTES: Array<[RegExp, string[]]> = [
  [/^\/metrics\/?$/, ["GET"]],
  [/^\/accounts\/[^/]+\/queues\/?$/, ["GET", "POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/?$/, ["GET", "PATCH", "DELETE"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/?$/, ["GET", "POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/batch\/?$/, ["POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/(?:pull|ack|extend)\/?$/, ["POST"]],
  // After the POST-only verbs above: the first pattern that matches answers.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/[^/]+\/?$/, ["GET", "DELETE"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/(?:purge|redrive)\/?$/, ["POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/metrics\/?$/, ["GET"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/(?:shards|series)\/?$/, ["GET"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/consumers\/?$/, ["GET", "POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/consumers\/[^/]+\/?$/, ["GET", "PATCH", "DELETE"]],
];

/** Verbs that share the shape of .../messages/:message_id but are POST-only. */
const MESSAGE_VERBS = new Set(["batch", "pull", "ack", "extend"]);

/**
 * A GET or DELETE on .../messages/pull is not a lookup of a message named "pull":
 * returning nothing lets the request fall through to the 405 that names POST.
 */
function withMessageId(req: ApiRequest, handle: (id: string) => Promise<Response>): Promise<Response> | undefined {
  const id = param(req, "message_id");
  return MESSAGE_VERBS.has(id) ? undefined : handle(id);
}

function queueRef(req: ApiRequest): string {
  return param(req, "queue");
}

function param(req: ApiRequest, name: string): string {
  try {
    return decodeURIComponent(req.params[name]!);
  } catch {
    throw HttpError.invalid(name, "is not a valid URL path segment");
  }
}
