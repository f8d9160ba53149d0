/**
 * The OpenAPI description (issue 19) against the router: every route of ROUTES, each method,
 * described with exactly its scopes, and nothing described that ROUTES lacks; and the
 * document served at GET /openapi.json without a token. That the document is valid OpenAPI
 * 3.1 is test/e2e/openapi.test.ts; that its answers are the real ones, openapi-results.test.ts.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { PUBLIC, ROUTES, type Access } from "../../broker/http/routes";
import { buildOpenApiDocument, samplePath } from "../../broker/openapi/document";
import { BASE, bindingsReadServing, TOKEN } from "./helpers";

type Described = { path: string; method: string; security: unknown };

const document = buildOpenApiDocument() as { paths: Record<string, Record<string, { security: unknown }>> };
const HTTP_METHODS = new Set(["get", "head", "post", "put", "patch", "delete", "options", "trace"]);
const described: Described[] = Object.entries(document.paths).flatMap(([path, item]) =>
  Object.entries(item)
    .filter(([key]) => HTTP_METHODS.has(key))
    .map(([method, op]) => ({ path, method: method.toUpperCase(), security: op.security })),
);

/** The security requirements a route's access becomes: none for PUBLIC, else one per scope, any one sufficing. */
const securityOf = (access: Access) => (access === PUBLIC ? [] : access.map((scope) => ({ bearerAuth: [scope] })));

/**
 * A pattern with each alternation spelled out: `(?:purge|redrive)` is two routes, and the
 * description must have both, not one that happens to match the pattern.
 */
function variants(pattern: RegExp): RegExp[] {
  const group = /\(\?:([\w|]+)\)/.exec(pattern.source);
  if (!group) return [pattern];
  return group[1]!.split("|").flatMap((word) => variants(new RegExp(pattern.source.replace(group[0], word))));
}

/** The entry of ROUTES that answers a path: the first that matches, as the router picks it. */
const entryFor = (path: string) => ROUTES.find(([pattern]) => pattern.test(path));

describe("the OpenAPI description and the route table", () => {
  it("describes every method of every route of ROUTES, alternations spelled out, with exactly its scopes", () => {
    expect(ROUTES.length).toBeGreaterThan(10);
    for (const [pattern, methods] of ROUTES) {
      for (const variant of variants(pattern)) {
        for (const [method, access] of Object.entries(methods)) {
          const hits = described.filter((d) => d.method === method && variant.test(samplePath(d.path)) && entryFor(samplePath(d.path))?.[0] === pattern);
          expect(hits.map((d) => d.path), `${method} ${variant.source} is not described`).toHaveLength(1);
          expect(hits[0]!.security, `${method} ${hits[0]!.path}`).toEqual(securityOf(access!));
        }
      }
    }
  });

  it("describes nothing ROUTES lacks: each path and method is one the router takes, with the scopes it checks", () => {
    expect(described.length).toBeGreaterThan(20);
    for (const d of described) {
      const entry = entryFor(samplePath(d.path));
      expect(entry, `${d.path} matches no route of ROUTES`).toBeDefined();
      const access = entry![1][d.method];
      expect(access, `${d.method} ${d.path}: ROUTES takes only ${Object.keys(entry![1]).join(", ")} there`).toBeDefined();
      expect(d.security, `${d.method} ${d.path}`).toEqual(securityOf(access!));
    }
  });

  it("leaves the fault harness's test hooks out", () => {
    expect(Object.keys(document.paths).filter((p) => p.includes("test-hooks"))).toEqual([]);
  });
});

describe("GET and HEAD /openapi.json", () => {
  it("answers 200 with the document as JSON, with or without a token; HEAD with no body", async () => {
    for (const headers of [{}, { authorization: `Bearer ${TOKEN}` }, { authorization: "Bearer not-a-token" }] as Array<Record<string, string>>) {
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
    for (const [method, path] of [["POST", "/openapi.json"], ["GET", "/openapi.json/"], ["GET", "/openapi.yaml"], ["GET", "/openapiXjson"]] as const) {
      const res = await SELF.fetch(`${BASE}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(401);
    }
    const post = await SELF.fetch(`${BASE}/openapi.json`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } });
    expect(post.status).toBe(405);
    expect(((await post.json()) as { errors: Array<{ message: string }> }).errors[0]!.message).toContain("use GET or HEAD");
  });
});
