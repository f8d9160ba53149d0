/**
 * Carries out a batch's disposition on its storage shard, for push consumers (the
 * consumer shard) and pull consumers (the broker's ack endpoint) alike. Messages out
 * of retries are written to the dead-letter queue before they are deleted here; if
 * that write fails they stay (retried later) rather than be lost.
 */
import { moveMessages } from "../routing/move-messages";
import { storageShardFor } from "../kernel/addressing";
import type { ConsumerRecord } from "../kernel/consumer-settings";
import type { Env } from "../kernel/env";
import {
  leaseRefOf,
  type LeasedMessage,
  type LeaseRef,
  type SettleRequest,
  type SettleResult,
} from "../kernel/protocol";
import type { Disposition } from "./disposition";

/** How long a message waits before another try when its dead-letter queue could not be written. */
const DEAD_LETTER_RETRY_MS = 30_000;

/**
 * `held` holds the messages themselves (as leased or read from the shard), at least every
 * one out of retries when the consumer has a dead-letter queue: that queue gets the whole
 * message, while the disposition names messages only by lease ref.
 */
export async function applyDisposition(
  env: Env,
  queue: { accountId: string; queueId: string },
  consumer: Pick<ConsumerRecord, "dead_letter_queue"> & { type?: ConsumerRecord["type"] },
  shardName: string,
  d: Disposition,
  held: readonly LeasedMessage[],
  /** A consumer shard settling its round's batch: the answer says whether to lease again (SettleRequest.consumer). */
  settler?: SettleRequest["consumer"],
): Promise<SettleResult> {
  const req = await settleRequestFor(env, queue, consumer, shardName, d, held);
  return storageShardFor(env, shardName).settle({
    queueId: queue.queueId,
    ...req,
    ...(settler ? { consumer: settler } : {}),
  });
}

/**
 * The settle a disposition asks of its storage shard, the dead-letter queue written first: what
 * applyDisposition sends, and what a consumer shard answers a pushed batch with.
 */
export async function settleRequestFor(
  env: Env,
  queue: { accountId: string; queueId: string },
  consumer: Pick<ConsumerRecord, "dead_letter_queue"> & { type?: ConsumerRecord["type"] },
  shardName: string,
  d: Disposition,
  held: readonly LeasedMessage[],
): Promise<Omit<SettleRequest, "queueId" | "consumer">> {
  const retries = d.retries.map((r) => ({ ...leaseRefOf(r.ref), delayMs: r.delayMs }));
  let deadLettered: LeaseRef[] = [];
  let dropped: LeaseRef[] = [];
  if (d.outOfRetries.length > 0) {
    if (consumer.dead_letter_queue) {
      const moving = messagesOf(d.outOfRetries, held);
      try {
        // Stored there before deleted here (src/routing/move-messages.ts): id and timestamp kept, attempts from 1.
        await moveMessages(
          env,
          queue.accountId,
          consumer.dead_letter_queue,
          { queueId: queue.queueId, shard: shardName },
          moving,
        );
        deadLettered = d.outOfRetries;
      } catch (err) {
        console.error(
          `dead-letter write to "${consumer.dead_letter_queue}" failed; keeping ${moving.length} message(s):`,
          err,
        );
        retries.push(...d.outOfRetries.map((r) => ({ ...leaseRefOf(r), delayMs: DEAD_LETTER_RETRY_MS })));
      }
    } else {
      dropped = d.outOfRetries;
    }
  }
  return {
    acks: d.acks.map(leaseRefOf),
    retries,
    deadLettered: deadLettered.map(leaseRefOf),
    dropped: dropped.map(leaseRefOf),
    // A push consumer's acks: nobody waits on them, so the shard may write them with its next write.
    ...(consumer.type === "worker" ? { deferrable: true as const } : {}),
  };
}

/** The held message under each ref, in the refs' order; a missing one would be settled without being moved, so it is refused. */
function messagesOf(refs: readonly LeaseRef[], held: readonly LeasedMessage[]): LeasedMessage[] {
  const byRef = new Map(held.map((m) => [refKey(m), m]));
  return refs.map((r) => {
    const m = byRef.get(refKey(r));
    if (!m)
      throw new Error(`message ${r.id} is out of retries but not held: a dead-letter move needs the message itself`);
    return m;
  });
}

/** A lease ref as a map key: two leases of one message (a stale and a current one) are different refs. */
export const refKey = (r: { id: string; leaseId: string }): string => `${r.id}\n${r.leaseId}`;
