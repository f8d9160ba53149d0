// Bundles each example Worker to examples/<name>/dist/index.js: the tests load
// auxiliary Workers as built JavaScript.
import { build } from "esbuild";
import { readdirSync, existsSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./dev-server.mjs";

for (const name of readdirSync(join(ROOT, "examples"))) {
  const entry = join(ROOT, "examples", name, "src", "index.ts");
  if (!existsSync(entry)) continue;
  await build({
    entryPoints: [entry],
    outfile: join(ROOT, "examples", name, "dist", "index.js"),
    bundle: true,
    format: "esm",
    target: "es2023",
    platform: "neutral",
    external: ["cloudflare:*", "node:*"],
    logLevel: "warning",
  });
}
