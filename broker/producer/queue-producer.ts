import { WorkerEntrypoint } from "cloudflare:workers";
import type { Env } from "../../src/kernel/env";
import { sendCoalesced } from "../../src/routing/coalesce";
import { HttpError } from "../../src/kernel/errors";
import { noteSendLatency } from "../metrics/latency-histogram";
import { enforceRateLimits } from "../http/rate-limit";
import { fromSend, fromSendBatch } from "../../src/routing/pending-messages";
import { bindingError, delaySecondsSchema } from "../../src/kernel/send-rules";
import { parseWith } from "../../src/kernel/validate";
import { queueMetrics } from "../../src/routing/queue-metrics";
import { storeMessages, type SendTarget } from "../../src/routing/store";
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
 * `metadata.metrics`, with the ids added (`messageId`, `messageIds`). A failed call rejects
 * the caller's promise with the message the HTTP API puts in its envelope; one the send rules
 * refuse leaves nothing in shardq's log (answer()). A binding may carry a default delay
 * (`props.delivery_delay`), as a `[[queues.producers]]` binding does on Cloudflare. No token:
 * whoever deploys the binding chose its account; its sends count against the same rate limits.
 */
export class QueueProducer extends WorkerEntrypoint<Env, ProducerProps> {
  send(body: unknown, options?: unknown): Promise<ShardqSendResponse> {
    const started = Date.now();
    return this.answer(async () => {
      const { target, deliveryDelay } = this.binding();
      const checked = fromSend(body, options);
      const message = { ...checked, delaySeconds: bindingDelay(checked.delaySeconds, undefined, deliveryDelay) };
      await enforceRateLimits(this.env, target.accountId, target.queueRef);
      const { id, stored } = await sendCoalesced(this.env, target, message);
      noteSendLatency(this.env, this.ctx, target, started);
      return {
        metadata: {
          metrics: bindingMetrics(await figuresAfterSend(this.env, stored.queueId, stored.backlogs, stored)),
        },
        messageId: id,
      };
    });
  }

  sendBatch(messages: unknown, options?: unknown): Promise<ShardqSendBatchResponse> {
    const started = Date.now();
    return this.answer(async () => {
      const batch = fromSendBatch(messages, options);
      const { target, deliveryDelay } = this.binding();
      await enforceRateLimits(this.env, target.accountId, target.queueRef);
      // Each message's own delay still comes first (src/routing/store.ts): this is the batch's default.
      const stored = await storeMessages(
        this.env,
        target,
        batch.messages,
        bindingDelay(undefined, batch.delaySeconds, deliveryDelay),
      );
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
   * the limits) or a binding without its props. It resolves the RPC call with a value that
   * rejects the caller's promise (./refusal.ts): thrown from here, workerd would log it as an
   * uncaught exception of shardq's and, across `wrangler dev` processes, cancel the call as
   * hung. RPC keeps only an error's name and message: bindingError makes them say what the
   * HTTP API would. Anything else (a queue not found, a rate limit, the service unavailable, a
   * fault) is about shardq's state rather than the call, and is thrown, for shardq's log to show.
   */
  private answer<T>(fn: () => Promise<T>): Promise<T> {
    return fn().catch((err: unknown) => {
      if (err instanceof HttpError && (err.status === 400 || err.status === 413))
        return refusal(bindingError(err) as Error) as T;
      throw bindingError(err);
    });
  }
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
