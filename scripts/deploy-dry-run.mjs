// `npm run deploy:dry-run`: bundles the service exactly as `wrangler deploy` would,
// without uploading it, and refuses experimental compatibility flags, which
// Cloudflare does not accept on a deployed Worker.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./dev-server.mjs";

const toml = readFileSync(join(ROOT, "wrangler.toml"), "utf8");
const flags = /^compatibility_flags\s*=\s*\[([^\]]*)\]/m.exec(toml)?.[1] ?? "";
if (/experimental|service_binding_extra_handlers/.test(flags)) {
  console.error(`wrangler.toml sets an experimental compatibility flag (${flags.trim()}); a deployed service cannot use it.`);
  process.exit(1);
}
const outdir = join(ROOT, "dist");
const result = spawnSync(process.execPath, [join(ROOT, "node_modules/wrangler/bin/wrangler.js"), "deploy", "--dry-run", "--outdir", outdir], {
  cwd: ROOT,
  stdio: "inherit",
  env: { ...process.env, WRANGLER_SEND_METRICS: "false" },
});
process.exit(result.status ?? 1);
