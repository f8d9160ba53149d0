// `npm run deploy:dry-run`: bundles the service exactly as `wrangler deploy` would,
// without uploading it, and refuses experimental compatibility flags, which
// Cloudflare does not accept on a deployed Worker, and the fault harness's test hooks.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./dev-server.mjs";

const toml = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
const flags = /^compatibility_flags\s*=\s*\[([^\]]*)\]/m.exec(toml)?.[1] ?? "";
if (/experimental|service_binding_extra_handlers/.test(flags)) {
  console.error(`wrangler.toml sets an experimental compatibility flag (${flags.trim()}); a deployed service cannot use it.`);
  process.exit(1);
}
// The fault harness's hooks (storage-shard/test-hooks.ts) reset storage shards on request:
// only test/faults turns them on, in a config it generates. Set in a file people run or
// deploy from, they would be one admin token away from crashing shards in production.
for (const file of ["wrangler.toml", ".dev.vars"]) {
  const text = existsSync(join(ROOT, file)) ? readFileSync(join(ROOT, file), "utf8") : "";
  if (/^\s*SHARDQ_TEST_HOOKS\s*=/m.test(text)) {
    console.error(`${file} sets SHARDQ_TEST_HOOKS: the fault harness's hooks must never be on outside a test run (test/faults sets it itself).`);
    process.exit(1);
  }
}
const outdir = join(ROOT, "dist");
const result = spawnSync(process.execPath, [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), "deploy", "--dry-run", "--outdir", outdir], {
  cwd: ROOT,
  stdio: "inherit",
  env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
});
process.exit(result.status ?? 1);
