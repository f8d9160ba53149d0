import { WorkerEntrypoint } from "cloudflare:workers";
import type { Env } from "../../src/kernel/env";
import { sendCoalesced } from "../../src/routing/coalesce";
import { sendIdempotent } from "../../src/routing/idempotent-send";
import { HttpError } from "../../src/kernel/errors";
import { noteSendLatency } from "../metrics/latency-histogram";
import { enforceRateLimits } from "../http/rate-limit";
import { fromSend, fromSendBatch, type PendingMessage } from "../../src/routing/pending-messages";
import { bindingError, delaySecondsSchema } from "../../src/kernel/send-rules";
import { parseWith } from "../../src/kernel/validate";
import { queueMetrics } from "../../src/routing/queue-metrics";
import { storeMessages, type SendTarget, type Stored } from "../../src/routing/store";
import { lookupQueue } from "../../src/routing/queue-lookup";
import { bindingMetrics, figuresAfterSend } from "../../src/routing/queue-figures";
import { refusal } from "./refusal";

/**
 * Set on the producer's service binding: `props = { account = "local", queue = "my-queue" }`
 * (docs/producer-binding.md).
 */
export interface ProducerProps {
  account: string;
  queue: string;
  /** Region to store in; defaults to DEFAULT_REGION (an RPC call carries no request.cf). */
  region?: string;
  /**
   * The binding's default delay in seconds (0 to 86400), as `delivery_delay` on a
   * `[[queues.producers]]` binding: for every message sent through this binding that gives no
   * delay of its own (see bindingDelay). Absent: the queue's own `delivery_delay` setting.
   */
  delivery_delay?: number;
}

/** The target and the binding's own delay, read from the binding's props. */
interface Binding {
  target: SendTarget;
  deliveryDelay: number | undefined;
}

/** What `env.QUEUE.metrics()` returns, as Cloudflare's Queue.metrics(). */
export interface ProducerMetrics {
  backlogCount: number;
  backlogBytes: number;
  oldestMessageTimestamp?: Date;
}

/**
 * What `send()` takes as options: Cloudflare's QueueSendOptions and shardq's additions, which a
 * Cloudflare Queues binding does not read (docs/producer-binding.md).
 */
export interface ShardqSendOptions extends QueueSendOptions {
  /** Delivered after every message of the key accepted before it (docs/ordered-lanes.md). */
  orderingKey?: string;
  /**
   * The message's id, of the caller's choosing (32 lowercase hex characters): for 24 hours a send
   * with an id already stored stores nothing and answers it; with another message, it is refused.
   */
  id?: string;
}

/** One message of `sendBatch()`: Cloudflare's MessageSendRequest and shardq's additions, as in ShardqSendOptions. */
export interface ShardqMessageSendRequest<Body = unknown> extends MessageSendRequest<Body> {
  orderingKey?: string;
  id?: string;
}

/**
 * What `send()` resolves to: Cloudflare's QueueSendResponse, and beyond it the message's
 * id in a field of its own, so code typed against `Queue` reads what it always read.
 */
export interface ShardqSendResponse {
  metadata: { metrics: ProducerMetrics };
  messageId: string;
}

/** What `sendBatch()` resolves to: Cloudflare's QueueSendBatchResponse, and the ids in the order sent. */
export interface ShardqSendBatchResponse {
  metadata: { metrics: ProducerMetrics };
  messageIds: string[];
}

/**
 * The producer binding. A Worker binds to it with a service binding scoped to one
 * queue and calls it exactly as it calls a Cloudflare Queues binding (`env.QUEUE`):
 * `send` and `sendBatch` resolve to Cloudflare's response types, the queue's figures in
 * `metadata.metrics`, with the ids added (`messageId`, `messageIds`). A message may carry an id of
 * the caller's choosing (`id`), stored at most once as over HTTP (sendIdempotent); the others
 * take the path and cost they always took, with no IdempotencyKeys call. A failed call rejects
 * the caller's promise with the message the HTTP API puts in its envelope; one the send rules
 * refuse leaves nothing in shardq's log (answer()). A binding may carry a default delay
 * (`props.delivery_delay`), as a `[[queues.producers]]` binding does on Cloudflare. No token:
 * whoever deploys the binding chose its account; its sends count against the same rate limits.
 */
export class QueueProducer extends WorkerEntrypoint<Env, ProducerProps> {
  send(body: unknown, options?: ShardqSendOptions): Promise<ShardqSendResponse> {
    const started = Date.now();
    return this.answer(async () => {
      const { target, deliveryDelay } = this.binding();
      const message = fromSend(body, options);
      await enforceRateLimits(this.env, target.accountId, target.queueRef);
      const { id, stored } =
        message.id === undefined
          ? await sendCoalesced(this.env, target, {
              ...message,
              delaySeconds: bindingDelay(message.delaySeconds, undefined, deliveryDelay),
            })
          : await sendWithId(this.env, target, message, deliveryDelay);
      noteSendLatency(this.env, this.ctx, target, started);
      return {
        metadata: {
          metrics: bindingMetrics(await figuresAfterSend(this.env, stored.queueId, stored.backlogs, stored)),
        },
        messageId: id,
      };
    });
  }

