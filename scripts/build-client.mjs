// Builds lib/, the JavaScript and type declarations behind package.json's "exports":
//   shardq/client    lib/client/index.js    from src/client/index.ts: one ES module that imports
//                                           nothing, for every runtime with fetch (Node 20+, Deno,
//                                           Bun, browsers, Workers)
//   shardq/consumer  lib/consumer/index.js  from src/consumer/entrypoint.ts  } for users' Workers,
//   shardq/producer  lib/producer/index.js  from src/producer/batching-queue.ts } which wrangler bundles
//   shardq/outbox    lib/outbox/index.js    from src/outbox/outbox.ts  } for users' Durable Objects:
//   shardq/inbox     lib/inbox/index.js     from src/inbox/inbox.ts    } no imports but cloudflare:*
// and their declarations under lib/types (the tree of src/). The two Workers modules keep their
// imports of "cloudflare:workers" and of shardq's own dependencies (zod, devalue): the user's
// wrangler resolves those, one copy for the whole Worker.
// `npm install` in a checkout runs it (the "prepare" script), and so does `npm pack` (npm runs
// "prepare" before packing, so a tarball always carries a fresh build); vitest.config.ts runs it
// before the tests; `npm run build:client` runs it by hand.
import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
export const CLIENT_OUT = join(ROOT, "lib");

/** The Workers entries: their source, and the directory of lib/ their module goes to. */
const WORKER_ENTRIES = [
  { source: join("src", "consumer", "entrypoint.ts"), out: "consumer" },
  { source: join("src", "producer", "batching-queue.ts"), out: "producer" },
  { source: join("src", "outbox", "outbox.ts"), out: "outbox" },
  { source: join("src", "inbox", "inbox.ts"), out: "inbox" },
];

/**
 * Builds all of lib/ into a directory beside it, then puts it in place: a reader of lib/ (a test,
 * a wrangler dev bundling the example consumer) never sees it half written.
 * @returns {Promise<string>} lib/client/index.js
 */
export async function buildLib() {
  const tmp = join(ROOT, `lib.building-${process.pid}`);
  rmSync(tmp, { recursive: true, force: true });
  try {
    await build({
      entryPoints: [join(ROOT, "src", "client", "index.ts")],
      outfile: join(tmp, "client", "index.js"),
      bundle: true,
      format: "esm",
      // Node 20 runs ES2022 (private fields, `??=`, class fields) as it is.
      target: "es2022",
      platform: "neutral",
      sourcemap: true,
      logLevel: "warning",
    });
    const pkg = /** @type {{ dependencies?: Record<string, string> }} */ (
      JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"))
    );
    for (const entry of WORKER_ENTRIES) {
      await build({
        entryPoints: [join(ROOT, entry.source)],
        outfile: join(tmp, entry.out, "index.js"),
        bundle: true,
        format: "esm",
        // What the service itself is written for (tsconfig.json); wrangler bundles it again for the Worker.
        target: "es2024",
        platform: "neutral",
        external: ["cloudflare:*", ...Object.keys(pkg.dependencies ?? {})],
        sourcemap: true,
        logLevel: "warning",
      });
    }
    const tsc = join(ROOT, "node_modules", ".bin", "tsc");
    for (const config of ["tsconfig.client.json", "tsconfig.workers-lib.json"]) {
      execFileSync(tsc, ["-p", join(ROOT, config), "--outDir", join(tmp, "types")], { cwd: ROOT, stdio: "inherit" });
    }
    // tsc keeps the sources' specifiers in declarations: ".ts" (the client's) or none (the
    // Workers code's, which a bundler resolves). The files beside them are ".d.ts", which a
    // ".js" specifier finds under every moduleResolution, "nodenext" included.
    // A plain JavaScript module of src/ (src/kernel/binding-names.mjs) has its declarations
    // written by hand beside it (.d.mts): copied, for the declarations that import it.
    for (const file of declarationFiles(join(tmp, "types"))) {
      const text = readFileSync(file, "utf8").replace(
        /((?:from\s+|import\()["'])(\.{1,2}\/[^"']+?)(?:\.ts)?(["'])/g,
        (_, lead, path, quote) => `${lead}${/\.m?js$/.test(path) ? path : `${path}.js`}${quote}`,
      );
      writeFileSync(file, text);
      for (const [, spec] of text.matchAll(/(?:from\s+|import\()["'](\.{1,2}\/[^"']+)\.mjs["']/g)) {
        const target = resolve(dirname(file), `${spec}.d.mts`);
        copyFileSync(join(ROOT, "src", relative(join(tmp, "types"), target)), target);
      }
    }
    rmSync(CLIENT_OUT, { recursive: true, force: true });
    renameSync(tmp, CLIENT_OUT);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return join(CLIENT_OUT, "client", "index.js");
}

/** What vitest.config.ts calls: all of lib/, the client among it. */
export const buildClient = buildLib;

/** @param {string} dir @returns {string[]} */
function declarationFiles(dir) {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.d\.m?ts$/.test(e.name))
    .map((e) => join(e.parentPath, e.name));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await buildLib();
