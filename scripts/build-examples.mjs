// Bundles the example consumer to examples/consumer/dist/index.js: the Workers test
// pool loads auxiliary Workers as built JavaScript. vitest.config.ts calls this.
import { build } from "esbuild";
import { join } from "node:path";
import { ROOT } from "./dev-server.mjs";

export async function buildExampleConsumer() {
  const outfile = join(ROOT, "examples", "consumer", "dist", "index.js");
  await build({
    entryPoints: [join(ROOT, "examples", "consumer", "src", "index.ts")],
    outfile,
    bundle: true,
    format: "esm",
    target: "es2023",
    platform: "neutral",
    external: ["cloudflare:*"],
    logLevel: "warning",
  });
  return outfile;
}
