// The import graph of the service's own code (not tests): which files import which, and
// the circles among them (strongly connected components of more than one file), type-only
// imports included, since a type circle still ties the files together. The measure issue 15
// ("one way down") is judged by: `node scripts/import-graph.mjs` prints the circles and
// exits 1 while there is one.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { ROOT } from "./dev-server.mjs";

const FOLDERS = ["src", "broker", "coordinator", "storage-shard", "consumer-shard"];
const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+["']([^"']+)["']/g;

/** Every .ts and .mjs file below the service's folders, relative to the root. */
function sourceFiles() {
  /** @type {string[]} */
  const out = [];
  const walk = (/** @type {string} */ dir) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (/\.(ts|mjs)$/.test(name) && !name.endsWith(".d.ts")) out.push(relative(ROOT, path));
    }
  };
  for (const f of FOLDERS) if (existsSync(join(ROOT, f))) walk(join(ROOT, f));
  return out.sort();
}

/** The files `file` imports among `known`, by relative specifier. @param {string} file @param {Set<string>} known */
function importsOf(file, known) {
  const text = readFileSync(join(ROOT, file), "utf8");
  /** @type {Set<string>} */
  const out = new Set();
  for (const m of text.matchAll(IMPORT)) {
    const spec = /** @type {string} */ (m[1]);
    if (!spec.startsWith(".")) continue;
    const base = relative(ROOT, resolve(ROOT, dirname(file), spec));
    const hit = [base, `${base}.ts`, `${base}.mjs`, join(base, "index.ts")].find((c) => known.has(c));
    if (hit) out.add(hit);
  }
  return out;
}

/** Tarjan's strongly connected components. @param {Map<string, Set<string>>} graph */
function components(graph) {
  let index = 0;
  /** @type {Map<string, number>} */ const idx = new Map();
  /** @type {Map<string, number>} */ const low = new Map();
  /** @type {string[]} */ const stack = [];
  const on = new Set();
  /** @type {string[][]} */ const out = [];
  const visit = (/** @type {string} */ v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(/** @type {number} */ (low.get(v)), /** @type {number} */ (low.get(w))));
      } else if (on.has(w)) low.set(v, Math.min(/** @type {number} */ (low.get(v)), /** @type {number} */ (idx.get(w))));
    }
    if (low.get(v) === idx.get(v)) {
      /** @type {string[]} */ const c = [];
      let w;
      do {
        w = /** @type {string} */ (stack.pop());
        on.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1) out.push(c.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out;
}

const files = sourceFiles();
const known = new Set(files);
const graph = new Map(files.map((f) => [f, importsOf(f, known)]));
const circles = components(graph);
const edges = [...graph.values()].reduce((n, s) => n + s.size, 0);
console.log(`${files.length} files, ${edges} imports among them, ${circles.length} circle(s)`);
for (const c of circles) console.log(`circle of ${c.length}: ${c.join(", ")}`);
process.exitCode = circles.length ? 1 : 0;
