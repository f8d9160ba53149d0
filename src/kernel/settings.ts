import { z } from "zod";
import { LIMITS } from "./limits";
import { JURISDICTIONS } from "./jurisdiction";

/** Queue settings, named and bounded as Cloudflare's REST API names them. */
export interface QueueSettings {
  delivery_delay: number;
  delivery_paused: boolean;
  message_retention_period: number;
}

export const DEFAULT_QUEUE_SETTINGS: QueueSettings = {
  delivery_delay: 0,
  delivery_paused: false,
  message_retention_period: LIMITS.defaultRetentionSeconds,
};

const seconds = (min: number, max: number) =>
  z
    .number({ error: "must be a number" })
    .int("must be a whole number of seconds")
    .min(min, `must be at least ${min}`)
    .max(max, `must be at most ${max}`);

export const queueSettingsPatchSchema = z
  .object({
    delivery_delay: seconds(0, LIMITS.maxDelaySeconds).optional(),
    delivery_paused: z.boolean({ error: "must be true or false" }).optional(),
    message_retention_period: seconds(LIMITS.minRetentionSeconds, LIMITS.maxRetentionSeconds).optional(),
  })
  .strict();

export type QueueSettingsPatch = z.infer<typeof queueSettingsPatchSchema>;

/** Lowercase letters, digits and dashes, not starting or ending with a dash (Cloudflare's rule). */
export const QUEUE_NAME_PATTERN = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Where a queue keeps its messages, chosen at creation (./jurisdiction.ts). */
export const jurisdictionSchema = z.enum(JURISDICTIONS, {
  error: `must be one of ${JURISDICTIONS.map((j) => `"${j}"`).join(", ")}`,
});

export const queueNameSchema = z
  .string({ error: (issue) => (issue.input === undefined ? "is required" : "must be a string") })
  .min(1, "must not be empty")
  .max(LIMITS.maxQueueNameLength, `must be at most ${LIMITS.maxQueueNameLength} characters`)
  .regex(QUEUE_NAME_PATTERN, "must be lowercase letters, digits and dashes, not starting or ending with a dash");

export function applySettingsPatch(current: QueueSettings, patch: QueueSettingsPatch): QueueSettings {
  const next = { ...current };
  if (patch.delivery_delay !== undefined) next.delivery_delay = patch.delivery_delay;
  if (patch.delivery_paused !== undefined) next.delivery_paused = patch.delivery_paused;
  if (patch.message_retention_period !== undefined) next.message_retention_period = patch.message_retention_period;
  return next;
}
