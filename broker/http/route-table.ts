/**
 * Every route of the HTTP API, each declared once: its method and path, the token scopes it
 * accepts, its handler, and what it takes (the very schemas its handler parses with) and
 * answers (broker/openapi/*-results.ts). The router registers these routes under each
 * base (./router.ts), its check reads their access by path (./path-access.ts), and GET
 * /openapi.json describes them (broker/openapi/document.ts). Adding a route is adding an
 * entry to its group (./queue-routes.ts, ./message-routes.ts, ./pull-routes.ts,
 * ./operation-routes.ts, ./figure-routes.ts, ./consumer-routes.ts,
 * ./event-subscription-routes.ts); test/workers/scopes.test.ts then calls it with every kind
 * of token.
 *
 * Only /healthz and /openapi.json are PUBLIC (test/workers/healthz.test.ts fails if anything
 * else is): neither reads a binding nor says anything of an account. They are declared here,
 * beside ROUTES, because GET /openapi.json describes ROUTES itself. The fault harness's
 * test-hook routes are not here: they exist only in a build with SHARDQ_TEST_HOOKS on, never
 * in one users run, and are left out of the description (./test-hooks-api.ts).
 */
import { healthResult } from "../openapi/envelope-schemas";
import { CONSUMER_ROUTES } from "./consumer-routes";
import { EVENT_SUBSCRIPTION_ROUTES } from "./event-subscription-routes";
import { FIGURE_ROUTES } from "./figure-routes";
import { MESSAGE_ROUTES } from "./message-routes";
import { OPERATION_ROUTES } from "./operation-routes";
import { healthz, openApi } from "./public-api";
import { PULL_ROUTES } from "./pull-routes";
import { QUEUE_ROUTES } from "./queue-routes";
import { PUBLIC, type Route } from "./route";
import { ok } from "./route-kit";

const PUBLIC_ROUTES: readonly Route[] = [
  {
    method: "GET",
    path: "/healthz",
    access: PUBLIC,
    handle: healthz,
    operationId: "health",
    tag: "Health",
    summary: "Readiness probe",
    description: "200 from a Worker that is up and routing. Reads no binding and needs no token; never cached.",
    answer: ok(healthResult, "Up."),
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
];

export const ROUTES: readonly Route[] = [
  ...PUBLIC_ROUTES,
  ...QUEUE_ROUTES,
  ...MESSAGE_ROUTES,
  ...PULL_ROUTES,
  ...OPERATION_ROUTES,
  ...FIGURE_ROUTES,
  ...CONSUMER_ROUTES,
  ...EVENT_SUBSCRIPTION_ROUTES,
];
