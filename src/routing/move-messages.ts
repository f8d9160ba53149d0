/**
 * Writes messages that leave one queue for another: dead-lettering (push and pull
 * consumers alike) and a redrive. Every mover keeps one rule (docs/guarantees.md,
 * "Moves"): store at the target, then settle the source copy, and settle it only once
 * this call returned. A crash in between leaves the source copy in place, to be moved
 * again; the target then recognises the same copy by its move key and stores it once.
 *
 * A moved message keeps its id and its timestamp (when it was first sent) and starts
 * again at attempts 1 in its new queue, as Cloudflare's dead-letter queues do: the
 * target's own max_retries then means what it says.
 *
 * A move never makes itself a no-op on the message id: a message can come back to a
 * queue it was in before (dead-lettered, redriven, dead-lettered again), and each of
 * those is a new copy with a new move key, which the target stores. So a call that
 * returns has the messages held by the target; a call that cannot store them throws,
 * and the caller keeps its source copies.
 */
import { crc32 } from "../kernel/checksum";
import type { Env } from "../kernel/env";
import { HttpError } from "../kernel/errors";
import type { LeasedMessage } from "../kernel/protocol";
import type { PendingMessage } from "./pending-messages";
import { jurisdictionName, jurisdictionOfQueue } from "../kernel/jurisdiction";
import { lookupQueue } from "./queue-lookup";
import { storeMessages } from "./store";

/** Where the copies being moved are stored now. */
export interface MoveSource {
  queueId: string;
  /** The storage shard holding them: with each copy's key it names the move. */
  shard: string;
}

/** Stores every message at the target queue (name or id), or throws; returns the target's queue id. */
export async function moveMessages(
  env: Env,
  accountId: string,
  targetRef: string,
  source: MoveSource,
  messages: LeasedMessage[],
): Promise<string> {
  const map = await lookupQueue(env, accountId, targetRef);
  // A move into its own queue would reset a message's retries for ever instead of ending them.
  if (map.queueId === source.queueId)
    throw HttpError.invalid(
      "dead_letter_queue",
      `must be another queue than the one the messages come from ("${map.queueName}")`,
    );
  // A message never leaves its jurisdiction, whatever was configured (docs/jurisdictions.md).
  if (jurisdictionOfQueue(map.queueId) !== jurisdictionOfQueue(source.queueId)) {
    throw HttpError.invalid(
      "dead_letter_queue",
      `"${map.queueName}" is in ${jurisdictionName(map.queueId)} and the messages are in ${jurisdictionName(source.queueId)}: a message never leaves its queue's jurisdiction`,
    );
  }
  if (messages.length === 0) return map.queueId;
  if (messages.some((m) => !m.copyKey))
    throw new Error("a move needs the key of every copy it moves (a message read from its shard)");
  // The ids are kept, so each message goes to the shard its id picks (src/routing/placement.ts),
  // whatever batch it travels in: a move repeated after a crash lands where the first one
  // did and is recognised there. Placed in the default region: where a move lands must not
  // depend on where the mover runs.
  await storeMessages(
    env,
    { accountId, queueRef: map.queueId, region: undefined },
    messages.map((m): PendingMessage => ({
      body: m.body,
      contentType: m.contentType,
      delaySeconds: 0,
      checksum: crc32(m.body),
      moveKey: `${source.shard}/${m.copyKey}`,
      sentAt: m.enqueuedAt,
      // A keyed message keeps its key where it moves: a redrive back keeps its order.
      ...(m.orderingKey !== undefined ? { orderingKey: m.orderingKey } : {}),
    })),
    0,
    messages.map((m) => m.id),
  );
  return map.queueId;
}
