/**
 * GET /dashboard/*: the operator's web page, static files from the `[site]` bucket
 * (dashboard/public) served with @cloudflare/kv-asset-handler. The page holds no
 * data: it signs in with an account token and calls the same HTTP API as any client,
 * so serving it needs no token. Nothing on it loads from another origin (the
 * Content-Security-Policy says so to the browser).
 */
import { getAssetFromKV, MethodNotAllowedError, NotFoundError } from "@cloudflare/kv-asset-handler";
import manifestJSON from "__STATIC_CONTENT_MANIFEST";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import { errorResponse } from "./envelope";

const assetManifest = JSON.parse(manifestJSON || "{}") as Record<string, string>;

const HEADERS: Record<string, string> = {
  "content-security-policy":
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  // The page is small and changes with every deploy: always revalidate.
  "cache-control": "no-cache",
};

export function isDashboardPath(pathname: string): boolean {
  return pathname === "/dashboard" || pathname.startsWith("/dashboard/");
}

export async function serveDashboard(request: Request, env: Env, ctx: ExecutionContext): Promise<Response> {
  const url = new URL(request.url);
  if (url.pathname === "/dashboard") return Response.redirect(`${url.origin}/dashboard/`, 301);
  try {
    if (!env.__STATIC_CONTENT)
      throw new HttpError("not_found", "the dashboard is not part of this deployment ([site] bucket missing)");
    const asset = await getAssetFromKV(
      { request, waitUntil: (p: Promise<unknown>) => ctx.waitUntil(p) },
      { ASSET_NAMESPACE: env.__STATIC_CONTENT, ASSET_MANIFEST: assetManifest, cacheControl: { bypassCache: true } },
    );
    const res = new Response(asset.body, asset);
    for (const [k, v] of Object.entries(HEADERS)) res.headers.set(k, v);
    return res;
  } catch (err) {
    if (err instanceof NotFoundError)
      return errorResponse(new HttpError("not_found", `no dashboard file at ${url.pathname}`));
    if (err instanceof MethodNotAllowedError)
      return errorResponse(
        new HttpError("method_not_allowed", `${request.method} is not allowed on ${url.pathname}; use GET or HEAD`),
      );
    return errorResponse(err);
  }
}
