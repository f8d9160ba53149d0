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
import type { DispatchOutcome } from "../consumer-shard/outcome";

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

export function consumerEntrypoint<Env = unknown>(handler: QueueHandler<Env>) {
  return class ShardqConsumer extends WorkerEntrypoint<Env> {
    async deliver(queueName: string, messages: DispatchMessage[], metadata?: MessageBatchMetadata): Promise<DispatchOutcome> {
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
 * A MessageBatch with Cloudflare's rules: the first call on a message wins (ack then
 * retry keeps the ack); ackAll() / retryAll() apply to messages with no call of their own.
 */
export function createBatch(queueName: string, messages: DispatchMessage[], metadata: MessageBatchMetadata = { metrics: { backlogCount: 0, backlogBytes: 0 } }) {
  const explicit = new Map<string, { ack: true } | { ack: false; delaySeconds: number | undefined }>();
  let batchCall: { ack: true } | { ack: false; delaySeconds: number | undefined } | undefined;
  const wrapped: Message[] = messages.map((m) => ({
    id: m.id,
    timestamp: m.timestamp,
    body: m.body,
    attempts: m.attempts,
    ack() {
      if (!explicit.has(m.id)) explicit.set(m.id, { ack: true });
    },
    retry(options?: QueueRetryOptions) {
      if (!explicit.has(m.id)) explicit.set(m.id, { ack: false, delaySeconds: options?.delaySeconds });
    },
  }));
  const batch: MessageBatch = {
    queue: queueName,
    messages: wrapped,
    metadata,
    ackAll() {
      batchCall ??= { ack: true };
    },
    retryAll(options?: QueueRetryOptions) {
      batchCall ??= { ack: false, delaySeconds: options?.delaySeconds };
    },
  };
  const outcome = (result: "ok" | "exception"): DispatchOutcome => {
    const explicitAcks: string[] = [];
    const retryMessages: DispatchOutcome["retryMessages"] = [];
    for (const [id, call] of explicit) {
      if (call.ack) explicitAcks.push(id);
      else retryMessages.push(call.delaySeconds === undefined ? { msgId: id } : { msgId: id, delaySeconds: call.delaySeconds });
    }
    const retryBatch = batchCall && !batchCall.ack ? { retry: true, ...(batchCall.delaySeconds === undefined ? {} : { delaySeconds: batchCall.delaySeconds }) } : { retry: false };
    return { outcome: result, ackAll: batchCall?.ack === true, retryBatch, explicitAcks, retryMessages };
  };
  return { batch, outcome };
}
