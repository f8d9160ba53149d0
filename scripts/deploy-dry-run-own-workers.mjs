// `npm run deploy:dry-run:own-workers`: `shardq deploy-config` on Workers that use only
// `[[queues.*]]` (by default the pair in test/fixtures/own-workers), then `wrangler deploy --dry-run`
// on every config it wrote, and on shardq's wrangler.toml with the generated [[services]]
// lines added: each bundles as `wrangler deploy` would, and none needs an experimental
// compatibility flag (Cloudflare refuses them on a deployed Worker).
//   node scripts/deploy-dry-run-own-workers.mjs [-c <wrangler config>]...
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { parse as parseJsonc } from "jsonc-parser";
import { parse as parseToml } from "smol-toml";
import { writeDeployConfig } from "../cli/workers/deploy-config.mjs";
import { writeDevConfig } from "../cli/wrangler/dev-config.mjs";
import { ROOT, wranglerBin } from "../cli/wrangler/dev-server.mjs";
import { shardqName } from "../cli/workers/dev-session.mjs";

/**
 * Dry-runs what writeDeployConfig wrote. `bundleDir` gets the bundles, shardq's combined
 * config and wrangler's cache.
 * @param {import("../cli/workers/deploy-config.mjs").DeployConfig} deploy
 * @param {string} bundleDir  absolute
 * @returns {Array<{ name: string, config: string, ok: boolean, output: string }>}
 */
export function dryRunDeployConfig(deploy, bundleDir) {
  mkdirSync(bundleDir, { recursive: true });
  const services =
    /** @type {{ services?: Array<{ binding: string, service: string, entrypoint: string }> }} */ (
      parseToml(readFileSync(deploy.services, "utf8"))
    ).services ?? [];
  const shardq = writeDevConfig({
    file: join(bundleDir, "shardq.wrangler.toml"),
    outsideRoot: true,
    devFlag: false,
    consumers: services,
  });
  const targets = [
    ...deploy.workers.map((w) => ({ name: w.name, config: w.config })),
    { name: shardqName(), config: shardq },
  ];
  return targets.map(({ name, config }) => {
    const text = readFileSync(config, "utf8");
    const flags = JSON.stringify(
      (config.endsWith(".toml") ? parseToml(text) : parseJsonc(text)).compatibility_flags ?? [],
    );
    if (/experimental|service_binding_extra_handlers/.test(flags))
      return { name, config, ok: false, output: `sets an experimental compatibility flag: ${flags}` };
    const r = spawnSync(
      process.execPath,
      [wranglerBin(), "deploy", "--dry-run", "--outdir", join(bundleDir, name), "-c", config],
      {
        cwd: dirname(config),
        encoding: "utf8",
        env: { ...process.env, WRANGLER_SEND_METRICS: "false", WRANGLER_CACHE_DIR: join(bundleDir, "cache") },
        timeout: 120_000,
      },
    );
    return { name, config, ok: r.status === 0, output: `${r.stdout ?? ""}${r.stderr ?? ""}` };
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { config: { type: "string", short: "c", multiple: true } } });
  const configs =
    values.config ??
    ["test/fixtures/own-workers/producer/wrangler.toml", "test/fixtures/own-workers/consumer/wrangler.toml"].map((c) =>
      join(ROOT, c),
    );
  const work = mkdtempSync(join(tmpdir(), "shardq-deploy-dry-run-"));
  try {
    const deploy = writeDeployConfig({ configs, out: join(work, "out"), account: "dry-run", shardqName: shardqName() });
    const results = dryRunDeployConfig(deploy, join(work, "bundles"));
    for (const r of results) {
      console.log(`${r.ok ? "ok  " : "FAIL"} ${r.name}  (${r.config.slice(work.length + 1)})`);
      if (!r.ok) console.log(r.output);
    }
    process.exitCode = results.every((r) => r.ok) ? 0 : 1;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