  sendBatch(messages: ShardqMessageSendRequest[], options?: QueueSendBatchOptions): Promise<ShardqSendBatchResponse> {
    const started = Date.now();
    return this.answer(async () => {
      const batch = fromSendBatch(messages, options);
      const { target, deliveryDelay } = this.binding();
      await enforceRateLimits(this.env, target.accountId, target.queueRef);
      // Each message's own delay still comes first (src/routing/store.ts): this is the batch's default.
      const batchDelay = bindingDelay(undefined, batch.delaySeconds, deliveryDelay);
      const stored = batch.messages.some((m) => m.id !== undefined)
        ? await sendIdempotent(this.env, target, {
            key: null,
            route: "batch",
            messages: batch.messages,
            batchDelaySeconds: batchDelay,
            idField: (i) => `messages[${i}].id`,
          })
        : await storeMessages(this.env, target, batch.messages, batchDelay);
      noteSendLatency(this.env, this.ctx, target, started);
      return {
        metadata: {
          metrics: bindingMetrics(await figuresAfterSend(this.env, stored.queueId, stored.backlogs, stored)),
        },
        messageIds: stored.ids,
      };
    });
  }

  metrics(): Promise<ProducerMetrics> {
    return this.answer(async () => {
      const { target } = this.binding();
      const m = await queueMetrics(this.env, await lookupQueue(this.env, target.accountId, target.queueRef), {
        heartbeats: false,
      });
      const out: ProducerMetrics = { backlogCount: m.backlog_count, backlogBytes: m.backlog_bytes };
      if (m.oldest_message_timestamp_ms !== null) out.oldestMessageTimestamp = new Date(m.oldest_message_timestamp_ms);
      return out;
    });
  }

  private binding(): Binding {
    const props = (this.ctx as unknown as { props?: Partial<ProducerProps> }).props ?? {};
    if (typeof props.account !== "string" || typeof props.queue !== "string") {
      throw new HttpError(
        "invalid",
        'the service binding to QueueProducer needs props = { account = "...", queue = "..." }',
        "props",
      );
    }
    const deliveryDelay =
      props.delivery_delay === undefined
        ? undefined
        : parseWith(delaySecondsSchema, props.delivery_delay, ["props", "delivery_delay"]);
    return { target: { accountId: props.account, queueRef: props.queue, region: props.region }, deliveryDelay };
  }

  /**
   * A call's result, or its refusal. A refusal is what Cloudflare's own binding refuses in the
   * caller, before anything is sent: a call the send rules turn down (src/kernel/send-rules.ts,
   * 400 and 413: a bad option, a body its content type cannot carry, a message or batch over
   * the limits) or a binding without its props; and shardq's one refusal of its own, a 409 for
   * a chosen id (src/routing/idempotent-send.ts): one the queue holds for another message, or one
   * a send of the same id is storing right now, which the caller resolves by its own choice of
   * id or by retrying. It resolves the RPC call with a value that rejects the caller's promise
   * (./refusal.ts): thrown from here, workerd would log it as an uncaught exception of shardq's
   * and, across `wrangler dev` processes, cancel the call as hung. RPC keeps only an error's
   * name and message: bindingError makes them say what the HTTP API would. Anything else (a
   * queue not found, a rate limit, the service unavailable, a fault) is about shardq's state
   * rather than the call, and is thrown, for shardq's log to show.
   */
  private answer<T>(fn: () => Promise<T>): Promise<T> {
    return fn().catch((err: unknown) => {
      if (err instanceof HttpError && (err.status === 400 || err.status === 409 || err.status === 413))
        return refusal(bindingError(err) as Error) as T;
      throw bindingError(err);
    });
  }
}

/**
 * A send() with the caller's id: stored at most once under it, as POST .../messages with `id` is.
 * The binding's delay goes as a batch's does, under the message's own: what makes two sends of an
 * id one message is the message (its own delay included), not the binding it came through, so
 * that send() and sendBatch() of one message through one binding are the same send.
 */
async function sendWithId(
  env: Env,
  target: SendTarget,
  message: PendingMessage,
  deliveryDelay: number | undefined,
): Promise<{ id: string; stored: Stored }> {
  const stored = await sendIdempotent(env, target, {
    key: null,
    route: "message",
    messages: [message],
    batchDelaySeconds: deliveryDelay,
    idField: () => "id",
  });
  return { id: stored.ids[0]!, stored };
}

/**
 * The delay a message is stored with when the binding has one of its own, as Cloudflare applies
 * a `[[queues.producers]]` binding's `delivery_delay`: the message's own `delaySeconds` (0
 * included) first, then a sendBatch()'s `delaySeconds` option, then the binding's. Undefined
 * when none of them is given, which leaves the queue's own `delivery_delay` setting.
 */
export function bindingDelay(
  messageDelay: number | undefined,
  batchDelay: number | undefined,
  deliveryDelay: number | undefined,
): number | undefined {
  return messageDelay ?? batchDelay ?? deliveryDelay;
}
