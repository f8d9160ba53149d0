import { Router } from "itty-router/Router";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import { QUEUE_ID_PATTERN } from "../../src/kernel/ids";
import { QUEUE_NAME_PATTERN } from "../../src/kernel/settings";
import { authenticate, authorize } from "./auth";
import { accessFor, servedByCloudflare, type PathAccess } from "./path-access";
import { enforceRateLimits } from "./rate-limit";
import { errorResponse } from "./envelope";
import { acceptAnyContentType } from "./read-json";
import { API_BASES, apiPath, param, PUBLIC, type Access, type ApiRequest } from "./route";
import { ROUTES } from "./route-table";
import { testHook, testHookRequests, testHookRoutes } from "./test-hooks-api";

type Args = [Env, ExecutionContext];

/**
 * The broker's HTTP API: Cloudflare's REST paths and envelope, at the root and under
 * Cloudflare's base path /client/v4 alike (API_BASES). Every route but the
 * PUBLIC /healthz and /openapi.json needs a bearer token (401), holding a scope the route accepts (403, whatever the queue);
 * then the account's and the queue's request rates are counted (429). A token only
 * reaches its own account, and another account's paths answer 404 exactly as a queue
 * that does not exist would. The routes and their access come from one table, ROUTES
 * (./route-table.ts), so no handler is reachable without the scope check its entry names.
 */
export const router = Router<ApiRequest, Args>({
  before: [
    async (request, env) => {
      const pathname = new URL(request.url).pathname;
      const path = apiPath(pathname);
      const entry = pathOf(path, env);
      const access = routeAccess(request.method, pathname, entry);
      if (access === PUBLIC) return; // nothing read from the request but its method and path
      // A token first, so that without one every other path and method answers 401 alike.
      request.principal = await authenticate(request, env);
      if (access instanceof HttpError) throw access;
      authorize(request.principal, access, request.method, pathname);
      await enforceRateLimits(env, request.principal.accountId, queueInPath(path));
      if (entry && servedByCloudflare(entry, request.method)) acceptAnyContentType(request);
    },
  ],
  catch: errorResponse,
});

for (const base of API_BASES) addRoutes(base);
// Past the check yet taken by no handler (a handler that returned nothing): answer rather than hang.
router.all("*", (req) => {
  throw new HttpError("not_found", `no route for ${req.method} ${new URL(req.url).pathname}`);
});

/** Every route of ROUTES, under one base path ("" or /client/v4). */
function addRoutes(base: string): void {
  const ACCOUNT = `${base}/accounts/:account_id`;
  const QUEUE = `${ACCOUNT}/queues/:queue`;
  // Before the account's routes: a path naming another account answers 404, whatever comes after it.
  router.all(`${ACCOUNT}/*`, (request) => {
    if (param(request, "account_id") !== request.principal.accountId) {
      throw new HttpError("not_found", "account not found", "account_id");
    }
  });
  for (const route of ROUTES) {
    const path = base + route.path.replace(/\{(\w+)\}/g, ":$1");
    router[route.method.toLowerCase() as Lowercase<typeof route.method>](path, route.handle);
  }
  // The fault harness's hooks: routed only when SHARDQ_TEST_HOOKS is "on" (broker/http/test-hooks-api.ts).
  router
    .all(`${QUEUE}/test-hooks`, (req, env) => testHook(req, env, req.principal.accountId, param(req, "queue")))
    .get(`${ACCOUNT}/test-hooks/requests`, (req, env) => testHookRequests(req, env));
}

/** The entry of PATHS (or of the test hooks' routes) that answers `path`, a path apiPath() gave. */
function pathOf(path: string, env: Env): PathAccess | undefined {
  return accessFor(path) ?? testHookRoutes(env).find(([pattern]) => pattern.test(path));
}

/**
 * Who may call `method` on the path: PUBLIC, or the scopes that may. The 405 for a known path
 * with another method, or 404 for an unknown path, is returned rather than thrown: it is
 * answered only to a valid token (without one, 401 like every other route).
 */
function routeAccess(method: string, path: string, entry: PathAccess | undefined): Access | HttpError {
  if (!entry) return new HttpError("not_found", `no route for ${method} ${path}`);
  const accepted = entry[1][method];
  if (!accepted)
    return new HttpError(
      "method_not_allowed",
      `${method} is not allowed on ${path}; use ${Object.keys(entry[1]).join(" or ")}`,
    );
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
