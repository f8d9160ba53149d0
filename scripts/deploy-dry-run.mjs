// `npm run deploy:dry-run`: bundles the service exactly as `wrangler deploy` would,
// without uploading it, and refuses experimental compatibility flags, which
// Cloudflare does not accept on a deployed Worker, and the fault harness's test hooks:
// the var that opens them set in a config, or their code in the bundle.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ROOT, wranglerBin } from "../cli/wrangler/dev-server.mjs";

/**
 * What each piece of the hooks' code (src/kernel/test-hooks.ts, its route and the corrupt
 * fault) leaves in a bundle: all of them in a build that has the hooks (`wrangler dev`),
 * none in one bundled for production, where the build fence leaves the code out.
 * @type {ReadonlyArray<[string, RegExp]>}
 */
export const HOOK_CODE = [
  ["the var read by the fence", /\benv\.SHARDQ_TEST_HOOKS\b/],
  ["an object aborted at a fault point", /\bctx\.abort\(/],
  ["an abort once a write is durable", /\bctx\.storage\.sync\(\)/],
  ["an alarm thrown on purpose", /more to throw/],
  ["the corrupt fault's write", /UPDATE segments SET bodies/],
  ["the route forwarding to an object's hook", /\.testHook\(\{/],
];

/** The names of the HOOK_CODE pieces found in a bundle's text. @param {string} code */
export function hookCodeIn(code) {
  return HOOK_CODE.filter(([, marker]) => marker.test(code)).map(([name]) => name);
}

/**
 * `wrangler deploy --dry-run` of wrangler.toml into `outdir`. `env` is the environment it
 * runs in: wrangler bundles with process.env.NODE_ENV replaced by NODE_ENV from there,
 * "production" when unset, and that decides whether the hooks are in the bundle.
 * @param {string} outdir
 * @param {{ env?: NodeJS.ProcessEnv, quiet?: boolean }} [opts]
 * @returns {{ ok: boolean, output: string, bundle: string }}  output only when quiet; bundle the worker's path
 */
export function bundleService(outdir, opts = {}) {
  const result = spawnSync(process.execPath, [wranglerBin(), "deploy", "--dry-run", "--outdir", outdir], {
    cwd: ROOT,
    stdio: opts.quiet ? "pipe" : "inherit",
    encoding: "utf8",
    env: { ...(opts.env ?? process.env), WRANGLER_SEND_METRICS: "false" },
    timeout: 120_000,
  });
  return {
    ok: result.status === 0,
    output: `${result.stdout ?? ""}${result.stderr ?? ""}`,
    bundle: join(outdir, "worker.js"),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const toml = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
  const flags = /^compatibility_flags\s*=\s*\[([^\]]*)\]/m.exec(toml)?.[1] ?? "";
  if (/experimental|service_binding_extra_handlers/.test(flags)) {
    console.error(
      `wrangler.toml sets an experimental compatibility flag (${flags.trim()}); a deployed service cannot use it.`,
    );
    process.exit(1);
  }
  // The fault harness's hooks (src/kernel/test-hooks.ts) reset objects and corrupt bodies on
  // request: only test/faults turns them on, in a config it generates. Set in a file people
  // run or deploy from, they would be one admin token away from crashing shards in production.
  for (const file of ["wrangler.toml", ".dev.vars"]) {
    const text = existsSync(join(ROOT, file)) ? readFileSync(join(ROOT, file), "utf8") : "";
    if (/^\s*SHARDQ_TEST_HOOKS\s*=/m.test(text)) {
      console.error(
        `${file} sets SHARDQ_TEST_HOOKS: the fault harness's hooks must never be on outside a test run (test/faults sets it itself).`,
      );
      process.exit(1);
    }
  }
  const built = bundleService(join(ROOT, "dist"));
  if (!built.ok) process.exit(1);
  // The var is the fence at run time; this is the one at build time (test/e2e/production-bundle-hooks.test.ts).
  const found = hookCodeIn(readFileSync(built.bundle, "utf8"));
  if (found.length > 0) {
    console.error(
      `the bundle holds the fault harness's hook code (${found.join("; ")}): wrangler bundled with NODE_ENV=${process.env.NODE_ENV}, and \`wrangler deploy\` from this shell would ship it. Unset NODE_ENV (or set it to "production").`,
    );
    process.exit(1);
  }
}
