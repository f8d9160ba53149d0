/**
 * Pull consumers over HTTP, in Cloudflare's shapes: pull leases messages from the queue's
 * storage shards (./pull-from-shards.ts), waiting for them when asked to (./long-poll.ts), and
 * cancel ends such a wait. What is done with the leases, ack and extend, is ./ack-api.ts.
 */
import { z } from "zod";
import { coordinatorFor } from "../../src/kernel/addressing";
import { MAX_VISIBILITY_TIMEOUT_MS } from "../../src/kernel/consumer-settings";
import type { Env } from "../../src/kernel/env";
import { randomHex } from "../../src/kernel/ids";
import { LIMITS, MAX_PULL_WAIT_MS } from "../../src/kernel/limits";
import { parseWith, wholeNumber as int } from "../../src/kernel/validate";
import { ok } from "./envelope";
import { leaseSigningKey, signLease, toBase64 } from "./lease-tokens";
import { waitAndLease } from "./long-poll";
import { leaseFromShards } from "./pull-from-shards";
import { pausedError, pullQueue } from "./pull-queue";
import { readJson, readOptionalJson } from "./read-json";
import { metadataMetrics } from "./rest-metrics";

/** Cloudflare's defaults for a pull without a batch size or visibility timeout. */
const DEFAULT_PULL_BATCH = 5;
const DEFAULT_VISIBILITY_MS = 30_000;

/** A pull's lease and an extend's are bounded as a consumer's visibility_timeout_ms is. */
export const visibilityTimeout = int(1000, MAX_VISIBILITY_TIMEOUT_MS, " ms");

/** A long poll's name of the client's choosing, by which POST .../messages/pull/cancel ends its wait. */
const waitId = z
  .string({ error: "must be a string" })
  .regex(/^[A-Za-z0-9_-]{16,64}$/, "must be 16 to 64 letters, digits, '-' or '_'");

/** What the handlers below validate with, and what the OpenAPI description says of them (broker/openapi/). */
export const pullBody = z
  .object({
    batch_size: int(1, LIMITS.maxBatchMessages).optional(),
    visibility_timeout_ms: visibilityTimeout.optional(),
    wait_time_ms: int(0, MAX_PULL_WAIT_MS, " ms").optional(),
    wait_id: waitId.optional(),
  })
  .strict();
export const cancelPullBody = z.object({ wait_id: waitId }).strict();

/** POST .../messages/pull */
export async function pullMessages(
  request: Request,
  env: Env,
  ctx: ExecutionContext,
  accountId: string,
  queueRef: string,
  tokenId?: string,
): Promise<Response> {
  const key = await leaseSigningKey(env);
  const body = parseWith(pullBody, await readOptionalJson(request));
  const { plan, consumer } = await pullQueue(env, accountId, queueRef, "pull");
  if (plan.paused) throw pausedError(plan);
  const leaseMs = body.visibility_timeout_ms ?? consumer.settings.visibility_timeout_ms ?? DEFAULT_VISIBILITY_MS;
  const wanted = body.batch_size ?? DEFAULT_PULL_BATCH;
  const waitMs = body.wait_time_ms ?? 0;
  const deadline = Date.now() + waitMs;
  let { leased, figures } = await leaseFromShards(env, plan, wanted, leaseMs, waitMs > 0 ? deadline : undefined);
  if (leased.length === 0 && waitMs > 0) {
    const wait = { id: body.wait_id ?? randomHex(16), named: body.wait_id !== undefined, token: tokenId };
    ({ leased, figures } = await waitAndLease(env, ctx, request.signal, wait, plan, wanted, leaseMs, deadline, {
      leased,
      figures,
    }));
  }
  const utf8 = new TextDecoder();
  const messages = await Promise.all(
    leased.map(async ({ shard, message: m }) => ({
      id: m.id,
      // Cloudflare's encoding: text as it is, everything else base64 of the stored bytes.
      body: m.contentType === "text" ? utf8.decode(m.body) : toBase64(m.body),
      timestamp_ms: m.enqueuedAt,
      attempts: m.attempts,
      lease_id: await signLease(key, {
        accountId,
        queueId: plan.queueId,
        shard,
        messageId: m.id,
        leaseId: m.leaseId,
        attempts: m.attempts,
      }),
      metadata: { "CF-Content-Type": m.contentType },
      // Beyond Cloudflare: the key it was sent with (docs/ordered-lanes.md).
      ...(m.orderingKey !== undefined ? { ordering_key: m.orderingKey } : {}),
    })),
  );
  return ok({ message_backlog_count: figures.backlogCount, messages, metadata: { metrics: metadataMetrics(figures) } });
}

/**
 * POST .../messages/pull/cancel: the client of the long poll named `wait_id` went away (it
 * aborted the request). The pull stops waiting and leases nothing; a wake-up it already
 * took goes to the next waiting pull. `cancelled` is false, with the reason, when the pull
 * had answered with messages ("answered": nobody else is woken) or no such pull was waiting
 * or just woken ("not_waiting": it answered empty, never waited, or was cancelled already).
 */
export async function cancelPull(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const body = parseWith(cancelPullBody, await readJson(request));
  const { plan } = await pullQueue(env, accountId, queueRef, "pull/cancel");
  return ok(await coordinatorFor(env, plan.queueId).cancelWait(body.wait_id));
}
