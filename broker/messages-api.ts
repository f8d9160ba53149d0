import { serviceConfig } from "../src/config";
import type { Env } from "../src/env";
import { sendCoalesced } from "./coalesce";
import { ok } from "./envelope";
import { noteSendLatency } from "./latency-histogram";
import { fromHttpBatch, fromHttpMessage } from "./messages";
import { queueMetrics } from "./metrics";
import { readJson } from "./read-json";
import { callerRegion } from "./region";
import { notFound, storeMessages } from "./send";
import { cachedShardMap } from "./shard-map-cache";

/** POST .../messages: one message. Unlike Cloudflare, answers with its id. */
export async function sendMessage(request: Request, env: Env, ctx: ExecutionContext, accountId: string, queueRef: string): Promise<Response> {
  const started = Date.now();
  const message = fromHttpMessage(await readJson(request));
  const id = await sendCoalesced(env, { accountId, queueRef, region: regionOf(request, env) }, message);
  noteSendLatency(env, ctx, { accountId, queueRef }, started);
  return ok({ message_id: id });
}

/** POST .../messages/batch: up to 100 messages, stored all together or not at all. */
export async function sendBatch(request: Request, env: Env, ctx: ExecutionContext, accountId: string, queueRef: string): Promise<Response> {
  const started = Date.now();
  const batch = fromHttpBatch(await readJson(request));
  const ids = await storeMessages(env, { accountId, queueRef, region: regionOf(request, env) }, batch.messages, batch.delaySeconds);
  noteSendLatency(env, ctx, { accountId, queueRef }, started);
  return ok({ message_ids: ids });
}

/** GET .../metrics: backlog figures summed over the queue's shards, and per shard. */
export async function getMetrics(env: Env, accountId: string, queueRef: string): Promise<Response> {
  const map = await cachedShardMap(env, accountId, queueRef);
  if (!map) throw notFound(queueRef);
  return ok(await queueMetrics(env, map, { heartbeats: true }));
}

function regionOf(request: Request, env: Env): string {
  return callerRegion(request.cf as IncomingRequestCfProperties | undefined, serviceConfig(env));
}
