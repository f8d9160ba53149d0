import { z } from "zod";
import type { Env } from "../../src/kernel/env";
import { HttpError, queueNotFound } from "../../src/kernel/errors";
import { QUEUE_ID_PATTERN } from "../../src/kernel/ids";
import {
  DEFAULT_QUEUE_SETTINGS,
  applySettingsPatch,
  jurisdictionSchema,
  queueNameSchema,
  queueSettingsPatchSchema,
  type QueueSettingsPatch,
} from "../../src/kernel/settings";
import { catalogFor, coordinatorFor } from "../../src/kernel/addressing";
import { ok } from "./envelope";
import { readJson } from "./read-json";
import { lookupQueueId } from "../../src/routing/queue-lookup";
import { forgetShardMap } from "../../src/routing/shard-map-cache";
import { parseWith } from "../../src/kernel/validate";
import { jurisdictionName, jurisdictionOfQueue, type Jurisdiction } from "../../src/kernel/jurisdiction";

/** What the handlers below validate with, and what the OpenAPI description says of them (broker/openapi/). */
export const createQueueBody = z
  .object({
    queue_name: queueNameSchema.refine(
      (n) => !QUEUE_ID_PATTERN.test(n),
      "must not be 32 hex characters (that is the form of a queue id)",
    ),
    settings: queueSettingsPatchSchema.optional(),
    jurisdiction: jurisdictionSchema.optional(),
  })
  .strict();

export const updateQueueBody = z
  .object({
    queue_name: z.string().optional(),
    settings: queueSettingsPatchSchema.optional(),
    // Cloudflare's clients may send it back as they read it: the same is accepted, a change refused.
    jurisdiction: jurisdictionSchema.optional(),
  })
  .strict();

/** PUT's body: PATCH's, read as the whole of the queue's settings (replaceQueue). */
export const replaceQueueBody = updateQueueBody;

/** Far beyond 10,000 queues at one per page; keeps the offset a whole number SQLite takes. */
const MAX_PAGE = 1_000_000;

export const listQueuesQuery = z.object({
  // Cloudflare's filter, and how wrangler resolves every queue name it is given: it takes the
  // first queue listed, so a name matching nothing must list nothing.
  name: z.string({ error: "must be given once, as a string" }).optional(),
  // Ours, not Cloudflare's: an account may hold 10,000 queues. A queue name's characters only,
  // so a typo is a 400 rather than an empty list.
  name_prefix: z
    .string({ error: "must be given once, as a string" })
    .max(63, "must be at most 63 characters (a queue name's length)")
    .regex(/^[a-z0-9-]*$/, "must be the start of a queue name: lowercase letters, digits and dashes")
    .optional(),
  page: z.coerce
    .number({ error: "must be a number" })
    .int("must be a whole number")
    .min(1, "must be at least 1")
    .max(MAX_PAGE, `must be at most ${MAX_PAGE}`)
    .default(1),
  per_page: z.coerce
    .number({ error: "must be a number" })
    .int("must be a whole number")
    .min(1, "must be at least 1")
    .max(100, "must be at most 100")
    .default(20),
});

export async function createQueue(request: Request, env: Env, accountId: string): Promise<Response> {
  const body = parseWith(createQueueBody, await readJson(request));
  const settings = applySettingsPatch(DEFAULT_QUEUE_SETTINGS, body.settings ?? {});
  const { queue } = await catalogFor(env, accountId).createQueue(
    accountId,
    body.queue_name,
    settings,
    body.jurisdiction,
  );
  if (!queue) throw new HttpError("conflict", `a queue named "${body.queue_name}" already exists`, "queue_name");
  forgetShardMap(accountId, queue.queue_name, queue.queue_id);
  return ok(queue, 201);
}

export async function listQueues(query: Record<string, unknown>, env: Env, accountId: string): Promise<Response> {
  const { name, name_prefix, page, per_page } = parseWith(
    listQueuesQuery,
    { name: query.name, name_prefix: query.name_prefix, page: query.page, per_page: query.per_page },
    ["query"],
  );
  const { queues, total } = await catalogFor(env, accountId).listQueues(page, per_page, {
    name,
    prefix: name_prefix || undefined,
  });
  return ok(queues, 200, {
    result_info: { page, per_page, count: queues.length, total_count: total, total_pages: Math.ceil(total / per_page) },
  });
}

export async function getQueue(env: Env, accountId: string, ref: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, ref);
  const info = await coordinatorFor(env, queueId).info();
  if (!info) throw queueNotFound(ref);
  return ok(info);
}

