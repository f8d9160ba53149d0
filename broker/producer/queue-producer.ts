import { WorkerEntrypoint } from "cloudflare:workers";
import type { Env } from "../../src/kernel/env";
import { sendCoalesced } from "../../src/routing/coalesce";
import { HttpError } from "../../src/kernel/errors";
import { noteSendLatency } from "../metrics/latency-histogram";
import { enforceRateLimits } from "../http/rate-limit";
import { fromSend, fromSendBatch } from "../../src/routing/pending-messages";
import { bindingError } from "../../src/kernel/send-rules";
import { queueMetrics } from "../../src/routing/queue-metrics";
import { storeMessages, type SendTarget } from "../../src/routing/store";
import { lookupQueue } from "../../src/routing/queue-lookup";
import { bindingMetrics, figuresAfterSend } from "../../src/routing/queue-figures";

/** Set on the producer's service binding: `props = { account = "local", queue = "my-queue" }`. */
export interface ProducerProps {
  account: string;
  queue: string;
  /** Region to store in; defaults to DEFAULT_REGION (an RPC call carries no request.cf). */
  region?: string;
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
 * `metadata.metrics`, with the ids added (`messageId`, `messageIds`). Errors carry the
 * same messages the HTTP API puts in its envelope. No token: whoever deploys the binding
 * chose its account; its sends count against the same rate limits.
 */
export class QueueProducer extends WorkerEntrypoint<Env, ProducerProps> {
  async send(body: unknown, options?: unknown): Promise<ShardqSendResponse> {
    const started = Date.now();
    return this.guard(async () => {
      const target = this.target();
      const message = fromSend(body, options);
      await enforceRateLimits(this.env, target.accountId, target.queueRef);
      const { id, stored } = await sendCoalesced(this.env, target, message);
      noteSendLatency(this.env, this.ctx, target, started);
      return { metadata: { metrics: bindingMetrics(await figuresAfterSend(this.env, stored.queueId, stored.backlogs, stored)) }, messageId: id };
    });
  }

  async sendBatch(messages: unknown, options?: unknown): Promise<ShardqSendBatchResponse> {
    const started = Date.now();
    return this.guard(async () => {
      const batch = fromSendBatch(messages, options);
      const target = this.target();
      await enforceRateLimits(this.env, target.accountId, target.queueRef);
      const stored = await storeMessages(this.env, target, batch.messages, batch.delaySeconds);
      noteSendLatency(this.env, this.ctx, target, started);
      return { metadata: { metrics: bindingMetrics(await figuresAfterSend(this.env, stored.queueId, stored.backlogs, stored)) }, messageIds: stored.ids };
    });
  }

  async metrics(): Promise<ProducerMetrics> {
    return this.guard(async () => {
      const target = this.target();
      const m = await queueMetrics(this.env, await lookupQueue(this.env, target.accountId, target.queueRef), { heartbeats: false });
      const out: ProducerMetrics = { backlogCount: m.backlog_count, backlogBytes: m.backlog_bytes };
      if (m.oldest_message_timestamp_ms !== null) out.oldestMessageTimestamp = new Date(m.oldest_message_timestamp_ms);
      return out;
    });
  }

  private target(): SendTarget {
    const props = (this.ctx as unknown as { props?: Partial<ProducerProps> }).props ?? {};
    if (typeof props.account !== "string" || typeof props.queue !== "string") {
      throw new HttpError("invalid", 'the service binding to QueueProducer needs props = { account = "...", queue = "..." }', "props");
    }
    return { accountId: props.account, queueRef: props.queue, region: props.region };
  }

  /** RPC keeps only an error's name and message: make them say what the HTTP API would. */
  private async guard<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw bindingError(err);
    }
  }
}
