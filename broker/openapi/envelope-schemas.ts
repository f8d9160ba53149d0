/**
 * The envelope every JSON answer comes in (broker/http/envelope.ts, src/kernel/errors.ts), and
 * GET /healthz's result, which belongs to no group of routes.
 * What each route answers in its envelope's `result` is a zod schema in a module beside this
 * one, by the route table's groups (queue-results.ts, message-results.ts, pull-results.ts,
 * operation-results.ts, figure-results.ts): the OpenAPI description's responses are generated
 * from them (./document.ts), and test/workers/openapi-results.test.ts parses real answers with
 * them. Objects are strict, so a field renamed, added or dropped in a handler fails that test
 * until its schema says so. The request side needs no such modules: the description uses the
 * schemas the handlers parse with.
 */
import { z } from "zod";
import { count, described, named } from "./schema-kit";

export const errorDetail = named(
  "ErrorDetail",
  z.strictObject({
    code: z.number().int(),
    message: z.string(),
    field: described(
      z.string().optional(),
      'The request field at fault, as a path ("messages[3].body"), or the header, path segment or query parameter ("authorization", "queue", "limit").',
    ),
  }),
);

export const errorEnvelope = named(
  "ErrorEnvelope",
  z.strictObject({
    success: z.literal(false),
    errors: z.array(errorDetail).min(1),
    messages: z.array(z.unknown()),
    result: z.null(),
  }),
  "Every refusal and failure: errors[0] says what and, where one is at fault, which field.",
);

export const resultInfo = named(
  "ResultInfo",
  z.strictObject({ page: count(), per_page: count(), count: count(), total_count: count(), total_pages: count() }),
);

/** A success: `result` is what the route answers; `result_info` only on lists that page. */
export function successEnvelope(result: z.ZodType, info?: z.ZodType) {
  return z.strictObject({
    success: z.literal(true),
    errors: z.array(errorDetail).max(0),
    messages: z.array(z.unknown()),
    result,
    ...(info ? { result_info: info } : {}),
  });
}

export const healthResult = named("HealthResult", z.strictObject({ ok: z.literal(true) }));
