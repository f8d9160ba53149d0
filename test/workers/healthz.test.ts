/**
 * GET and HEAD /healthz, for readiness probes: 200 without a token, whatever
 * token is sent, from the Worker alone (no Durable Object, KV or rate limiter touched),
 * and one of the two routes the route table (broker/http/route-table.ts) marks PUBLIC, with /openapi.json.
 * Every other route without a token is 401: scopes.test.ts.
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { PATHS } from "../../broker/http/path-access";
import { PUBLIC } from "../../broker/http/route";
import type { Env } from "../../src/kernel/env";
import { testHookRoutes } from "../../broker/http/test-hooks-api";
import { BASE, bindingsReadServing, TOKEN } from "./helpers";

const HEALTHY = { success: true, errors: [], messages: [], result: { ok: true } };

describe("GET and HEAD /healthz", () => {
  it.each([
    ["no Authorization header", undefined],
    ["a valid token", `Bearer ${TOKEN}`],
    ["an unknown token", "Bearer not-a-token"],
    ["a revoked token", "Bearer revoked-token"],
    ["malformed credentials", "Basic dXNlcjpwYXNz"],
  ])("answers 200 with %s", async (_what, authorization) => {
    const headers: Record<string, string> = authorization ? { authorization } : {};
    for (const path of ["/healthz", "/healthz/", "/healthz?probe=1"]) {
      const get = await SELF.fetch(`${BASE}${path}`, { headers });
      expect(get.status, `GET ${path}`).toBe(200);
      expect(get.headers.get("content-type")).toContain("application/json");
      expect(get.headers.get("cache-control")).toBe("no-store");
      expect(await get.json()).toEqual(HEALTHY);
      const head = await SELF.fetch(`${BASE}${path}`, { method: "HEAD", headers });
      expect(head.status, `HEAD ${path}`).toBe(200);
      expect(await head.text()).toBe("");
    }
  });

  it("reads no Durable Object, KV namespace or rate limiter: only the request", async () => {
    expect(await bindingsReadServing("/healthz")).toEqual({ statuses: [200, 200], read: [] });
  });

  it("gives nothing else without a token: other methods, longer paths and lookalikes are 401", async () => {
    for (const [method, path] of [
      ["POST", "/healthz"],
      ["PUT", "/healthz"],
      ["DELETE", "/healthz"],
      ["GET", "/healthz/x"],
      ["GET", "/healthzz"],
      ["GET", "/accounts/local/healthz"],
      ["GET", "/healthz/../metrics"],
      ["GET", "/metrics?healthz"],
    ] as const) {
      const res = await SELF.fetch(`${BASE}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(((await res.json()) as { errors: Array<{ field: string }> }).errors[0]!.field).toBe("authorization");
    }
    // With a valid token, another method on /healthz is the usual 405.
    const post = await SELF.fetch(`${BASE}/healthz`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } });
    expect(post.status).toBe(405);
    expect(((await post.json()) as { errors: Array<{ message: string }> }).errors[0]!.message).toContain(
      "use GET or HEAD",
    );
  });

  it("is one of the two PUBLIC routes in the table, with /openapi.json, GET and HEAD only (test hooks included)", () => {
    const tables = [...PATHS, ...testHookRoutes({ ...env, SHARDQ_TEST_HOOKS: "on" } as Env)];
    const open = tables.flatMap(([pattern, methods]) =>
      Object.entries(methods)
        .filter(([, access]) => access === PUBLIC)
        .map(([method]) => `${method} ${pattern.source}`),
    );
    expect(open).toEqual([
      `GET ${String.raw`^\/healthz\/?$`}`,
      `HEAD ${String.raw`^\/healthz\/?$`}`,
      // The API's description: test/workers/openapi.test.ts.
      `GET ${String.raw`^\/openapi\.json$`}`,
      `HEAD ${String.raw`^\/openapi\.json$`}`,
    ]);
  });
});
