/**
 * The OpenAPI 3.1 description of the HTTP API, served at GET /openapi.json. Generated, never
 * written by hand, so it cannot drift from what the service does: it describes the routes of
 * the table the router registers and checks (broker/http/route-table.ts), each with the
 * scopes the router checks, request bodies and parameters from the zod schemas the handlers
 * parse with, answers from the result schemas (./*-results.ts, which test/workers/openapi-results.test.ts
 * holds to real answers). The table is passed in, not imported: it imports this module for
 * the handler of GET /openapi.json.
 */
import { z } from "zod";
import { version } from "../../package.json";
import { MESSAGE_ID_PATTERN } from "../../src/kernel/ids";
import { IDEMPOTENCY_KEY_PATTERN } from "../../src/routing/idempotent-send";
import { CLOUDFLARE_BASE, PUBLIC, type RequestBody, type Route } from "../http/route";
import { errorEnvelope, resultInfo, successEnvelope } from "./envelope-schemas";
import { resultRegistry } from "./schema-kit";

type Json = Record<string, unknown>;

/** OpenAPI 3.1's schemas are JSON Schema 2020-12. A request is described as a client writes it (defaults not yet applied). */
const REQUEST = { target: "draft-2020-12", io: "input", unrepresentable: "any" } as const;
const RESULT = {
  target: "draft-2020-12",
  io: "output",
  unrepresentable: "any",
  metadata: resultRegistry,
  // zod spells out z.iso.datetime() as a long pattern besides the format; the format says it.
  override: ({ jsonSchema }: { jsonSchema: { format?: string; pattern?: string } }) => {
    if (jsonSchema.format === "date-time") delete jsonSchema.pattern;
  },
} as const;

export const TAGS = [
  { name: "Health", description: "Readiness probes and this description: no token needed." },
  { name: "Queues", description: "Creating, reading, changing and deleting queues (admin scope)." },
  { name: "Messages", description: "Sending (send scope); peeking, looking up and cancelling messages (admin scope)." },
  { name: "Pull consumers", description: "Leasing, acknowledging and extending messages over HTTP (consume scope)." },
  { name: "Consumers", description: "A queue's consumer: a Worker, or pull over HTTP (admin scope)." },
  {
    name: "Operations",
    description: "Purge, redrive from a dead-letter queue, ordered lanes held back (admin scope).",
  },
  { name: "Figures", description: "Backlog figures, the control plane, the last hour, Prometheus." },
  {
    name: "Event subscriptions",
    description:
      "Cloudflare's events of its own products into a queue: shardq has no such sources, and answers each call 501 saying so.",
  },
];

const PATH_PARAMETERS: Record<string, Json> = {
  account_id: { description: "The account the token belongs to. Any other answers 404." },
  queue: {
    description:
      "The queue's name, or its id (32 lowercase hex characters). Another account's queue answers 404, as one that does not exist.",
  },
  message_id: {
    description: "A message id as send returns it.",
    schema: { type: "string", pattern: MESSAGE_ID_PATTERN.source },
  },
  consumer_id: { description: "The consumer's id, as its creation returned it." },
  subscription_id: { description: "An event subscription's id (shardq has none)." },
};

const RETRY_AFTER = { description: "Seconds to wait before calling again.", schema: { type: "integer", minimum: 1 } };

/** Every error a route can answer, each a JSON envelope with success false. */
const ERRORS: Record<number, { name: string; description: string; retryAfter?: "always" | "sometimes" }> = {
  400: {
    name: "BadRequest",
    description:
      "Invalid: errors[0].field names the body field, header, path segment or query parameter at fault, and the message says what is wrong.",
  },
  401: {
    name: "Unauthorized",
    description: "No bearer token, a malformed one, or one unknown or revoked (field: authorization).",
  },
  403: {
    name: "Forbidden",
    description: "The token holds none of the scopes the operation accepts, whatever the queue (field: authorization).",
  },
  404: {
    name: "NotFound",
    description:
      "No such queue, message or consumer; another account's path or queue answers the same (field: account_id, queue, message_id, consumer_id).",
  },
  405: {
    name: "MethodNotAllowed",
    description:
      "The path exists but takes other methods: the message names them. Any method a path of this description does not list answers this.",
  },
  409: {
    name: "Conflict",
    description:
      "Conflicts with the queue's state or an earlier request: the message says which. Retry-After when the request may succeed later (an idempotent send in progress).",
    retryAfter: "sometimes",
  },
  413: {
    name: "PayloadTooLarge",
    description:
      "The body, a message or a batch is over its limit: 1 MB per request, 128 KB per message, 100 messages and 256 KB per batch.",
  },
  415: {
    name: "UnsupportedMediaType",
    description: "A body that is not application/json in UTF-8 (field: content-type).",
  },
  429: {
    name: "TooManyRequests",
    description:
      "The account or the queue is over its request rate (field: account_id or queue), or a long-polling pull found its queue or its token at the cap of waiting pulls (field: queue or authorization); nothing was done.",
    retryAfter: "always",
  },
  500: { name: "InternalError", description: "An unexpected failure; the message is fixed text." },
  501: {
    name: "NotImplemented",
    description:
      "What Cloudflare's API serves and shardq cannot (event subscriptions): the message says why, and what to do instead.",
  },
  503: {
    name: "Unavailable",
    description:
      "A part of the service did not answer; the request may be sent again (with Retry-After when a wait is known).",
    retryAfter: "sometimes",
  },
};

