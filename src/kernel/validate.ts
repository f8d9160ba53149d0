import { z } from "zod";
import { HttpError } from "./errors";

/** Parses with a schema; the first problem becomes a 400 naming its field ("messages[2].delay_seconds"). */
export function parseWith<S extends z.ZodType>(
  schema: S,
  value: unknown,
  prefix: Array<string | number> = [],
): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const path = [...prefix, ...issue.path.map((p) => (typeof p === "symbol" ? String(p) : p))];
  if (issue.code === "unrecognized_keys") {
    const field = fieldName([...path, issue.keys[0]!]);
    throw HttpError.invalid(field, "is not a known field");
  }
  const field = path.length ? fieldName(path) : "body";
  // zod reports a missing key as an invalid type; say what a client needs to hear.
  const missing =
    issue.code === "invalid_type" && (issue.expected === "nonoptional" || /received undefined$/.test(issue.message));
  throw HttpError.invalid(field, missing ? "is required" : issue.message);
}

export function fieldName(path: Array<string | number>): string {
  let out = "";
  for (const p of path) out += typeof p === "number" ? `[${p}]` : out ? `.${p}` : p;
  return out;
}

/**
 * A count in a query string ("?limit=N"): digits only (Number() alone would take "1e2", " 5"
 * or "0x10"), then the bounds of `schema`, or its default when absent. Every refusal is a 400
 * naming `field` with `message`.
 */
export function parseCount(
  schema: z.ZodType<number, number | undefined>,
  raw: string | null,
  field: string,
  message: string,
): number {
  const result = schema.safeParse(raw === null ? undefined : /^\d+$/.test(raw) ? Number(raw) : Number.NaN);
  if (!result.success) throw HttpError.invalid(field, message);
  return result.data;
}

/** A whole number within bounds, with messages a client can act on ("must be at most 100 ms"). */
export function wholeNumber(min: number, max: number, unit = "") {
  return z
    .number({ error: (iss) => (iss.input === undefined ? "is required" : "must be a number") })
    .int("must be a whole number")
    .min(min, `must be at least ${min}${unit}`)
    .max(max, `must be at most ${max}${unit}`);
}
