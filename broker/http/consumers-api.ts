import { z } from "zod";
import { catalogFor, coordinatorFor } from "../../src/kernel/addressing";
import {
  applyConsumerPatch,
  consumerBinding,
  consumerBindingName,
  consumerSettingsPatchSchema,
  defaultConsumerSettings,
  type ConsumerTransport,
} from "../../src/kernel/consumer-settings";
import type { Env } from "../../src/kernel/env";
import { consumerNotFound, HttpError, queueNotFound } from "../../src/kernel/errors";
import { queueNameSchema } from "../../src/kernel/settings";
import { ok } from "./envelope";
import { readJson } from "./read-json";
import { parseWith } from "../../src/kernel/validate";
import { lookupQueueId } from "../../src/routing/queue-lookup";
import { jurisdictionName, jurisdictionOfQueue } from "../../src/kernel/jurisdiction";

/** What the handlers below validate with, and what the OpenAPI description says of them (broker/openapi/). */
export const createConsumerBody = z
  .object({
    type: z.enum(["worker", "http_pull"], { error: 'must be "worker" or "http_pull"' }).default("worker"),
    // Cloudflare's Worker name rule. Other characters would fold onto another Worker's
    // binding name (consumerBindingName), or carry control characters into logs and answers.
    script_name: z
      .string({ error: "must be a string" })
      .min(1, "must not be empty")
      .max(63, "must be at most 63 characters")
      .regex(/^[a-z0-9_][a-z0-9_-]*$/, "must be a Worker name: lowercase letters, digits, dashes and underscores")
      .optional(),
    settings: consumerSettingsPatchSchema.optional(),
    dead_letter_queue: queueNameSchema.nullable().optional(),
  })
  .strict();

export const updateConsumerBody = z
  .object({
    settings: consumerSettingsPatchSchema.optional(),
    dead_letter_queue: queueNameSchema.nullable().optional(),
    // Accepted for symmetry with the create body, but must not change.
    type: z.enum(["worker", "http_pull"]).optional(),
    script_name: z.string().optional(),
  })
  .strict();

export async function createConsumer(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const body = parseWith(createConsumerBody, await readJson(request));
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const coordinator = coordinatorFor(env, queueId);
  if (body.type === "worker") {
    if (!body.script_name) throw HttpError.invalid("script_name", "is required for a worker consumer");
    // One answer whether the name is bound nowhere or for other accounts only, built from the
    // name alone: no account can learn which Workers another account's queues use.
    if (!consumerBinding(env, body.script_name, accountId)) {
      const binding = consumerBindingName(body.script_name);
      throw HttpError.invalid(
        "script_name",
        `shardq has no service binding ${binding} to a Worker named "${body.script_name}" for this account; add it to wrangler.toml, and the account to WORKER_CONSUMER_ACCOUNTS`,
      );
    }
  } else if (body.script_name !== undefined) {
    throw HttpError.invalid("script_name", "applies to worker consumers only");
  }
  const info = await coordinator.info();
  if (!info) throw queueNotFound(queueRef);
  await checkDeadLetterQueue(env, accountId, queueId, body.dead_letter_queue);
  const settings = applyConsumerPatch(defaultConsumerSettings(defaultTransport(env)), body.settings ?? {});
  const consumer = await coordinator.addConsumer({
    type: body.type,
    script_name: body.script_name ?? null,
    settings,
    dead_letter_queue: body.dead_letter_queue ?? null,
  });
  if (!consumer) throw new HttpError("conflict", `queue "${queueRef}" already has a consumer; remove it first`, "type");
  // A queue listing shows its consumers from the catalog's copy (coordinator/account-catalog.ts).
  await catalogFor(env, accountId).refreshInfo(queueId);
  return ok(consumer, 201);
}

export async function listConsumers(env: Env, accountId: string, queueRef: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  return ok(await coordinatorFor(env, queueId).consumers());
}

export async function getConsumer(env: Env, accountId: string, queueRef: string, consumerId: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const consumer = (await coordinatorFor(env, queueId).consumers()).find((c) => c.consumer_id === consumerId);
  if (!consumer) throw consumerNotFound(consumerId);
  return ok(consumer);
}

export async function updateConsumer(request: Request, env: Env, accountId: string, queueRef: string, consumerId: string): Promise<Response> {
  const body = parseWith(updateConsumerBody, await readJson(request));
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const coordinator = coordinatorFor(env, queueId);
  const current = (await coordinator.consumers()).find((c) => c.consumer_id === consumerId);
  if (!current) throw consumerNotFound(consumerId);
  if (body.type !== undefined && body.type !== current.type) throw HttpError.invalid("type", "a consumer's type cannot change; remove it and add another");
  if (body.script_name !== undefined && body.script_name !== current.script_name) throw HttpError.invalid("script_name", "cannot change; remove the consumer and add another");
  await checkDeadLetterQueue(env, accountId, queueId, body.dead_letter_queue);
  const updated = await coordinator.updateConsumer(consumerId, body.settings ?? {}, body.dead_letter_queue);
  if (!updated) throw consumerNotFound(consumerId);
  return ok(updated);
}

export async function deleteConsumer(env: Env, accountId: string, queueRef: string, consumerId: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  if (!(await coordinatorFor(env, queueId).removeConsumer(consumerId))) throw consumerNotFound(consumerId);
  await catalogFor(env, accountId).refreshInfo(queueId);
  return ok(null);
}

/**
 * A dead-letter queue must be another queue of the same account, in the same jurisdiction. It may be given by name
 * or by id, so it is compared by the queue it resolves to; it is stored as given.
 */
async function checkDeadLetterQueue(env: Env, accountId: string, queueId: string, dlq: string | null | undefined): Promise<void> {
  if (dlq === undefined || dlq === null) return;
  const dlqId = await catalogFor(env, accountId).resolve(dlq);
  if (!dlqId) throw HttpError.invalid("dead_letter_queue", `queue "${dlq}" does not exist; create it first`);
  if (dlqId === queueId) throw HttpError.invalid("dead_letter_queue", "must be another queue, not the consumer's own");
  if (jurisdictionOfQueue(dlqId) !== jurisdictionOfQueue(queueId)) {
    throw HttpError.invalid("dead_letter_queue", `queue "${dlq}" is in ${jurisdictionName(dlqId)} and this queue in ${jurisdictionName(queueId)}: a dead-letter queue must be in its queue's jurisdiction`);
  }
}

function defaultTransport(env: Env): ConsumerTransport {
  return env.DEFAULT_CONSUMER_TRANSPORT === "queue" ? "queue" : "rpc";
}
