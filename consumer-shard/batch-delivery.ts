/**
 * One batch handed to the consumer Worker, whoever leased it: the consumer shard's own round, or
 * a storage shard that pushed it (storage-shard/batch-push.ts). The handler runs while the
 * batch's leases are renewed, and its outcome becomes each storage shard's disposition.
 */
import { storageShardFor } from "../src/kernel/addressing";
import type { DispatchMessage } from "../src/consumer/entrypoint";
import type { ConsumerRecord } from "../src/kernel/consumer-settings";
import { decodeBody } from "../src/kernel/encoding";
import type { Env } from "../src/kernel/env";
import { leaseRefOf, type DispatchOutcome, type LeasedMessage } from "../src/kernel/protocol";
import { joinDispositions, type Disposition } from "../src/delivery/disposition";
import { dispositionOf, FAILED_DISPATCH, unreachedDispatch } from "../src/delivery/outcome";
import type { Dispatch } from "./transports";

/** A batch as leased: its messages by the storage shard that holds them, in the order they go out. */
export type LeasedBatch = Array<{ shard: string; messages: LeasedMessage[] }>;

/** What the handler made of one storage shard's part of a batch. */
export interface PartOutcome {
  shard: string;
  messages: LeasedMessage[];
  disposition: Disposition;
}

export interface HandOver {
  env: Env;
  queueId: string;
  queueName: string;
  consumer: ConsumerRecord;
  dispatch: Dispatch;
  metadata: MessageBatchMetadata;
  /** When the batch's first lease was taken: its leases run from then, not from the dispatch. */
  leasedAt: number;
  leaseMs: number;
  maxExecutionMs: number;
}

/**
 * Runs the handler on `batch` and answers each part's disposition, and the outcome. A body that
 * cannot be decoded fails its delivery (and so ends in the dead-letter queue) without reaching
 * the handler; the handler's calls name messages by id, so a part's verdicts are the batch's.
 */
export async function handOver(
  o: HandOver,
  batch: LeasedBatch,
): Promise<{ outcome: DispatchOutcome; parts: PartOutcome[] }> {
  const parts = batch.map(({ shard, messages }) => {
    const readable: Array<{ leased: LeasedMessage; message: DispatchMessage }> = [];
    const unreadable: LeasedMessage[] = [];
    for (const m of messages) {
      try {
        readable.push({
          leased: m,
          message: {
            id: m.id,
            timestamp: new Date(m.enqueuedAt),
            body: decodeBody(m.body, m.contentType),
            attempts: m.attempts,
          },
        });
      } catch {
        unreadable.push(m);
      }
    }
    return { shard, messages, readable, unreadable };
  });
  const outcome =
    (await withLeasesHeld(o, batch, () =>
      o.dispatch(
        o.queueName,
        parts.flatMap((p) => p.readable.map((r) => r.message)),
        o.metadata,
      ),
    )) ??
    unreachedDispatch(
      parts.flatMap((p) => p.readable.map((r) => r.leased)),
      o.consumer.settings,
    );
  return {
    outcome,
    parts: parts.map((p) => ({
      shard: p.shard,
      messages: p.messages,
      disposition: joinDispositions(
        dispositionOf(
          p.readable.map((r) => r.leased),
          outcome,
          o.consumer.settings,
        ),
        dispositionOf(p.unreadable, FAILED_DISPATCH, o.consumer.settings),
      ),
    })),
  };
}

/**
 * Runs the handler while renewing the batch's leases (QuiCK's Algorithm 3), so a slow
 * handler is not raced by a second delivery, up to the maximum execution time. A
 * dispatch that fails outright answers null: the caller retries its messages with a backoff.
 */
async function withLeasesHeld(
  o: HandOver,
  batch: LeasedBatch,
  run: () => Promise<DispatchOutcome>,
): Promise<DispatchOutcome | null> {
  const held = batch.map((p) => ({ shard: storageShardFor(o.env, p.shard), refs: p.messages.map(leaseRefOf) }));
  const count = batch.reduce((n, p) => n + p.messages.length, 0);
  const started = Date.now();
  const extend = () => {
    for (const { shard, refs } of held)
      shard.extendLeases(o.queueId, refs, o.leaseMs).catch((err) => console.error("lease extension failed:", err));
  };
  // A batch gathered from several shards took a while: its first leases are renewed now, not a third of a lease from now.
  if (started - o.leasedAt >= o.leaseMs / 3) extend();
  const timer = setInterval(
    () => {
      if (Date.now() - started + o.leaseMs > o.maxExecutionMs) return clearInterval(timer);
      extend();
    },
    Math.max(1, Math.floor(o.leaseMs / 3)),
  );
  try {
    return await run();
  } catch (err) {
    console.error(`dispatch of ${count} message(s) failed:`, err);
    return null;
  } finally {
    clearInterval(timer);
  }
}
