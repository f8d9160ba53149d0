/**
 * The route table (./route-table.ts) read by path, as the router's check reads it before any
 * handler runs: which methods a path takes and which scopes each accepts, the one place access
 * is decided. It also tells a wrong method (405) from a path that does not exist (404).
 */
import type { Access, Method, Route } from "./route";
import { ROUTES } from "./route-table";

/**
 * A path's pattern, the methods it takes with the access of each, and the methods Cloudflare's
 * API serves there too. The test hooks' routes (./test-hooks-api.ts) have this shape as well.
 */
export type PathAccess = readonly [
  pattern: RegExp,
  methods: Partial<Record<string, Access>>,
  cloudflare?: readonly string[],
];

/** The order methods are listed in, as a 405 names those a path takes. */
const METHOD_ORDER: readonly Method[] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/**
 * A route's path as a pattern: each `{name}` one segment. A trailing slash is taken too, but
 * not after a file's name (/openapi.json/ is not the document's address).
 */
function patternOf(path: string): RegExp {
  const literal = (s: string) => s.replace(/[.*+?^$()|[\]\\]/g, "\\$&");
  const body = path
    .split(/\{\w+\}/)
    .map(literal)
    .join("[^/]+");
  const file = /\.[^/]*$/.test(path);
  return new RegExp(`^${body}${file ? "" : "/?"}$`);
}

/**
 * ROUTES by path, those with fewer `{name}` segments first: a path such as
 * .../messages/pull matches .../messages/{message_id} too, and the literal one answers.
 */
export const PATHS: readonly PathAccess[] = (() => {
  const byPath = new Map<string, Route[]>();
  for (const route of ROUTES) byPath.set(route.path, [...(byPath.get(route.path) ?? []), route]);
  const params = (path: string) => path.split("{").length;
  return [...byPath.entries()]
    .sort(([a], [b]) => params(a) - params(b))
    .map(([path, routes]): PathAccess => {
      const ordered = METHOD_ORDER.flatMap((m) => routes.filter((r) => r.method === m));
      const methods = Object.fromEntries(ordered.map((r) => [r.method, r.access]));
      const cloudflare = ordered.filter((r) => r.cloudflare).map((r) => r.method);
      return cloudflare.length ? [patternOf(path), methods, cloudflare] : [patternOf(path), methods];
    });
})();

/** The entry of PATHS that answers `path` (a path apiPath() gave): the first whose pattern matches. */
export function accessFor(path: string): PathAccess | undefined {
  return PATHS.find(([pattern]) => pattern.test(path));
}

/** Whether Cloudflare's API serves `method` on the path: its clients' bodies are then read as JSON whatever their content type. */
export function servedByCloudflare(entry: PathAccess, method: string): boolean {
  return entry[2]?.includes(method) ?? false;
}
