/**
 * The pieces the result schemas (./*-results.ts) are built of: the registry that names
 * and describes the OpenAPI description's components, and the field types answers share.
 */
import { z } from "zod";
import { MESSAGE_ID_PATTERN } from "../../src/kernel/ids";
import { CONTENT_TYPES, type ContentType } from "../../src/kernel/protocol";

/**
 * Names and descriptions for the description's components. A registry of its own rather
 * than zod's global one, so that nothing else converted to JSON Schema picks these up.
 */
export const resultRegistry = z.registry<{ id?: string; description?: string }>();

export function named<T extends z.ZodType>(id: string, schema: T, description?: string): T {
  resultRegistry.add(schema, description === undefined ? { id } : { id, description });
  return schema;
}

export function described<T extends z.ZodType>(schema: T, description: string): T {
  resultRegistry.add(schema, { description });
  return schema;
}

// A fresh schema per use: one registered with a description would carry it everywhere it is used.
export const count = () => z.number().int().min(0);
export const epochMs = () => z.number().int();
export const messageId = () => z.string().regex(MESSAGE_ID_PATTERN);
export const isoTime = () => z.iso.datetime();
export const contentType = () => z.enum(CONTENT_TYPES as [ContentType, ...ContentType[]]);
export const shardState = () => z.enum(["active", "draining", "retired"]);
export const holdCounts = () => z.strictObject({ leased: count(), retry: count(), delayed: count(), handoff: count() });
