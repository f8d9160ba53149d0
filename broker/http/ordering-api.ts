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
import type { HeldKey } from "../../src/kernel/message-operations";
import { leaseRefOf } from "../../src/kernel/protocol";
import { notRetired } from "../../src/kernel/shard-map";
import { orderingKeySchema } from "../../src/kernel/send-rules";
import { MESSAGE_ID_PATTERN } from "../../src/kernel/ids";
import { parseCount, parseWith } from "../../src/kernel/validate";
import { moveMessages } from "../../src/routing/move-messages";
import { lookupQueue } from "../../src/routing/queue-lookup";
import { ok } from "./envelope";
import { readJson } from "./read-json";

const DEFAULT_HELD = 100;
const MAX_HELD = 1000;
/** How long the released head is leased while it moves: far longer than a move takes. */
const RELEASE_LEASE_MS = 60_000;

/** What the handlers below validate with, and what the OpenAPI description says of them (broker/openapi/). */
export const heldQuery = z.object({ limit: z.number().int().min(1).max(MAX_HELD).default(DEFAULT_HELD) });
export const releaseBody = z
  .object({
    ordering_key: orderingKeySchema,
    // The head the operator saw hold the key: were it acked meanwhile, the next one must not go in its place.
    message_id: z
      .string({ error: "is required: the id of the message holding the key, as GET .../ordering/held lists it" })
      .regex(MESSAGE_ID_PATTERN, "must be 32 lowercase hexadecimal characters, as GET .../ordering/held lists it"),
  })
  .strict();

/** GET .../ordering/held?limit=N: the keys held back, longest held first, with counts by reason. */
export async function listHeldKeys(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const limit = parseCount(
    heldQuery.shape.limit,
    new URL(request.url).searchParams.get("limit"),
    "limit",
    `must be a whole number from 1 to ${MAX_HELD}`,
  );
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const answers = await Promise.all(
    notRetired(map.shards).map(async (s) => ({
      shard: s.name,
      ...(await storageShardFor(env, s.name, s.region).heldKeys(map.queueId, limit)),
    })),
  );
  const held: Record<HeldKey["reason"], number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  let lanes = 0;
  for (const a of answers) {
    lanes += a.lanes;
    for (const r of Object.keys(held) as Array<HeldKey["reason"]>) held[r] += a.held[r];
  }
  const keys = answers
    .flatMap((a) =>
      a.keys.map((k) => ({
        ordering_key: k.key,
        reason: k.reason,
        ...(k.reason === "handoff" ? { waiting_on_shard: k.blocker } : { message_id: k.blocker }),
        since_ms: k.since,
        messages: k.messages,
        shard: a.shard,
      })),
    )
    .sort((x, y) => x.since_ms - y.since_ms)
    .slice(0, limit);
  return ok({
    keys,
    lanes,
    held_keys: Object.values(held).reduce((n, v) => n + v, 0),
    held_by_reason: held,
    oldest_held_since_ms: keys[0]?.since_ms ?? null,
  });
}

/**
 * POST .../ordering/release {ordering_key, message_id}: moves the message holding the key
 * (its head, the one named) to the consumer's dead-letter queue, and the key goes on. 409
 * without a dead-letter queue, or when another message holds the key; 404 when the
 * dead-letter queue is gone, or when the key holds nothing back (no message, or its next one
 * is deliverable). The dead-letter queue is looked up before the head is leased, and a move
 * that fails gives the lease back: a refused release leaves the key as it was.
 */
export async function releaseKey(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const { ordering_key: key, message_id: expected } = parseWith(releaseBody, await readJson(request));
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const plan = await coordinatorFor(env, map.queueId).deliveryPlan();
  const dlq = plan?.consumer?.dead_letter_queue;
  if (!plan || !dlq)
    throw new HttpError(
      "conflict",
      "the queue's consumer has no dead_letter_queue to move the blocking message to",
      "dead_letter_queue",
    );
  await lookupQueue(env, accountId, dlq, { current: true, field: "dead_letter_queue" });
  let heldBy: string | null = null;
  let notHeld: string | null = null;
  for (const s of notRetired(map.shards)) {
    const shard = storageShardFor(env, s.name, s.region);
    const answer = await shard.takeLaneHead(map.queueId, key, expected, RELEASE_LEASE_MS);
    if (!answer) continue;
    if ("heldBy" in answer) heldBy = answer.heldBy;
    if ("notHeld" in answer) notHeld = answer.notHeld;
    if (!("taken" in answer)) continue;
    const head = answer.taken;
    try {
      await moveMessages(env, accountId, dlq, { queueId: map.queueId, shard: s.name }, [head]);
    } catch (err) {
      await shard
        .releaseLeases(map.queueId, [leaseRefOf(head)])
        .catch((e: unknown) =>
          console.error(
            `ordering release: giving the lease of ${head.id} back failed (it ends in ${RELEASE_LEASE_MS} ms):`,
            e,
          ),
        );
      throw err;
    }
    await shard.settle({
      queueId: map.queueId,
      acks: [],
      retries: [],
      deadLettered: [leaseRefOf(head)],
      dropped: [],
      wakeAtOnce: true,
    });
    return ok({ ordering_key: key, message_id: head.id, moved_to: dlq });
  }
  if (heldBy !== null)
    throw new HttpError(
      "conflict",
      `ordering key "${key}" is held by message ${heldBy}, not ${expected}: look again (GET .../ordering/held) and name the message holding it`,
      "message_id",
    );
  if (notHeld !== null)
    throw new HttpError(
      "not_found",
      `ordering key "${key}" is not held: its next message (${notHeld}) can be delivered, or waits on another shard's messages of the key`,
      "ordering_key",
    );
  throw new HttpError("not_found", `ordering key "${key}" holds no message in this queue`, "ordering_key");
}
