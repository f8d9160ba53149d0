/**
 * The two routes a request without a token may call (PUBLIC in the route table): neither
 * reads a binding nor says anything of an account.
 */
import { openApiJson } from "../openapi/document";
import type { ApiRequest, Route } from "./route";

/** What GET /healthz answers: the API's envelope, so every JSON answer has one shape. */
const HEALTHY = JSON.stringify({ success: true, errors: [], messages: [], result: { ok: true } });

/**
 * GET and HEAD /healthz, for readiness probes: 200 from a Worker that is up and routing.
 * Reads no binding (no Durable Object, KV or rate limiter) and says nothing about the
 * service's internals; never cached, so a probe never gets a stale answer.
 */
export function healthz(request: ApiRequest): Response {
  const headers = { "content-type": "application/json", "cache-control": "no-store" };
  return new Response(request.method === "HEAD" ? null : HEALTHY, { status: 200, headers });
}

/**
 * GET and HEAD /openapi.json: the description of `routes`. Built on the first call and kept
 * for the isolate's life: it changes only with a new deployment, and building it converts every schema.
 */
export function openApi(request: ApiRequest, routes: readonly Route[]): Response {
  const headers = { "content-type": "application/json", "cache-control": "public, max-age=300" };
  return new Response(request.method === "HEAD" ? null : openApiJson(routes), { status: 200, headers });
}
