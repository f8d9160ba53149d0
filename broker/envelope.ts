import { errorCode, HttpError } from "../src/errors";

/** Cloudflare's API envelope: `{ success, errors, messages, result }`. */
export function ok(result: unknown, status = 200, extra: Record<string, unknown> = {}): Response {
  return Response.json({ success: true, errors: [], messages: [], result, ...extra }, { status });
}

/** The one place an error becomes a response. Anything not an HttpError is a 500 with no internals. */
export function errorResponse(err: unknown): Response {
  if (err instanceof HttpError) {
    return Response.json({ success: false, errors: err.details, messages: [], result: null }, { status: err.status, headers: err.headers });
  }
  console.error("unhandled error in broker:", err);
  return Response.json(
    { success: false, errors: [{ code: errorCode("internal"), message: "internal error" }], messages: [], result: null },
    { status: 500 },
  );
}
