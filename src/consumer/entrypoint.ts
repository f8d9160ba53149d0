/**
 * The transport that deploys. A consumer Worker keeps its Cloudflare Queues handler
 * unchanged and exports it a second time through this helper:
 *
 *   const handler = { async queue(batch, env, ctx) { ... } };
 *   export default handler;
 *   export const ShardqConsumer = consumerEntrypoint(handler);
 *
 * shardq's consumer shards call ShardqConsumer.deliver() over an ordinary service
 * binding (`entrypoint = "ShardqConsumer"`), which needs no experimental flag. The
 * handler sees the same MessageBatch / Message semantics as on Cloudflare.
 */
import { WorkerEntrypoint } from "cloudflare:workers";
import type { DispatchOutcome } from "../kernel/protocol";

/** A message as shardq hands it to a consumer (the shape Fetcher.queue() takes). */
export interface DispatchMessage {
  id: string;
  timestamp: Date;
  body: unknown;
  attempts: number;
}

export interface QueueHandler<Env = unknown> {
  queue(batch: MessageBatch, env: Env, ctx: ExecutionContext): void | Promise<void>;
}

/**
 * What consumerEntrypoint() returns: a WorkerEntrypoint class with deliver(), the method
 * shardq's consumer shards call. Named so that its declaration can be written out
 * (lib/types, shardq/consumer's types): an anonymous class's protected members cannot be.
 */
export type ShardqConsumerEntrypoint<Env = unknown> = new (
  ctx: ExecutionContext,
  env: Env,
) => WorkerEntrypoint<Env> & {
  deliver(queueName: string, messages: DispatchMessage[], metadata?: MessageBatchMetadata): Promise<DispatchOutcome>;
};

export function consumerEntrypoint<Env = unknown>(handler: QueueHandler<Env>): ShardqConsumerEntrypoint<Env> {
  return class ShardqConsumer extends WorkerEntrypoint<Env> {
    async deliver(
      queueName: string,
      messages: DispatchMessage[],
      metadata?: MessageBatchMetadata,
    ): Promise<DispatchOutcome> {
      const { batch, outcome } = createBatch(queueName, messages, metadata);
      // Acks and retries made in ctx.waitUntil() count, as on Cloudflare and through the
      // "queue" transport: the outcome is read once those promises have settled too
      // (the consumer shard keeps renewing the batch's leases meanwhile).
      const pending: Array<Promise<unknown>> = [];
      const ctx = withCollectedWaitUntil(this.ctx, pending);
      let result: "ok" | "exception" = "ok";
      try {
        await handler.queue(batch, this.env, ctx);
      } catch (err) {
        console.error(`queue() handler threw for ${messages.length} message(s) of ${queueName}:`, err);
        result = "exception";
      }
      await Promise.allSettled(pending);
      return outcome(result);
    }
  };
}

/** The handler's ctx, whose waitUntil() also hands each promise to `pending`. */
function withCollectedWaitUntil(ctx: ExecutionContext, pending: Array<Promise<unknown>>): ExecutionContext {
  return new Proxy(ctx, {
    get(target, prop) {
      if (prop === "waitUntil") {
        return (p: Promise<unknown>) => {
          pending.push(p);
          target.waitUntil(p);
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/**
 * A MessageBatch that records the handler's calls exactly as the Workers runtime does for
 * a real queue() handler (the "queue" transport), so that both transports report the same
 * DispatchOutcome (test/workers/transport-parity.test.ts holds the two to it):
 *
 * - ackAll() and retryAll() exclude each other: whichever comes second has no effect.
 * - ack() has no effect after retryAll(), after ackAll() (silently: the message is acked
 *   anyway), or after retry() of the same message; retry() has no effect after ackAll() or
 *   after ack() of the same message. Each ignored call logs the runtime's warning, except
 *   ack() after ackAll(), which the runtime ignores silently too.
 * - A call made before a batch call stands: retry() then ackAll() keeps the retry, ack()
 *   then retryAll() keeps the ack; and retry() after retryAll() stands, with its own delay.
 * - retry() twice on one message: the last call wins, delay and all (a retry() without a
 *   delay drops the earlier one's). retryAll() twice: a later delay replaces the earlier
 *   one; a later retryAll() without a delay keeps it. ack() twice counts once.
 * - Calls made before the handler throws stand (the outcome says "exception").
 *
 * src/delivery/outcome.ts dispositionOf() turns the result into acks and retries.
 */
export function createBatch(
  queueName: string,
  messages: DispatchMessage[],
  metadata: MessageBatchMetadata = { metrics: { backlogCount: 0, backlogBytes: 0 } },
) {
  const acked = new Set<string>();
  const retried = new Map<string, number | undefined>();
  let ackedAll = false;
  let retriedAll: { delaySeconds: number | undefined } | undefined;
  /** The runtime's own warning for a call it ignores. */
  const ignored = (call: string, after: string, msgId?: string) =>
    console.warn(
      `Received a call to ${call}${msgId === undefined ? "" : ` on message ${msgId}`} after ${after} was already called. ` +
        `Calling ${call}${msgId === undefined ? "" : " on a message"} after calling ${after} has no effect.`,
    );
  const wrapped: Message[] = messages.map((m) => ({
    id: m.id,
    timestamp: m.timestamp,
    body: m.body,
    attempts: m.attempts,
    ack() {
      if (ackedAll) return; // acked already; the runtime says nothing either
      if (retriedAll) return ignored("ack()", "retryAll()", m.id);
      if (retried.has(m.id)) return ignored("ack()", "retry()", m.id);
      acked.add(m.id);
    },
    retry(options?: QueueRetryOptions) {
      if (ackedAll) return ignored("retry()", "ackAll()", m.id);
      if (acked.has(m.id)) return ignored("retry()", "ack()", m.id);
      retried.set(m.id, options?.delaySeconds);
    },
  }));
  const batch: MessageBatch = {
    queue: queueName,
    messages: wrapped,
    metadata,
    ackAll() {
      if (retriedAll) return ignored("ackAll()", "retryAll()");
      ackedAll = true;
    },
    retryAll(options?: QueueRetryOptions) {
      if (ackedAll) return ignored("retryAll()", "ackAll()");
      retriedAll = { delaySeconds: options?.delaySeconds ?? retriedAll?.delaySeconds };
    },
  };
  const outcome = (result: "ok" | "exception"): DispatchOutcome => ({
    outcome: result,
    ackAll: ackedAll,
    retryBatch: retriedAll
      ? { retry: true, ...(retriedAll.delaySeconds === undefined ? {} : { delaySeconds: retriedAll.delaySeconds }) }
      : { retry: false },
    explicitAcks: [...acked],
    retryMessages: [...retried].map(([msgId, delaySeconds]) =>
      delaySeconds === undefined ? { msgId } : { msgId, delaySeconds },
    ),
  });
  return { batch, outcome };
}
