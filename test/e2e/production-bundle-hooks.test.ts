// The fault harness's hooks (src/kernel/test-hooks.ts) read from the bundles themselves:
// the service bundled from wrangler.toml as `wrangler deploy` does (NODE_ENV unset, so
// wrangler bundles for "production", as `npm run deploy:dry-run` does in CI) holds none of
// their code, its fence folded to false and each object's hook method throwing at once;
// the same bundle made as `wrangler dev` makes it ("development", what the fault harness
// runs) holds all of it. That second build is what shows the markers name real hook code.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HOOK_CODE, bundleService, hookCodeIn } from "../../scripts/deploy-dry-run.mjs";

/** The fence as esbuild leaves it: a constant false in production, the var's test otherwise. */
const FENCE = /function testHooksEnabled\(\w+\) \{\s*return ([^;]*);\s*\}/;
/** Each object's testHook RPC method, and the first statement of its body. */
const RPC_HOOK = /^\s+(?:async )?testHook\(req = \{\}\) \{\n([^\n]*)/gm;
/** The hooks' check() and control() (the RPC methods' way in), and the first statement of each body. */
const ENTRY = /^\s+(check|control)\(\) \{\n([^\n]*)/gm;

describe("the fault harness's hooks in the bundles wrangler makes", () => {
  const work = mkdtempSync(join(tmpdir(), "shardq-e2e-bundle-hooks-"));
  const code = { production: "", development: "" };

  beforeAll(() => {
    for (const mode of ["production", "development"] as const) {
      // Vitest sets NODE_ENV=test for its own process: the production build must not inherit it.
      const env: NodeJS.ProcessEnv = { ...process.env, WRANGLER_CACHE_DIR: join(work, "cache") };
      if (mode === "production") delete env.NODE_ENV;
      else env.NODE_ENV = mode;
      const built = bundleService(join(work, mode), { env, quiet: true });
      if (!built.ok) throw new Error(`wrangler deploy --dry-run (${mode}) failed:\n${built.output}`);
      code[mode] = readFileSync(built.bundle, "utf8");
    }
  }, 60_000);

  afterAll(() => rmSync(work, { recursive: true, force: true }));

  it("leaves every piece of the hooks' code out of the production bundle", () => {
    expect(hookCodeIn(code.production)).toEqual([]);
  });

  it("folds the fence to false there, so no route and no object's hooks ever open", () => {
    expect(FENCE.exec(code.production)?.[1]).toBe("false");
  });

  it("keeps an object's hook method only as a call to its inert hooks, which throw", () => {
    const first = [...code.production.matchAll(RPC_HOOK)].map((m) => m[1]!.trim());
    // The storage shard, the consumer shard and the Coordinator.
    expect(first).toHaveLength(3);
    for (const statement of first)
      expect(statement).toMatch(/^(?:(?:const \w+ = |return )?this\.hooks\.control\(|this\.hooks\.check\(\);)/);
    // And the only hooks there are inert: check() and control() throw before anything else.
    const entries = [...code.production.matchAll(ENTRY)].map((m) => [m[1], m[2]!.trim()]);
    expect(entries.map(([name]) => name).sort()).toEqual(["check", "control"]);
    for (const [, statement] of entries) expect(statement).toMatch(/^throw new Error\(/);
  });

  it("has all of it, behind the var, in the bundle `wrangler dev` runs for the fault harness", () => {
    expect(hookCodeIn(code.development)).toEqual(HOOK_CODE.map(([name]) => name));
    expect(FENCE.exec(code.development)?.[1]).toBe('env.SHARDQ_TEST_HOOKS === "on"');
  });
});
