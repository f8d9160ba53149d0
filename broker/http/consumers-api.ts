import { z } from "zod";
import { catalogFor, coordinatorFor } from "../../src/kernel/addressing";
import {
  applyConsumerPatch,
  consumerBinding,
  consumerBindingName,
  consumerSettingsPatchSchema,
  defaultConsumerSettings,
  type ConsumerRecord,
  type ConsumerSettingsPatch,
  type ConsumerTransport,
  type ConsumerType,
} from "../../src/kernel/consumer-settings";
import type { Env } from "../../src/kernel/env";
import { consumerNotFound, HttpError, queueNotFound } from "../../src/kernel/errors";
import { queueNameSchema } from "../../src/kernel/settings";
import { ok } from "./envelope";
import { readJson } from "./read-json";
import { parseWith } from "../../src/kernel/validate";
import { lookupQueueId } from "../../src/routing/queue-lookup";
import { jurisdictionName, jurisdictionOfQueue } from "../../src/kernel/jurisdiction";

/**
 * Cloudflare's legacy service environment of a worker consumer, which wrangler's `queues consumer
 * add` sends as "" unless given --env. shardq reaches a Worker by its name alone (its service
 * binding, CONSUMER_<NAME>): "" is the only environment there is.
 */
const environmentName = z
  .literal("", {
    error:
      "shardq reaches a consumer Worker by its name alone (a service binding CONSUMER_<NAME>), without service environments: leave environment_name empty (wrangler: no --env) and give the Worker's own name as script_name",
  })
  .optional();

/** A consumer's id, as a create draws it (32 lowercase hex characters, as Cloudflare's are). */
const CONSUMER_ID_PATTERN = /^[0-9a-f]{32}$/;

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
    environment_name: environmentName,
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

/**
 * PUT's body (Cloudflare's update): the whole consumer, as a create gives it. What it leaves
 * out takes its default, and a dead_letter_queue left out is none.
 */
export const replaceConsumerBody = createConsumerBody.omit({ environment_name: true }).extend({
  type: z.enum(["worker", "http_pull"], {
    error: (iss) => (iss.input === undefined ? "is required" : 'must be "worker" or "http_pull"'),
  }),
});

export async function createConsumer(
  request: Request,
  env: Env,
  accountId: string,
  queueRef: string,
): Promise<Response> {
  const body = parseWith(createConsumerBody, await readJson(request));
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const consumer = await addConsumer(env, accountId, queueId, queueRef, body);
  if (!consumer) throw new HttpError("conflict", `queue "${queueRef}" already has a consumer; remove it first`, "type");
  return ok(consumer, 201);
}

type NewConsumerBody = z.infer<typeof replaceConsumerBody>;

/**
 * Checks a consumer to add and adds it, under `consumerId` when given (a PUT's path names it);
 * a new id otherwise. Null when the queue has a consumer already.
 */
async function addConsumer(
  env: Env,
  accountId: string,
  queueId: string,
  queueRef: string,
  body: NewConsumerBody,
  consumerId?: string,
): Promise<ConsumerRecord | null> {
  const coordinator = coordinatorFor(env, queueId);
  checkWorker(env, accountId, body);
  const info = await coordinator.info();
  if (!info) throw queueNotFound(queueRef);
  await checkDeadLetterQueue(env, accountId, queueId, body.dead_letter_queue);
  const settings = applyConsumerPatch(defaultConsumerSettings(defaultTransport(env)), body.settings ?? {});
  const consumer = await coordinator.addConsumer(
    {
      type: body.type,
      script_name: body.script_name ?? null,
      settings,
      dead_letter_queue: body.dead_letter_queue ?? null,
    },
    consumerId,
  );
  // A queue listing shows its consumers from the catalog's copy (coordinator/account-catalog.ts).
  if (consumer) await catalogFor(env, accountId).refreshInfo(queueId);
  return consumer;
}

/** A worker consumer needs a Worker shardq is bound to for this account; an http_pull one names none. */
function checkWorker(env: Env, accountId: string, body: NewConsumerBody): void {
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
}

export async function listConsumers(env: Env, accountId: string, queueRef: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  return ok(await coordinatorFor(env, queueId).consumers());
}

export async function getConsumer(
  env: Env,
  accountId: string,
  queueRef: string,
  consumerId: string,
): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const consumer = (await coordinatorFor(env, queueId).consumers()).find((c) => c.consumer_id === consumerId);
  if (!consumer) throw consumerNotFound(consumerId);
  return ok(consumer);
}

/** PATCH .../consumers/:consumer_id (shardq's own): only what is given changes. */
export async function updateConsumer(
  request: Request,
  env: Env,
  accountId: string,
  queueRef: string,
  consumerId: string,
): Promise<Response> {
  const body = parseWith(updateConsumerBody, await readJson(request));
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const coordinator = coordinatorFor(env, queueId);
  const current = (await coordinator.consumers()).find((c) => c.consumer_id === consumerId);
  if (!current) throw consumerNotFound(consumerId);
  return ok(await changeConsumer(env, accountId, queueId, current, body, body.settings ?? {}, body.dead_letter_queue));
}

