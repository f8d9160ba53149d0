import { serviceConfig } from "../../src/kernel/config";
import type { Env } from "../../src/kernel/env";
import { sendCoalesced } from "../../src/routing/coalesce";
import { ok } from "./envelope";
import { noteSendLatency } from "../metrics/latency-histogram";
import { idempotencyKeyOf, sendIdempotent } from "../../src/routing/idempotent-send";
import { fromHttpBatch, fromHttpMessage } from "../../src/routing/pending-messages";
import { queueMetrics } from "../../src/routing/queue-metrics";
import { readJson } from "./read-json";
import { callerRegion } from "../../src/routing/region";
import { storeMessages, type Stored } from "../../src/routing/store";
import { figuresAfterSend } from "../../src/routing/queue-figures";
import { metadataMetrics } from "./rest-metrics";
import { lookupQueue } from "../../src/routing/queue-lookup";

/**
 * POST .../messages: one message. Answers with the queue's figures (`metadata.metrics`,
 * as Cloudflare does) and, beyond Cloudflare, the message's id. With an Idempotency-Key
 * or an `id`, stored once however often it is retried (src/routing/idempotent-send.ts).
 */
export async function sendMessage(
  request: Request,
  env: Env,
  ctx: ExecutionContext,
  accountId: string,
  queueRef: string,
): Promise<Response> {
  const started = Date.now();
  const key = idempotencyKeyOf(request);
  const message = fromHttpMessage(await readJson(request));
  const target = { accountId, queueRef, region: regionOf(request, env) };
  let sent: { id: string; stored: Stored };
  if (key !== null || message.id !== undefined) {
    const stored = await sendIdempotent(env, target, {
      key,
      route: "message",
      messages: [message],
      batchDelaySeconds: undefined,
      idField: () => "id",
    });
    sent = { id: stored.ids[0]!, stored };
  } else {
    sent = await sendCoalesced(env, target, message);
  }
  noteSendLatency(env, ctx, { accountId, queueRef }, started);
  return ok({ message_id: sent.id, metadata: await metadataAfter(env, sent.stored) });
}

/** POST .../messages/batch: up to 100 messages, stored all together or not at all. */
export async function sendBatch(
  request: Request,
  env: Env,
  ctx: ExecutionContext,
  accountId: string,
  queueRef: string,
): Promise<Response> {
  const started = Date.now();
  const key = idempotencyKeyOf(request);
  const batch = fromHttpBatch(await readJson(request));
  const target = { accountId, queueRef, region: regionOf(request, env) };
  const stored =
    key !== null || batch.messages.some((m) => m.id !== undefined)
      ? await sendIdempotent(env, target, {
          key,
          route: "batch",
          messages: batch.messages,
          batchDelaySeconds: batch.delaySeconds,
          idField: (i) => `messages[${i}].id`,
        })
      : await storeMessages(env, target, batch.messages, batch.delaySeconds);
  noteSendLatency(env, ctx, { accountId, queueRef }, started);
  return ok({ message_ids: stored.ids, metadata: await metadataAfter(env, stored) });
}

/** The REST answers' `metadata`: the queue's figures after the send (src/routing/queue-figures.ts). */
async function metadataAfter(env: Env, stored: Stored) {
  return { metrics: metadataMetrics(await figuresAfterSend(env, stored.queueId, stored.backlogs, stored)) };
}

/** GET .../metrics: backlog figures summed over the queue's shards, and per shard. */
export async function getMetrics(env: Env, accountId: string, queueRef: string): Promise<Response> {
  return ok(await queueMetrics(env, await lookupQueue(env, accountId, queueRef), { heartbeats: true }));
}

function regionOf(request: Request, env: Env): string {
  return callerRegion(request.cf as IncomingRequestCfProperties | undefined, serviceConfig(env));
}
