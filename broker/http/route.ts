/**
 * What one route of the API declares: its method and path, who may call it, its handler,
 * and what it takes and answers as the OpenAPI description tells it. The table of them is
 * ROUTES in ./route-table.ts; the router, the scope check (./path-access.ts) and the
 * description (broker/openapi/document.ts) are all read from it. The table's types, the bases
 * the API answers under and how a path segment is read live here, apart from the table, so the
 * description's builder can import them without the table (which imports it for GET /openapi.json).
 */
import type { IRequest } from "itty-router";
import type { z } from "zod";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import type { Principal, Scope } from "./auth";

/** The mark of the routes a request without a token may call: GET and HEAD /healthz and /openapi.json. */
export const PUBLIC = "public";

/** The token scopes a route accepts (any one suffices), or PUBLIC: no token at all. */
export type Access = readonly Scope[] | typeof PUBLIC;

export type Method = "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE";

/** A request past the router's checks: its token's principal is known (absent on PUBLIC routes). */
export type ApiRequest = IRequest & { principal: Principal };

/** Returning nothing lets the router try the next route that matches (./message-routes.ts, withMessageId). */
export type Handler = (
  request: ApiRequest,
  env: Env,
  ctx: ExecutionContext,
) => Response | undefined | Promise<Response | undefined>;

/** Statuses an operation may answer beyond those every operation of its kind does (broker/openapi/document.ts, errorsOf). */
export type ExtraError = 409 | 413 | 501 | 503;

export interface RequestBody {
  /** Its name among the description's schemas. */
  id: string;
  schema: z.ZodType;
  /** False where no body at all reads as `{}` (readOptionalJson). */
  required: boolean;
  /**
   * Array properties the schema takes as `unknown[]` because the handler checks each item
   * on its own, so that an error names the item's index: what each item must be.
   */
  items?: Record<string, { id: string; schema: z.ZodType; minItems: number; maxItems: number }>;
}

export type Answer =
  /** `created`: a 201 too, with the same result, and what it means (a PUT that adds what it names). */
  | { kind: "envelope"; status: 200 | 201; result: z.ZodType; paged?: true; description: string; created?: string }
  /** Not the JSON envelope: a body of its own media type. */
  | { kind: "raw"; mediaType: string; schema: Record<string, unknown>; description: string }
  | { kind: "empty"; description: string }
  /** Never a success: every call answers the 501 its description explains (what shardq cannot serve). */
  | { kind: "unsupported"; description: string };

export interface Route {
  method: Method;
  /** From the root, its variable segments written `{name}`: the description's path, and the router's with `:name`. */
  path: string;
  access: Access;
  /**
   * Cloudflare's REST API serves this route too, and its clients (the `cloudflare` SDK,
   * wrangler) call it: a body that parses as JSON is then read as JSON whatever its content
   * type says (wrangler sends text/plain), as Cloudflare reads it. That is safe because each
   * needs a bearer token, which no browser sends to another site without a CORS preflight
   * first; every other route keeps asking for application/json.
   */
  cloudflare?: true;
  handle: Handler;
  operationId: string;
  /** One of the description's tags (broker/openapi/document.ts, TAGS). */
  tag: string;
  summary: string;
  description?: string;
  /** Each property a query parameter. */
  query?: z.ZodObject;
  /** The send routes take an Idempotency-Key header (src/routing/idempotent-send.ts). */
  idempotencyKey?: true;
  body?: RequestBody;
  answer: Answer;
  errors?: ExtraError[];
}

/**
 * Cloudflare's base path: `https://api.cloudflare.com/client/v4`. The API answers under it as
 * at the root, so a client made for Cloudflare (the SDK, wrangler) needs its host changed only.
 * The paths of ROUTES are written from the root; apiPath() takes the base off first.
 */
export const CLOUDFLARE_BASE = "/client/v4";

/** The bases the API answers under: the root, and Cloudflare's. */
export const API_BASES: readonly string[] = ["", CLOUDFLARE_BASE];

/** A request's path as the route table reads it: without Cloudflare's base, when it has it. */
export function apiPath(pathname: string): string {
  return pathname.startsWith(`${CLOUDFLARE_BASE}/`) ? pathname.slice(CLOUDFLARE_BASE.length) : pathname;
}

/** A path parameter, percent-decoded: a segment that is not valid percent-encoding is a 400 naming it. */
export function param(req: ApiRequest, name: string): string {
  try {
    return decodeURIComponent(req.params[name]!);
  } catch {
    throw HttpError.invalid(name, "is not a valid URL path segment");
  }
}
