/**
 * The OpenAPI description against the route table the router registers and checks:
 * every route of ROUTES described at its path and method with exactly its scopes, nothing else
 * described, and each route's path answered by its own entry in the router's check; and the
 * document served at GET /openapi.json without a token. That the document is valid OpenAPI
 * 3.1 is test/node/openapi.test.ts; that its answers are the real ones, openapi-results.test.ts.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { accessFor, servedByCloudflare } from "../../broker/http/path-access";
import { PUBLIC, type Access } from "../../broker/http/route";
import { ROUTES } from "../../broker/http/route-table";
import { buildOpenApiDocument } from "../../broker/openapi/document";
import { BASE, bindingsReadServing, TOKEN } from "./helpers";

type Described = { path: string; method: string; operationId: string; security: unknown; cloudflare: boolean };

const document = buildOpenApiDocument(ROUTES) as {
  paths: Record<string, Record<string, { operationId: string; security: unknown; "x-cloudflare"?: true }>>;
};
const HTTP_METHODS = new Set(["get", "head", "post", "put", "patch", "delete", "options", "trace"]);
const described: Described[] = Object.entries(document.paths).flatMap(([path, item]) =>
  Object.entries(item)
    .filter(([key]) => HTTP_METHODS.has(key))
    .map(([method, op]) => ({
      path,
      method: method.toUpperCase(),
      operationId: op.operationId,
      security: op.security,
      cloudflare: op["x-cloudflare"] === true,
    })),
);

/** The security requirements a route's access becomes: none for PUBLIC, else one per scope, any one sufficing. */
const securityOf = (access: Access) => (access === PUBLIC ? [] : access.map((scope) => ({ bearerAuth: [scope] })));

/** Values for the path parameters, to send a route's path as a request would. */
const SAMPLE_PARAMS: Readonly<Record<string, string>> = {
  account_id: "acme",
  queue: "orders",
  message_id: "0123456789abcdef0123456789abcdef",
  consumer_id: "0123456789abcdef0123456789abcdef",
  subscription_id: "0123456789abcdef0123456789abcdef",
};

/** A route's path with its parameters filled in: `/accounts/{account_id}/queues` -> `/accounts/acme/queues`. */
function samplePath(path: string): string {
  return path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = SAMPLE_PARAMS[name];
    if (value === undefined) throw new Error(`no sample value for the path parameter {${name}}`);
    return value;
  });
}

describe("the OpenAPI description and the route table", () => {
  it("describes every route of ROUTES at its path and method, with exactly its scopes and Cloudflare's mark, and nothing else", () => {
    expect(ROUTES.length).toBeGreaterThan(20);
    for (const route of ROUTES) {
      const hits = described.filter((d) => d.method === route.method && d.path === route.path);
      expect(hits, `${route.method} ${route.path} is not described once`).toHaveLength(1);
      expect(hits[0], `${route.method} ${route.path}`).toEqual({
        path: route.path,
        method: route.method,
        operationId: route.operationId,
        security: securityOf(route.access),
        cloudflare: route.cloudflare === true,
      });
    }
    expect(described).toHaveLength(ROUTES.length);
  });

  it("answers each route's path from its own entry in the router's check: its access, its methods, Cloudflare's mark", () => {
    for (const route of ROUTES) {
      const file = route.path.includes(".");
      for (const path of file ? [samplePath(route.path)] : [samplePath(route.path), `${samplePath(route.path)}/`]) {
        const entry = accessFor(path);
        expect(entry, `${path} matches no path of the table`).toBeDefined();
        expect(entry![1][route.method], `${route.method} ${path}`).toEqual(route.access);
        expect(servedByCloudflare(entry!, route.method), `${route.method} ${path} served by Cloudflare`).toBe(
          route.cloudflare === true,
        );
        const methods = ROUTES.filter((r) => r.path === route.path).map((r) => r.method);
        expect(Object.keys(entry![1]).sort(), `the methods of ${path}`).toEqual([...methods].sort());
      }
      // A file's name takes no trailing slash, as no other path takes two.
      expect(
        accessFor(`${samplePath(route.path)}${file ? "/" : "//"}`),
        `${route.path} with a slash too many`,
      ).toBeUndefined();
    }
  });

  it("leaves the fault harness's test hooks out", () => {
    expect(Object.keys(document.paths).filter((p) => p.includes("test-hooks"))).toEqual([]);
  });
});

describe("GET and HEAD /openapi.json", () => {
  it("answers 200 with the document as JSON, with or without a token; HEAD with no body", async () => {
    for (const headers of [{}, { authorization: `Bearer ${TOKEN}` }, { authorization: "Bearer not-a-token" }] as Array<
      Record<string, string>
    >) {
      const get = await SELF.fetch(`${BASE}/openapi.json`, { headers });
      expect(get.status).toBe(200);
      expect(get.headers.get("content-type")).toBe("application/json");
      expect(await get.json()).toEqual(document);
      const head = await SELF.fetch(`${BASE}/openapi.json`, { method: "HEAD", headers });
      expect(head.status).toBe(200);
      expect(head.headers.get("content-type")).toBe("application/json");
      expect(await head.text()).toBe("");
    }
  });

  it("reads no Durable Object, KV namespace or rate limiter: only the request", async () => {
    expect(await bindingsReadServing("/openapi.json")).toEqual({ statuses: [200, 200], read: [] });
  });

  it("gives nothing else without a token: other methods and lookalike paths are 401, and 405 with one", async () => {
    for (const [method, path] of [
      ["POST", "/openapi.json"],
      ["GET", "/openapi.json/"],
      ["GET", "/openapi.yaml"],
      ["GET", "/openapiXjson"],
    ] as const) {
      const res = await SELF.fetch(`${BASE}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(401);
    }
    const post = await SELF.fetch(`${BASE}/openapi.json`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(post.status).toBe(405);
    expect(((await post.json()) as { errors: Array<{ message: string }> }).errors[0]!.message).toContain(
      "use GET or HEAD",
    );
  });
});
