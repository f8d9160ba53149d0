import { errorCode, HttpError } from "../../src/kernel/errors";

/** Cloudflare's API envelope: `{ success, errors, messages, result }`. */
export function ok(result: unknown, status = 200, extra: Record<string, unknown> = {}): Response {
  return Response.json({ success: true, errors: [], messages: [], result, ...extra }, { status });
}

/**
 * The one place an error becomes a response. Anything not an HttpError is a 500 whose
 * body is fixed text: never the error's message or stack, which can name files. It
 * never throws either, so no error escapes to the runtime (wrangler dev would answer
 * it with the stack).
 */
export function errorResponse(err: unknown): Response {
  if (err instanceof HttpError) {
    try {
      return Response.json(
        { success: false, errors: err.details, messages: [], result: null },
        { status: err.status, headers: err.headers },
      );
    } catch {
      // An HttpError that cannot be written (a bad header value): the generic 500 below.
    }
  }
  try {
    console.error("unhandled error in broker:", err);
  } catch {
    // An error whose printing throws still gets its 500.
  }
  return new Response(INTERNAL_ERROR, { status: 500, headers: { "content-type": "application/json" } });
}

const INTERNAL_ERROR = JSON.stringify({
  success: false,
  errors: [{ code: errorCode("internal"), message: "internal error" }],
  messages: [],
  result: null,
});