/**
 * PUT .../consumers/:consumer_id (Cloudflare's update): "replaces a Queue consumer, or creates it
 * if it does not exist". Replaced, its settings are those given over the defaults a create would
 * give, and no dead_letter_queue means none; its type and Worker cannot change (a consumer of
 * another kind is another consumer: remove this one first). Created, it takes the id the path
 * names, so the same PUT sent again updates it; 201 then, 200 when replaced. A queue has one
 * consumer at most, so a PUT naming another id while it has one is a 409 naming it.
 */
export async function replaceConsumer(
  request: Request,
  env: Env,
  accountId: string,
  queueRef: string,
  consumerId: string,
): Promise<Response> {
  const body = parseWith(replaceConsumerBody, await readJson(request));
  if (!CONSUMER_ID_PATTERN.test(consumerId))
    throw HttpError.invalid("consumer_id", "must be 32 lowercase hex characters, as a consumer's id is");
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const coordinator = coordinatorFor(env, queueId);
  // Twice at most: a consumer removed between the read and the add is looked for again.
  for (let attempt = 0; attempt < 2; attempt++) {
    const consumers = await coordinator.consumers();
    const current = consumers.find((c) => c.consumer_id === consumerId);
    if (current) {
      const settings = { ...defaultConsumerSettings(current.settings.transport), ...body.settings };
      return ok(await changeConsumer(env, accountId, queueId, current, body, settings, body.dead_letter_queue ?? null));
    }
    const other = consumers[0];
    if (other)
      throw new HttpError(
        "conflict",
        `queue "${queueRef}" already has a consumer, ${other.consumer_id}; a queue has one consumer: update that one, or remove it first`,
        "consumer_id",
      );
    const added = await addConsumer(env, accountId, queueId, queueRef, body, consumerId);
    if (added) return ok(added, 201);
  }
  throw new HttpError(
    "conflict",
    `queue "${queueRef}" changed its consumer while this request ran; send it again`,
    "consumer_id",
  );
}

/** Applies a PATCH's or a PUT's change to the consumer `current`, and has the listing show it. */
async function changeConsumer(
  env: Env,
  accountId: string,
  queueId: string,
  current: ConsumerRecord,
  body: { type?: ConsumerType; script_name?: string },
  settings: ConsumerSettingsPatch,
  deadLetterQueue: string | null | undefined,
): Promise<ConsumerRecord> {
  if (body.type !== undefined && body.type !== current.type)
    throw HttpError.invalid("type", "a consumer's type cannot change; remove it and add another");
  if (body.script_name !== undefined && body.script_name !== current.script_name)
    throw HttpError.invalid("script_name", "cannot change; remove the consumer and add another");
  await checkDeadLetterQueue(env, accountId, queueId, deadLetterQueue);
  const updated = await coordinatorFor(env, queueId).updateConsumer(current.consumer_id, settings, deadLetterQueue);
  if (!updated) throw consumerNotFound(current.consumer_id);
  // A queue listing shows its consumers, settings and all, from the catalog's copy.
  await catalogFor(env, accountId).refreshInfo(queueId);
  return updated;
}

export async function deleteConsumer(
  env: Env,
  accountId: string,
  queueRef: string,
  consumerId: string,
): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  if (!(await coordinatorFor(env, queueId).removeConsumer(consumerId))) throw consumerNotFound(consumerId);
  await catalogFor(env, accountId).refreshInfo(queueId);
  return ok(null);
}

/**
 * A dead-letter queue must be another queue of the same account, in the same jurisdiction. It may be given by name
 * or by id, so it is compared by the queue it resolves to; it is stored as given.
 */
async function checkDeadLetterQueue(
  env: Env,
  accountId: string,
  queueId: string,
  dlq: string | null | undefined,
): Promise<void> {
  if (dlq === undefined || dlq === null) return;
  const dlqId = await catalogFor(env, accountId).resolve(dlq);
  if (!dlqId) throw HttpError.invalid("dead_letter_queue", `queue "${dlq}" does not exist; create it first`);
  if (dlqId === queueId) throw HttpError.invalid("dead_letter_queue", "must be another queue, not the consumer's own");
  if (jurisdictionOfQueue(dlqId) !== jurisdictionOfQueue(queueId)) {
    throw HttpError.invalid(
      "dead_letter_queue",
      `queue "${dlq}" is in ${jurisdictionName(dlqId)} and this queue in ${jurisdictionName(queueId)}: a dead-letter queue must be in its queue's jurisdiction`,
    );
  }
}

function defaultTransport(env: Env): ConsumerTransport {
  return env.DEFAULT_CONSUMER_TRANSPORT === "queue" ? "queue" : "rpc";
}
