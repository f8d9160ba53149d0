// Builds the client library (src/client) into lib/ (lib/client/index.js, lib/types), which package.json's
// "./client" export names: one ES module for every runtime with fetch (Node 20+, Deno,
// Bun, browsers, Workers) and its type declarations. `npm install` runs it (the
// "prepare" script), so does vitest.config.ts before the tests; `npm run build:client`
// runs it by hand.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
export const CLIENT_OUT = join(ROOT, "lib");

export async function buildClient() {
  rmSync(CLIENT_OUT, { recursive: true, force: true });
  await build({
    entryPoints: [join(ROOT, "src", "client", "index.ts")],
    outfile: join(CLIENT_OUT, "client", "index.js"),
    bundle: true,
    format: "esm",
    // Node 20 runs ES2022 (private fields, `??=`, class fields) as it is.
    target: "es2022",
    platform: "neutral",
    sourcemap: true,
    logLevel: "warning",
  });
  execFileSync(join(ROOT, "node_modules", ".bin", "tsc"), ["-p", join(ROOT, "tsconfig.client.json")], { cwd: ROOT, stdio: "inherit" });
  // tsc keeps the sources' ".ts" specifiers in declarations; the files beside them are ".d.ts".
  for (const file of declarationFiles(CLIENT_OUT)) {
    const text = readFileSync(file, "utf8");
    writeFileSync(file, text.replace(/(from\s+["'][^"']+)\.ts(["'])/g, "$1.js$2"));
  }
  return join(CLIENT_OUT, "client", "index.js");
}

/** @param {string} dir @returns {string[]} */
function declarationFiles(dir) {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".d.ts"))
    .map((e) => join(e.parentPath, e.name));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await buildClient();
