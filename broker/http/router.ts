import type { IRequest } from "itty-router";
import { Router } from "itty-router/Router";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import { QUEUE_ID_PATTERN } from "../../src/kernel/ids";
import { QUEUE_NAME_PATTERN } from "../../src/kernel/settings";
import { authenticate, authorize, type Principal } from "./auth";
import { API_BASES, apiPath, PUBLIC, routeFor, servedByCloudflare, type Access, type Route } from "./routes";
import { enforceRateLimits } from "./rate-limit";
import { errorResponse } from "./envelope";
import { getMetrics, sendBatch, sendMessage } from "./messages-api";
import { prometheusMetrics } from "../metrics/prometheus-api";
import { getShards } from "./shards-api";
import { createConsumer, deleteConsumer, getConsumer, listConsumers, replaceConsumer, updateConsumer } from "./consumers-api";
import { createQueue, deleteQueue, getQueue, listQueues, replaceQueue, updateQueue } from "./queues-api";
import { ackMessages, cancelPull, extendLeases, pullMessages } from "./pull-api";
import { cancelMessage, lookupMessage, purgeQueue, purgeStatus } from "./operations-api";
import { redriveQueue } from "./redrive";
import { listHeldKeys, releaseKey } from "./ordering-api";
import { getSeries, peekByPost, peekMessages, purgePeeked } from "./dashboard-api";
import { eventSubscriptions } from "./event-subscriptions";
import { acceptAnyContentType } from "./read-json";
import { testHook, testHookRequests, testHookRoutes } from "./test-hooks-api";
import { openApiJson } from "../openapi/document";

type ApiRequest = IRequest & { principal: Principal };
type Args = [Env, ExecutionContext];

/**
 * The broker's HTTP API: Cloudflare's REST paths and envelope, at the root and under
 * Cloudflare's base path /client/v4 alike (API_BASES). Every route but the
 * PUBLIC /healthz and /openapi.json needs a bearer token (401), holding a scope the route accepts (403, whatever the queue);
 * then the account's and the queue's request rates are counted (429). A token only
 * reaches its own account, and another account's paths answer 404 exactly as a queue
 * that does not exist would. Only what ROUTES (./routes.ts) lists reaches a handler, so a handler
 * the table forgot cannot be reached without a scope check: it answers 404 or 405.
 */
export const router = Router<ApiRequest, Args>({
  before: [
    async (request, env) => {
      const pathname = new URL(request.url).pathname;
      const path = apiPath(pathname);
      const route = routeOf(path, env);
      const access = routeAccess(request.method, pathname, route);
      if (access === PUBLIC) return; // nothing read from the request but its method and path
      // A token first, so that without one every other path and method answers 401 alike.
      request.principal = await authenticate(request, env);
      if (access instanceof HttpError) throw access;
      authorize(request.principal, access, request.method, pathname);
      await enforceRateLimits(env, request.principal.accountId, queueInPath(path));
      if (route && servedByCloudflare(route, request.method)) acceptAnyContentType(request);
    },
  ],
  catch: errorResponse,
});

for (const base of API_BASES) addRoutes(base);
// Listed in ROUTES yet taken by no handler: the two disagree; answer rather than hang.
router.all("*", (req) => {
  throw new HttpError("not_found", `no route for ${req.method} ${new URL(req.url).pathname}`);
});

