// `npm run check:openapi`: builds the OpenAPI description of the HTTP API with the service's
// own code (broker/openapi/document.ts over the route table, broker/http/route-table.ts: what
// GET /openapi.json serves) and checks it: against the OpenAPI 3.1 schema with
// @seriousme/openapi-schema-validator (which also resolves every $ref), then what a schema
// cannot say: each path's parameters declared, operation ids unique. Prints what it finds and exits 1 on any problem; test/node/openapi.test.ts runs the same check in `npm test`.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { Validator } from "@seriousme/openapi-schema-validator";
import { build } from "esbuild";
import { ROOT } from "../cli/wrangler/dev-server.mjs";

/** The builder and the route table it describes, in one module. */
const ENTRY = `
export { buildOpenApiDocument } from "./broker/openapi/document.ts";
export { ROUTES } from "./broker/http/route-table.ts";
`;

/**
 * The document as the Worker builds it. The builder and the route table (its handlers with
 * it) touch no Workers API when loaded, so a bundle of them runs in Node.
 * @returns {Promise<Record<string, any>>}
 */
export async function buildOpenApiDocument() {
  const out = await build({
    stdin: { contents: ENTRY, resolveDir: ROOT, loader: "ts" },
    bundle: true,
    platform: "node",
    format: "esm",
    write: false,
    logLevel: "silent",
  });
  const dir = mkdtempSync(join(tmpdir(), "shardq-openapi-"));
  try {
    const file = join(dir, "document.mjs");
    writeFileSync(file, /** @type {{ text: string }} */ (out.outputFiles[0]).text);
    const mod = await import(pathToFileURL(file).href);
    return mod.buildOpenApiDocument(mod.ROUTES);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Everything wrong with `document`, as lines of text: none for a valid OpenAPI 3.1 description.
 * @param {Record<string, any>} document
 * @returns {Promise<string[]>}
 */
export async function openApiProblems(document) {
  const validator = new Validator();
  const result = await validator.validate(structuredClone(document));
  if (!result.valid) {
    const errors =
      typeof result.errors === "string"
        ? [result.errors]
        : (result.errors ?? []).map((e) => `${e.instancePath || "/"}: ${e.message} ${JSON.stringify(e.params)}`);
    return errors.length ? errors : ["the validator refused the document without saying why"];
  }
  if (validator.version !== "3.1") return [`validated as OpenAPI ${validator.version}, not 3.1`];
  return pathProblems(document);
}

/** @param {Record<string, any>} document @param {string} ref */
function lookup(document, ref) {
  if (!ref.startsWith("#/")) return undefined;
  /** @type {any} */
  let node = document;
  for (const part of ref.slice(2).split("/")) node = node?.[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  return node;
}

/** Path templates whose parameters an operation does not declare, or declares and does not use; repeated operation ids. @param {Record<string, any>} document */
function pathProblems(document) {
  /** @type {string[]} */
  const out = [];
  const ids = new Set();
  for (const [path, item] of Object.entries(document.paths ?? {})) {
    const inPath = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
    for (const [method, op] of Object.entries(/** @type {Record<string, any>} */ (item))) {
      if (ids.has(op.operationId))
        out.push(`${method.toUpperCase()} ${path}: operationId ${op.operationId} is used twice`);
      ids.add(op.operationId);
      const params = (op.parameters ?? []).map((/** @type {any} */ p) => (p.$ref ? lookup(document, p.$ref) : p));
      const declared = params
        .filter((/** @type {any} */ p) => p?.in === "path")
        .map((/** @type {any} */ p) => p.name)
        .sort();
      if (JSON.stringify(declared) !== JSON.stringify(inPath))
        out.push(
          `${method.toUpperCase()} ${path}: path parameters declared ${JSON.stringify(declared)}, the path has ${JSON.stringify(inPath)}`,
        );
    }
  }
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) {
  const document = await buildOpenApiDocument();
  const problems = await openApiProblems(document);
  const operations = Object.values(document.paths).reduce((n, item) => n + Object.keys(item).length, 0);
  console.log(
    `OpenAPI ${document.openapi} description of ${document.info.title} ${document.info.version}: ${Object.keys(document.paths).length} paths, ${operations} operations, ${problems.length} problem(s)`,
  );
  for (const p of problems) console.log(`problem: ${p}`);
  process.exitCode = problems.length ? 1 : 0;
}
