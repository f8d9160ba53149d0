/**
 * Operators' view of ordered lanes (docs/ordered-lanes.md): which ordering keys are held
 * back and why, and the release of a held key by moving its blocking message to the
 * dead-letter queue. Both ask every shard of the Coordinator's current map: a key's
 * messages may sit on two shards while it is handed off.
 */
import { z } from "zod";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import { leaseRefOf, notRetired } from "../../src/kernel/protocol";
import { orderingKeySchema } from "../../src/kernel/send-rules";
import { parseCount, parseWith } from "../../src/kernel/validate";
import { moveMessages } from "../../src/routing/move-messages";
import { lookupQueue } from "../../src/routing/queue-lookup";
import type { HeldKey } from "../../storage-shard/lane-operations";
import { ok } from "./envelope";
import { readJson } from "./read-json";

const DEFAULT_HELD = 100;
const MAX_HELD = 1000;
/** How long the released head is leased while it moves: far longer than a move takes. */
const RELEASE_LEASE_MS = 60_000;

/** What the handlers below validate with, and what the OpenAPI description says of them (broker/openapi/). */
export const heldQuery = z.object({ limit: z.number().int().min(1).max(MAX_HELD).default(DEFAULT_HELD) });
export const releaseBody = z.object({ ordering_key: orderingKeySchema }).strict();

/** GET .../ordering/held?limit=N: the keys held back, longest held first, with counts by reason. */
export async function listHeldKeys(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const limit = parseCount(heldQuery.shape.limit, new URL(request.url).searchParams.get("limit"), "limit", `must be a whole number from 1 to ${MAX_HELD}`);
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const answers = await Promise.all(notRetired(map.shards).map(async (s) => ({ shard: s.name, ...(await storageShardFor(env, s.name, s.region).heldKeys(map.queueId, limit)) })));
  const held: Record<HeldKey["reason"], number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  let lanes = 0;
  for (const a of answers) {
    lanes += a.lanes;
    for (const r of Object.keys(held) as Array<HeldKey["reason"]>) held[r] += a.held[r];
  }
  const keys = answers
    .flatMap((a) => a.keys.map((k) => ({ ordering_key: k.key, reason: k.reason, ...(k.reason === "handoff" ? { waiting_on_shard: k.blocker } : { message_id: k.blocker }), since_ms: k.since, messages: k.messages, shard: a.shard })))
    .sort((x, y) => x.since_ms - y.since_ms)
    .slice(0, limit);
  return ok({ keys, lanes, held_keys: Object.values(held).reduce((n, v) => n + v, 0), held_by_reason: held, oldest_held_since_ms: keys[0]?.since_ms ?? null });
}

/**
 * POST .../ordering/release {ordering_key}: moves the message holding the key back (its head,
 * on the shard whose messages of the key are oldest) to the consumer's dead-letter queue,
 * and the key goes on. 409 without a dead-letter queue; 404 when nothing of the key is held.
 */
export async function releaseKey(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const { ordering_key: key } = parseWith(releaseBody, await readJson(request));
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const plan = await coordinatorFor(env, map.queueId).deliveryPlan();
  const dlq = plan?.consumer?.dead_letter_queue;
  if (!plan || !dlq) throw new HttpError("conflict", "the queue's consumer has no dead_letter_queue to move the blocking message to", "dead_letter_queue");
  for (const s of notRetired(map.shards)) {
    const shard = storageShardFor(env, s.name, s.region);
    const head = await shard.takeLaneHead(map.queueId, key, RELEASE_LEASE_MS);
    if (!head) continue;
    await moveMessages(env, accountId, dlq, { queueId: map.queueId, shard: s.name }, [head]);
    await shard.settle({ queueId: map.queueId, acks: [], retries: [], deadLettered: [leaseRefOf(head)], dropped: [] });
    return ok({ ordering_key: key, message_id: head.id, moved_to: dlq });
  }
  throw new HttpError("not_found", `ordering key "${key}" holds no message in this queue`, "ordering_key");
}