/** Every handler, under one base path ("" or /client/v4). */
function addRoutes(base: string): void {
  const ACCOUNT = `${base}/accounts/:account_id`;
  const QUEUE = `${ACCOUNT}/queues/:queue`;
  const CONSUMER = `${QUEUE}/consumers/:consumer_id`;
  const SUBSCRIPTIONS = `${ACCOUNT}/event_subscriptions/subscriptions`;
  router
    // Readiness probes (PUBLIC in ROUTES): before the /accounts handlers, which need a principal.
    .get(`${base}/healthz`, healthz)
    .head(`${base}/healthz`, healthz)
    // The API's OpenAPI description (PUBLIC too): built from the handlers' schemas (broker/openapi/).
    .get(`${base}/openapi.json`, openApi)
    .head(`${base}/openapi.json`, openApi)
    // Prometheus scrapes: the token's account's queues (broker/metrics/prometheus-api.ts).
    .get(`${base}/metrics`, (req, env) => prometheusMetrics(env, req.principal.accountId))
    .all(`${ACCOUNT}/*`, (request) => {
      if (param(request, "account_id") !== request.principal.accountId) {
        throw new HttpError("not_found", "account not found", "account_id");
      }
    })
    .post(`${ACCOUNT}/queues`, (req, env) => createQueue(req, env, req.principal.accountId))
    .get(`${ACCOUNT}/queues`, (req, env) => listQueues(req.query, env, req.principal.accountId))
    .get(QUEUE, (req, env) => getQueue(env, req.principal.accountId, queueRef(req)))
    .put(QUEUE, (req, env) => replaceQueue(req, env, req.principal.accountId, queueRef(req)))
    .patch(QUEUE, (req, env) => updateQueue(req, env, req.principal.accountId, queueRef(req)))
    .delete(QUEUE, (req, env) => deleteQueue(env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/messages`, (req, env) => peekMessages(new URL(req.url), env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/messages`, (req, env, ctx) => sendMessage(req, env, ctx, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/messages/batch`, (req, env, ctx) => sendBatch(req, env, ctx, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/messages/pull`, (req, env, ctx) => pullMessages(req, env, ctx, req.principal.accountId, queueRef(req), req.principal.tokenId))
    .post(`${QUEUE}/messages/pull/cancel`, (req, env) => cancelPull(req, env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/messages/ack`, (req, env) => ackMessages(req, env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/messages/extend`, (req, env) => extendLeases(req, env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/messages/peek`, (req, env) => peekByPost(req, env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/messages/purge`, (req, env) => purgePeeked(req, env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/messages/:message_id`, (req, env) => withMessageId(req, (id) => lookupMessage(env, req.principal.accountId, queueRef(req), id)))
    .delete(`${QUEUE}/messages/:message_id`, (req, env) => withMessageId(req, (id) => cancelMessage(env, req.principal.accountId, queueRef(req), id)))
    .post(`${QUEUE}/purge`, (req, env) => purgeQueue(req, env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/purge`, (req, env) => purgeStatus(env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/redrive`, (req, env) => redriveQueue(req, env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/ordering/held`, (req, env) => listHeldKeys(req, env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/ordering/release`, (req, env) => releaseKey(req, env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/metrics`, (req, env) => getMetrics(env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/shards`, (req, env) => getShards(env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/series`, (req, env) => getSeries(env, req.principal.accountId, queueRef(req)))
    .post(`${QUEUE}/consumers`, (req, env) => createConsumer(req, env, req.principal.accountId, queueRef(req)))
    .get(`${QUEUE}/consumers`, (req, env) => listConsumers(env, req.principal.accountId, queueRef(req)))
    .get(CONSUMER, (req, env) => getConsumer(env, req.principal.accountId, queueRef(req), param(req, "consumer_id")))
    .put(CONSUMER, (req, env) => replaceConsumer(req, env, req.principal.accountId, queueRef(req), param(req, "consumer_id")))
    .patch(CONSUMER, (req, env) => updateConsumer(req, env, req.principal.accountId, queueRef(req), param(req, "consumer_id")))
    .delete(CONSUMER, (req, env) => deleteConsumer(env, req.principal.accountId, queueRef(req), param(req, "consumer_id")))
    // Cloudflare's event subscriptions: each a 501 that says shardq has no event sources.
    .all(SUBSCRIPTIONS, (req) => eventSubscriptions(req))
    .all(`${SUBSCRIPTIONS}/:subscription_id`, (req) => eventSubscriptions(req))
    // The fault harness's hooks: routed only when SHARDQ_TEST_HOOKS is "on" (broker/http/test-hooks-api.ts).
    .all(`${QUEUE}/test-hooks`, (req, env) => testHook(req, env, req.principal.accountId, queueRef(req)))
    .get(`${ACCOUNT}/test-hooks/requests`, (req, env) => testHookRequests(req, env));
}

/** The entry of ROUTES (or of the test hooks' routes) that answers `path`, a path apiPath() gave. */
function routeOf(path: string, env: Env): Route | undefined {
  return routeFor(path) ?? testHookRoutes(env).find(([pattern]) => pattern.test(path));
}

/**
 * Who may call `method` on the route: PUBLIC, or the scopes that may. The 405 for a known path
 * with another method, or 404 for an unknown path, is returned rather than thrown: it is
 * answered only to a valid token (without one, 401 like every other route).
 */
function routeAccess(method: string, path: string, route: Route | undefined): Access | HttpError {
  if (!route) return new HttpError("not_found", `no route for ${method} ${path}`);
  const accepted = route[1][method];
  if (!accepted) return new HttpError("method_not_allowed", `${method} is not allowed on ${path}; use ${Object.keys(route[1]).join(" or ")}`);
  return accepted;
}

/** The queue a path (without Cloudflare's base) names, when it names one that could exist (the per-queue rate limit's key). */
function queueInPath(path: string): string | undefined {
  const raw = /^\/accounts\/[^/]+\/queues\/([^/]+)/.exec(path)?.[1];
  if (raw === undefined) return undefined;
  try {
    const ref = decodeURIComponent(raw);
    return QUEUE_NAME_PATTERN.test(ref) || QUEUE_ID_PATTERN.test(ref) ? ref : undefined;
  } catch {
    return undefined;
  }
}

/** What GET /healthz answers: the API's envelope, so every JSON answer has one shape. */
const HEALTHY = JSON.stringify({ success: true, errors: [], messages: [], result: { ok: true } });

/**
 * GET and HEAD /healthz, for readiness probes: 200 from a Worker that is up and routing.
 * Reads no binding (no Durable Object, KV or rate limiter) and says nothing about the
 * service's internals; never cached, so a probe never gets a stale answer.
 */
function healthz(request: ApiRequest): Response {
  const headers = { "content-type": "application/json", "cache-control": "no-store" };
  return new Response(request.method === "HEAD" ? null : HEALTHY, { status: 200, headers });
}

/**
 * GET and HEAD /openapi.json. The document is built on the first call and kept for the
 * isolate's life: it changes only with a new deployment, and building it converts every schema.
 */
function openApi(request: ApiRequest): Response {
  const headers = { "content-type": "application/json", "cache-control": "public, max-age=300" };
  return new Response(request.method === "HEAD" ? null : openApiJson(), { status: 200, headers });
}

/** Verbs that share the shape of .../messages/:message_id but are POST-only. */
const MESSAGE_VERBS = new Set(["batch", "pull", "ack", "extend", "peek", "purge"]);

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