/** PATCH .../queues/:queue (Cloudflare's edit): only the settings given change. */
export async function updateQueue(request: Request, env: Env, accountId: string, ref: string): Promise<Response> {
  const body = parseWith(updateQueueBody, await readJson(request));
  return changeSettings(env, accountId, ref, body.queue_name, body.settings ?? {}, body.jurisdiction);
}

/**
 * PUT .../queues/:queue (Cloudflare's update): "does not support partial updates", the queue's
 * configuration is overwritten with the one supplied. So a setting left out goes back to its
 * default, as on a queue just created: PUT `{ settings: { delivery_delay: 5 } }` also resumes
 * delivery and restores the default retention.
 */
export async function replaceQueue(request: Request, env: Env, accountId: string, ref: string): Promise<Response> {
  const body = parseWith(replaceQueueBody, await readJson(request));
  return changeSettings(
    env,
    accountId,
    ref,
    body.queue_name,
    applySettingsPatch(DEFAULT_QUEUE_SETTINGS, body.settings ?? {}),
    body.jurisdiction,
  );
}

async function changeSettings(
  env: Env,
  accountId: string,
  ref: string,
  queueName: string | undefined,
  patch: QueueSettingsPatch,
  jurisdiction: Jurisdiction | undefined,
): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, ref);
  const coordinator = coordinatorFor(env, queueId);
  refuseJurisdictionChange(queueId, jurisdiction);
  if (queueName !== undefined) {
    const current = await coordinator.info();
    if (current && queueName !== current.queue_name) throw HttpError.invalid("queue_name", "a queue cannot be renamed");
  }
  const info = await coordinator.updateSettings(patch);
  if (!info) throw queueNotFound(ref);
  // The listing answers from the catalog's copy (coordinator/account-catalog.ts).
  await catalogFor(env, accountId).refreshInfo(queueId);
  forgetShardMap(accountId, info.queue_name, info.queue_id);
  return ok(info);
}

/** A queue's jurisdiction is chosen at creation: naming another on update is refused, naming its own is a no-op. */
function refuseJurisdictionChange(queueId: string, asked: Jurisdiction | undefined): void {
  if (asked === undefined || asked === jurisdictionOfQueue(queueId)) return;
  throw HttpError.invalid(
    "jurisdiction",
    `is chosen when a queue is created and cannot change (this queue is in ${jurisdictionName(queueId)})`,
  );
}

export async function deleteQueue(env: Env, accountId: string, ref: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, ref);
  await refuseIfDeadLetterQueue(env, accountId, queueId);
  if (!(await catalogFor(env, accountId).deleteQueue(queueId))) throw queueNotFound(ref);
  forgetShardMap(accountId, ref, queueId);
  return ok(null);
}

/** Coordinators asked at once while looking for a consumer that dead-letters into a queue. */
const DLQ_SCAN_CONCURRENCY = 32;

/**
 * A consumer whose dead-letter queue is gone retries its out-of-retries messages forever, so
 * a queue some consumer dead-letters into is not deleted (409). Consumers live in their own
 * queue's Coordinator and name their dead-letter queue as given (name or id), so every queue
 * of the account is asked: one RPC per queue, paid by a delete, which is rare.
 */
async function refuseIfDeadLetterQueue(env: Env, accountId: string, queueId: string): Promise<void> {
  const queues = await catalogFor(env, accountId).queueIds();
  const name = queues.find((q) => q.queue_id === queueId)?.queue_name;
  const others = queues.filter((q) => q.queue_id !== queueId);
  for (let i = 0; i < others.length; i += DLQ_SCAN_CONCURRENCY) {
    const slice = others.slice(i, i + DLQ_SCAN_CONCURRENCY);
    const found = await Promise.all(
      slice.map(async (q) => ({ q, consumers: await coordinatorFor(env, q.queue_id).consumers() })),
    );
    for (const { q, consumers } of found) {
      const holder = consumers.find(
        (c) => c.dead_letter_queue !== null && (c.dead_letter_queue === queueId || c.dead_letter_queue === name),
      );
      if (holder) {
        const who = holder.script_name
          ? `${holder.consumer_id} (${holder.type}, ${holder.script_name})`
          : `${holder.consumer_id} (${holder.type})`;
        throw new HttpError(
          "conflict",
          `queue "${name ?? queueId}" is the dead-letter queue of consumer ${who} of queue "${q.queue_name}"; remove that consumer or change its dead_letter_queue first`,
          "queue",
        );
      }
    }
  }
}
