// The import graph of the repository's code outside the tests (the service, the CLI, the
// benchmarks and the scripts): which files import which, the circles among them (strongly
// connected components of more than one file, type-only imports included, since a type circle
// still ties the files together), and every import that runs up a layer or sideways between
// two parts of one layer. The service's layers are docs/architecture.md's.
// `npm run check:imports` prints what it finds and exits 1 on any circle or wrong-way import;
// test/node/import-graph.test.ts runs the same check in `npm test`.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { ROOT } from "../cli/wrangler/dev-server.mjs";

const FOLDERS = ["src", "broker", "coordinator", "storage-shard", "consumer-shard", "bin", "cli", "bench", "scripts"];

/**
 * The layers, top first: a file may import its own part and any part of a lower layer,
 * nothing above it and no other part of its own layer (parts of a layer talk over RPC).
 * The client libraries (the consumer helper, the batching producer) run inside users' Workers,
 * and the HTTP client (src/client) wherever fetch runs: they may import the kernel only. The
 * outbox and the inbox run inside users' Durable Objects and import nothing of the service: only
 * the envelope they share (src/envelope, which imports nothing).
 * Above the service sit the tools that run it: the benchmarks, the repository's scripts, and
 * the CLI (bin/ the command, cli/ its code); they may use the service's code, never the reverse.
 */
export const LAYERS = [
  { layer: "benchmarks", parts: ["bench"] },
  { layer: "repository scripts", parts: ["scripts"] },
  { layer: "command", parts: ["bin"] },
  { layer: "command line", parts: ["cli"] },
  { layer: "entry", parts: ["src/worker.ts"] },
  { layer: "edge", parts: ["broker", "consumer-shard"] },
  { layer: "client library", parts: ["src/consumer", "src/producer", "src/client", "src/outbox", "src/inbox"] },
  { layer: "delivery service", parts: ["src/delivery"] },
  { layer: "routing service", parts: ["src/routing"] },
  { layer: "durable objects", parts: ["coordinator", "storage-shard"] },
  { layer: "kernel", parts: ["src/kernel", "src/envelope"] },
];

/**
 * The rooms of a part kept in folders (docs/architecture.md): the storage shard's object sits
 * at the top of storage-shard/, what it stores in one folder each. A file in a folder not named
 * here is outside the layers, so a new room is named here and in docs/architecture.md first.
 * Rooms of one part import each other freely: keyed messages are segment slots.
 */
export const ROOMS = { "storage-shard": ["segments", "keyed", "handoff"] };

/**
 * Parts that import nothing of the service but what is named here: the outbox and the inbox run
 * in users' Durable Objects beside any binding, and share only the envelope, which stands alone.
 */
/** @type {Record<string, string[]>} */
export const SELF_CONTAINED = { "src/outbox": ["src/envelope"], "src/inbox": ["src/envelope"], "src/envelope": [] };

/** The layer index and part of a file, or null for a file no layer (or room) names. @param {string} file */
export function placeOf(file) {
  for (const [index, { parts }] of LAYERS.entries()) {
    for (const part of parts) {
      if (file !== part && !file.startsWith(`${part}/`)) continue;
      const rooms = ROOMS[/** @type {keyof typeof ROOMS} */ (part)];
      const folder = file
        .slice(part.length + 1)
        .split("/")
        .slice(0, -1)[0];
      return rooms && folder !== undefined && !rooms.includes(folder) ? null : { index, part };
    }
  }
  return null;
}
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
      } else if (on.has(w))
        low.set(v, Math.min(/** @type {number} */ (low.get(v)), /** @type {number} */ (idx.get(w))));
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

/**
 * The graph and what is wrong with it: circles, imports that go up or sideways, and files
 * outside every layer.
 */
export function importGraph() {
  const files = sourceFiles();
  const known = new Set(files);
  const graph = new Map(files.map((f) => [f, importsOf(f, known)]));
  /** @type {string[]} */ const wrongWay = [];
  /** @type {string[]} */ const unplaced = [];
  for (const [from, targets] of graph) {
    const a = placeOf(from);
    if (!a) {
      unplaced.push(from);
      continue;
    }
    const clientOnly = a.part === "src/consumer" || a.part === "src/producer";
    const selfContained = SELF_CONTAINED[a.part];
    for (const to of targets) {
      const b = placeOf(to);
      if (!b || b.part === a.part) continue;
      if (selfContained && !selfContained.includes(b.part)) {
        wrongWay.push(`${from} (${a.part}, which imports only ${selfContained.join(", ") || "nothing"}) imports ${to}`);
        continue;
      }
      const kernel = b.part === "src/kernel";
      // Objects are reached over RPC, with what crosses it in the kernel's protocol: only the entry exports their classes.
      const objectCode = LAYERS[b.index]?.layer === "durable objects" && LAYERS[a.index]?.layer !== "entry";
      if (b.index < a.index || b.index === a.index || (clientOnly && !kernel) || objectCode) {
        wrongWay.push(`${from} (${LAYERS[a.index]?.layer}) imports ${to} (${LAYERS[b.index]?.layer})`);
      }
    }
  }
  const edges = [...graph.values()].reduce((n, s) => n + s.size, 0);
  return { files, edges, circles: components(graph), wrongWay, unplaced };
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) {
  const { files, edges, circles, wrongWay, unplaced } = importGraph();
  /** @type {Map<string, number>} */
  const perFolder = new Map();
  for (const f of files) {
    const top = f.slice(0, f.indexOf("/"));
    perFolder.set(top, (perFolder.get(top) ?? 0) + 1);
  }
  console.log(
    `${files.length} files (${[...perFolder].map(([d, n]) => `${d}/ ${n}`).join(", ")}), ${edges} imports among them, ${circles.length} circle(s), ${wrongWay.length} wrong-way import(s), ${unplaced.length} file(s) outside the layers`,
  );
  for (const c of circles) console.log(`circle of ${c.length}: ${c.join(", ")}`);
  for (const w of wrongWay) console.log(`wrong way: ${w}`);
  for (const u of unplaced) console.log(`outside the layers: ${u}`);
  process.exitCode = circles.length || wrongWay.length || unplaced.length ? 1 : 0;
}
