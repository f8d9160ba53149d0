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
import type { LeasedMessage, LeaseRef, SettleResult } from "../kernel/protocol";
import type { Disposition } from "./outcome";

/** How long a message waits before another try when its dead-letter queue could not be written. */
const DEAD_LETTER_RETRY_MS = 30_000;

export async function applyDisposition(
  env: Env,
  queue: { accountId: string; queueId: string },
  consumer: Pick<ConsumerRecord, "dead_letter_queue">,
  shardName: string,
  d: Disposition,
): Promise<SettleResult> {
  const retries = d.retries.map((r) => ({ ...ref(r.message), delayMs: r.delayMs }));
  let deadLettered: LeasedMessage[] = [];
  let dropped: LeasedMessage[] = [];
  if (d.exhausted.length > 0) {
    if (consumer.dead_letter_queue) {
      try {
        // Stored there before deleted here (src/routing/move-messages.ts): id and timestamp kept, attempts from 1.
        await moveMessages(env, queue.accountId, consumer.dead_letter_queue, { queueId: queue.queueId, shard: shardName }, d.exhausted);
        deadLettered = d.exhausted;
      } catch (err) {
        console.error(`dead-letter write to "${consumer.dead_letter_queue}" failed; keeping ${d.exhausted.length} message(s):`, err);
        retries.push(...d.exhausted.map((m) => ({ ...ref(m), delayMs: DEAD_LETTER_RETRY_MS })));
      }
    } else {
      dropped = d.exhausted;
    }
  }
  return storageShardFor(env, shardName).settle({
    queueId: queue.queueId,
    acks: d.acks.map(ref),
    retries,
    deadLettered: deadLettered.map(ref),
    dropped: dropped.map(ref),
  });
}

const ref = (m: LeasedMessage): LeaseRef => ({ id: m.id, leaseId: m.leaseId });