const DESCRIPTION = `A horizontally sharded message queue on Cloudflare Workers and Durable Objects, in Cloudflare Queues' REST shapes.

Every answer in JSON is an envelope \`{ success, errors, messages, result }\`: \`result\` on success, \`errors[0]\` ({ code, message, field }) on failure.
Every operation but GET/HEAD /healthz and /openapi.json needs a bearer token holding one of the scopes its security lists (send, consume, admin); a token reaches only its own account.
A method a path does not take answers 405 naming those it does. Requests count against the account's and the queue's request rates (429 with Retry-After).

Every path answers at the root and under Cloudflare's base path /client/v4 alike (the two servers below), so a client made for Cloudflare's API (the \`cloudflare\` SDK, wrangler) needs only its host changed: \`http://127.0.0.1:8787/client/v4\` (docs/rest-api-clients.md).
On the operations Cloudflare's API serves too (marked \`x-cloudflare: true\`) a body that parses as JSON is read as JSON whatever its Content-Type says, as Cloudflare reads it (wrangler sends text/plain); elsewhere a body must be application/json (415).`;

/** Holds the named schemas; a name given twice must name the same schema. */
class Schemas {
  readonly byName: Record<string, Json> = {};

  add(name: string, json: Json): void {
    const had = this.byName[name];
    if (had !== undefined && JSON.stringify(had) !== JSON.stringify(json))
      throw new Error(`two different schemas are named ${name}`);
    this.byName[name] = json;
  }

  /**
   * zod puts the schemas of resultRegistry that a schema uses under its own $defs; the
   * description keeps them once, in components.schemas, and points there.
   */
  hoist(json: Json): Json {
    const { $schema: _dialect, $defs, ...root } = json;
    for (const [name, def] of Object.entries(($defs ?? {}) as Record<string, Json>))
      this.add(name, pointToComponents(def) as Json);
    return pointToComponents(root) as Json;
  }
}

function pointToComponents(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(pointToComponents);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      k === "$ref" && typeof v === "string" ? v.replace(/^#\/\$defs\//, "#/components/schemas/") : pointToComponents(v),
    ]),
  );
}

const ref = (kind: "schemas" | "parameters" | "responses", name: string) => ({ $ref: `#/components/${kind}/${name}` });

/** The operation's security: one requirement per scope it accepts (any one suffices), none for a PUBLIC route. */
function securityOf(op: Route): Json[] {
  return op.access === PUBLIC ? [] : op.access.map((scope) => ({ bearerAuth: [scope] }));
}

/** The error statuses an operation can answer: those of every operation of its kind, and its own. */
function errorsOf(op: Route, isPublic: boolean): number[] {
  const out = new Set<number>(op.errors ?? []);
  const add = (...statuses: number[]) => statuses.forEach((s) => out.add(s));
  if (!isPublic) add(401, 403, 429, 500);
  // A path segment that is not valid percent-encoding is a 400; an account not the token's, a 404.
  if (op.path.includes("{")) add(400, 404);
  if (op.query || op.idempotencyKey) add(400);
  if (op.body) add(400, 413, 415);
  return [...out].sort((a, b) => a - b);
}

function requestBodyOf(body: RequestBody, schemas: Schemas, cloudflares: boolean): Json {
  const json = schemas.hoist(z.toJSONSchema(body.schema, REQUEST) as Json);
  const properties = json.properties as Record<string, Json>;
  for (const [field, item] of Object.entries(body.items ?? {})) {
    schemas.add(item.id, schemas.hoist(z.toJSONSchema(item.schema, REQUEST) as Json));
    properties[field] = {
      ...properties[field],
      items: ref("schemas", item.id),
      minItems: item.minItems,
      maxItems: item.maxItems,
    };
  }
  schemas.add(body.id, json);
  const anyType =
    "Read as JSON whatever its Content-Type says when it parses as JSON, as Cloudflare's API reads it (wrangler sends text/plain).";
  return {
    required: body.required,
    ...(cloudflares ? { description: anyType } : {}),
    content: { "application/json": { schema: ref("schemas", body.id) } },
  };
}

function parametersOf(op: Route): Json[] {
  const out: Json[] = [...op.path.matchAll(/\{(\w+)\}/g)].map((m) => ref("parameters", m[1]!));
  if (op.idempotencyKey) out.push(ref("parameters", "idempotency_key"));
  if (op.query) {
    const json = z.toJSONSchema(op.query, REQUEST) as { properties: Record<string, Json>; required?: string[] };
    for (const [name, schema] of Object.entries(json.properties))
      out.push({ name, in: "query", required: json.required?.includes(name) ?? false, schema });
  }
  return out;
}

