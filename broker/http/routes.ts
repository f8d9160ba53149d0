/**
 * The route table, apart from the router that enforces it: the OpenAPI description
 * (broker/openapi/) reads each operation's scopes from here, so it imports no handler.
 */
import type { Scope } from "./auth";

/** The mark of the routes a request without a token may call: GET and HEAD /healthz and /openapi.json. */
export const PUBLIC = "public";

/** The token scopes a method of a route accepts, or PUBLIC: no token at all. */
export type Access = readonly Scope[] | typeof PUBLIC;

/**
 * One entry of ROUTES: a path pattern, the methods it takes with the scopes each accepts, and
 * which of those methods Cloudflare's REST API serves at that path too (its clients, the
 * `cloudflare` SDK and wrangler, call them: see docs/rest-api-clients.md).
 */
export type Route = readonly [pattern: RegExp, methods: Partial<Record<string, Access>>, cloudflare?: readonly string[]];

/**
 * Cloudflare's base path: `https://api.cloudflare.com/client/v4`. The API answers under it as
 * at the root, so a client made for Cloudflare (the SDK, wrangler) needs its host changed only.
 * The patterns of ROUTES are written from the root; apiPath() takes the base off first.
 */
export const CLOUDFLARE_BASE = "/client/v4";

/** The bases the API answers under: the root, and Cloudflare's. */
export const API_BASES: readonly string[] = ["", CLOUDFLARE_BASE];

/** A request's path as ROUTES reads it: without Cloudflare's base, when it has it. */
export function apiPath(pathname: string): string {
  return pathname.startsWith(`${CLOUDFLARE_BASE}/`) ? pathname.slice(CLOUDFLARE_BASE.length) : pathname;
}

/**
 * Every path the API knows, the methods it takes, and the token scopes each method
 * accepts (broker/http/auth.ts): the one place access is decided. Also tells a wrong method
 * (405) from a path that does not exist (404). The first pattern that matches answers.
 * Only /healthz and /openapi.json are PUBLIC (test/workers/healthz.test.ts fails if anything
 * else is): neither reads a binding nor says anything of an account.
 * The third element lists the methods Cloudflare's API serves there: on those a body that
 * parses as JSON is read as JSON whatever its content type says (wrangler sends its bodies as
 * text/plain), as Cloudflare reads it. That is safe because each needs a bearer token, which no
 * browser sends to another site without a CORS preflight first; every other route keeps
 * asking for application/json.
 */
const S = "send", C = "consume", A = "admin";
export const ROUTES: ReadonlyArray<Route> = [
  // Readiness probes: no token, no Durable Object, no KV, no rate limit (healthz in router.ts).
  [/^\/healthz\/?$/, { GET: PUBLIC, HEAD: PUBLIC }],
  // The API's description (broker/openapi/): the same for every caller, and what tools fetch before they hold a token.
  [/^\/openapi\.json$/, { GET: PUBLIC, HEAD: PUBLIC }],
  [/^\/metrics\/?$/, { GET: [A] }],
  [/^\/accounts\/[^/]+\/queues\/?$/, { GET: [A], POST: [A] }, ["GET", "POST"]],
  // PUT replaces the settings (Cloudflare's update), PATCH changes those given (its edit).
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/?$/, { GET: [A], PUT: [A], PATCH: [A], DELETE: [A] }, ["GET", "PUT", "PATCH", "DELETE"]],
  // GET peeks at bodies (the dashboard); POST sends.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/?$/, { GET: [A], POST: [S] }, ["POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/batch\/?$/, { POST: [S] }, ["POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/(?:pull|ack)\/?$/, { POST: [C] }, ["POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/extend\/?$/, { POST: [C] }],
  // A long poll's client went away: its wait ends, leasing nothing.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/pull\/cancel\/?$/, { POST: [C] }],
  // Cloudflare's peek (bodies, as GET .../messages gives them) and its purge of the messages a peek named.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/(?:peek|purge)\/?$/, { POST: [A] }, ["POST"]],
  // After the POST-only verbs above: a message looked up or cancelled by id.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/[^/]+\/?$/, { GET: [A], DELETE: [A] }],
  // POST purges; GET says how the last purge went (Cloudflare's purge status).
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/purge\/?$/, { GET: [A], POST: [A] }, ["GET", "POST"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/redrive\/?$/, { POST: [A] }],
  // Ordered lanes: the keys held back, and the release of one (docs/ordered-lanes.md).
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/ordering\/held\/?$/, { GET: [A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/ordering\/release\/?$/, { POST: [A] }],
  // The backlog, which the producer binding's metrics() also gives producers.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/metrics\/?$/, { GET: [S, C, A] }, ["GET"]],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/(?:shards|series)\/?$/, { GET: [A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/consumers\/?$/, { GET: [A], POST: [A] }, ["GET", "POST"]],
  // PUT replaces the consumer's settings (Cloudflare's update); PATCH, shardq's own, changes those given.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/consumers\/[^/]+\/?$/, { GET: [A], PUT: [A], PATCH: [A], DELETE: [A] }, ["GET", "PUT", "DELETE"]],
  // Cloudflare's event subscriptions (events of R2, KV, Workers AI... into a queue): shardq
  // has no such sources, so each answers 501 saying so (broker/http/event-subscriptions.ts).
  [/^\/accounts\/[^/]+\/event_subscriptions\/subscriptions\/?$/, { GET: [A], POST: [A] }, ["GET", "POST"]],
  [/^\/accounts\/[^/]+\/event_subscriptions\/subscriptions\/[^/]+\/?$/, { GET: [A], PATCH: [A], DELETE: [A] }, ["GET", "PATCH", "DELETE"]],
];

/** The entry of ROUTES that answers `path` (a path apiPath() gave): the first whose pattern matches, as the router picks it. */
export function routeFor(path: string): Route | undefined {
  return ROUTES.find(([pattern]) => pattern.test(path));
}

/** Whether Cloudflare's API serves `method` on `route`: its clients' bodies are then read as JSON whatever their content type. */
export function servedByCloudflare(route: Route, method: string): boolean {
  return route[2]?.includes(method) ?? false;
}
