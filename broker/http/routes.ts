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
 * Every path the API knows, the methods it takes, and the token scopes each method
 * accepts (broker/http/auth.ts): the one place access is decided. Also tells a wrong method
 * (405) from a path that does not exist (404). The first pattern that matches answers.
 * Only /healthz and /openapi.json are PUBLIC (test/workers/healthz.test.ts fails if anything
 * else is): neither reads a binding nor says anything of an account.
 */
const S = "send", C = "consume", A = "admin";
export const ROUTES: ReadonlyArray<[RegExp, Partial<Record<string, Access>>]> = [
  // Readiness probes: no token, no Durable Object, no KV, no rate limit (healthz in router.ts).
  [/^\/healthz\/?$/, { GET: PUBLIC, HEAD: PUBLIC }],
  // The API's description (broker/openapi/): the same for every caller, and what tools fetch before they hold a token.
  [/^\/openapi\.json$/, { GET: PUBLIC, HEAD: PUBLIC }],
  [/^\/metrics\/?$/, { GET: [A] }],
  [/^\/accounts\/[^/]+\/queues\/?$/, { GET: [A], POST: [A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/?$/, { GET: [A], PATCH: [A], DELETE: [A] }],
  // GET peeks at bodies (the dashboard); POST sends.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/?$/, { GET: [A], POST: [S] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/batch\/?$/, { POST: [S] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/(?:pull|ack|extend)\/?$/, { POST: [C] }],
  // A long poll's client went away: its wait ends, leasing nothing.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/pull\/cancel\/?$/, { POST: [C] }],
  // After the POST-only verbs above: a message looked up or cancelled by id.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/messages\/[^/]+\/?$/, { GET: [A], DELETE: [A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/(?:purge|redrive)\/?$/, { POST: [A] }],
  // Ordered lanes: the keys held back, and the release of one (docs/ordered-lanes.md).
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/ordering\/held\/?$/, { GET: [A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/ordering\/release\/?$/, { POST: [A] }],
  // The backlog, which the producer binding's metrics() also gives producers.
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/metrics\/?$/, { GET: [S, C, A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/(?:shards|series)\/?$/, { GET: [A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/consumers\/?$/, { GET: [A], POST: [A] }],
  [/^\/accounts\/[^/]+\/queues\/[^/]+\/consumers\/[^/]+\/?$/, { GET: [A], PATCH: [A], DELETE: [A] }],
];

/** The entry of ROUTES that answers `path`: the first whose pattern matches, as the router picks it. */
export function routeFor(path: string): [RegExp, Partial<Record<string, Access>>] | undefined {
  return ROUTES.find(([pattern]) => pattern.test(path));
}