/** The operation's successes: none for one that never succeeds (its errors list its 501), two for a PUT that may create. */
function successesOf(op: Route, schemas: Schemas): Array<[string, Json]> {
  const answer = op.answer;
  if (answer.kind === "unsupported") return [];
  if (answer.kind === "empty") return [["200", { description: answer.description }]];
  if (answer.kind === "raw")
    return [["200", { description: answer.description, content: { [answer.mediaType]: { schema: answer.schema } } }]];
  const envelope = successEnvelope(answer.result, answer.paged ? resultInfo : undefined);
  const schema = schemas.hoist(z.toJSONSchema(envelope, RESULT) as Json);
  const out: Array<[string, Json]> = [
    [String(answer.status), { description: answer.description, content: { "application/json": { schema } } }],
  ];
  if (answer.created) out.push(["201", { description: answer.created, content: { "application/json": { schema } } }]);
  return out;
}

function operationOf(op: Route, schemas: Schemas): Json {
  const security = securityOf(op);
  const parameters = parametersOf(op);
  const errors = errorsOf(op, security.length === 0);
  const cloudflares = op.cloudflare === true;
  const responses: Json = Object.fromEntries([
    ...successesOf(op, schemas),
    ...errors.map((s) => [String(s), ref("responses", ERRORS[s]!.name)]),
  ]);
  return {
    operationId: op.operationId,
    tags: [op.tag],
    summary: op.summary,
    ...(op.description ? { description: op.description } : {}),
    security,
    ...(parameters.length ? { parameters } : {}),
    ...(op.body ? { requestBody: requestBodyOf(op.body, schemas, cloudflares) } : {}),
    responses,
    ...(cloudflares ? { "x-cloudflare": true } : {}),
  };
}

function componentsOf(schemas: Schemas): Json {
  // Named in resultRegistry, so hoisting puts it among the schemas; the root is only a $ref to it.
  schemas.hoist(z.toJSONSchema(errorEnvelope, RESULT) as Json);
  const parameters: Json = Object.fromEntries(
    Object.entries(PATH_PARAMETERS).map(([name, p]) => [
      name,
      { name, in: "path", required: true, schema: { type: "string" }, ...p },
    ]),
  );
  parameters.idempotency_key = {
    name: "Idempotency-Key",
    in: "header",
    required: false,
    description:
      "Stores the request once for 24 hours however often it is retried: a retry is answered with the first request's ids. The same key with a different request is a 409.",
    schema: { type: "string", pattern: IDEMPOTENCY_KEY_PATTERN.source },
  };
  const responses = Object.fromEntries(
    Object.values(ERRORS).map(({ name, description, retryAfter }) => [
      name,
      {
        description,
        ...(retryAfter ? { headers: { "Retry-After": { ...RETRY_AFTER, required: retryAfter === "always" } } } : {}),
        content: { "application/json": { schema: ref("schemas", "ErrorEnvelope") } },
      },
    ]),
  );
  return {
    securitySchemes: {
      bearerAuth: {
        type: "http",
        scheme: "bearer",
        description:
          "A token of AUTH_TOKENS: it names its account, and its scopes (send, consume, admin; all three unless it lists them).",
      },
    },
    parameters,
    responses,
    schemas: Object.fromEntries(Object.entries(schemas.byName).sort(([a], [b]) => a.localeCompare(b))),
  };
}

/** Builds the description of `routes` afresh. GET /openapi.json serves openApiJson(), built once per isolate. */
export function buildOpenApiDocument(routes: readonly Route[]): Json {
  const schemas = new Schemas();
  const paths: Record<string, Json> = {};
  for (const op of routes) {
    const method = op.method.toLowerCase();
    const item = (paths[op.path] ??= {});
    if (item[method]) throw new Error(`${op.method} ${op.path} is declared twice`);
    if (!TAGS.some((t) => t.name === op.tag))
      throw new Error(`${op.method} ${op.path}: its tag ${op.tag} is not one of TAGS`);
    item[method] = operationOf(op, schemas);
  }
  return {
    openapi: "3.1.0",
    info: { title: "shardq", version, description: DESCRIPTION, license: { name: "MIT", identifier: "MIT" } },
    servers: [
      { url: "/", description: "The service's root." },
      {
        url: CLOUDFLARE_BASE,
        description: "Cloudflare's base path: the same API, where a client made for Cloudflare's looks for it.",
      },
    ],
    tags: TAGS,
    paths,
    components: componentsOf(schemas),
  };
}

const built = new WeakMap<readonly Route[], string>();

/** The description as GET /openapi.json serves it: built on first use, then kept for the isolate's life. */
export function openApiJson(routes: readonly Route[]): string {
  let json = built.get(routes);
  if (json === undefined) built.set(routes, (json = JSON.stringify(buildOpenApiDocument(routes))));
  return json;
}
