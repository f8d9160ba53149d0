/**
 * What the dashboard reads beyond the queue API: a queue's last hour (kept by its
 * Coordinator from heartbeats) and a peek at its ready messages, bodies included,
 * that leases nothing and counts no attempt.
 */
import { z } from "zod";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { unavailable } from "../../src/kernel/errors";
import { notRetired } from "../../src/kernel/protocol";
import { lookupQueue, lookupQueueId } from "../../src/routing/queue-lookup";
import { ok } from "./envelope";
import { toBase64 } from "./lease-tokens";
import { parseCount } from "../../src/kernel/validate";

const MAX_PEEK = 100;
const DEFAULT_PEEK = 10;

/** The query GET .../messages takes, for the handler and the OpenAPI description alike. */
export const peekQuery = z.object({ limit: z.number().int().min(1).max(MAX_PEEK).default(DEFAULT_PEEK) });

/** GET .../series: points of backlog, bytes, rates and shards, oldest first. */
export async function getSeries(env: Env, accountId: string, queueRef: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const { stepMs, points } = await coordinatorFor(env, queueId).series();
  return ok({ step_ms: stepMs, points });
}

/** GET .../messages?limit=N: up to N ready messages, oldest first over all shards. */
export async function peekMessages(url: URL, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const limit = parseCount(peekQuery.shape.limit, url.searchParams.get("limit"), "limit", `must be a whole number from 1 to ${MAX_PEEK}`);
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const outcomes = await Promise.allSettled(notRetired(map.shards).map((s) => storageShardFor(env, s.name, s.region).peekReady(map.queueId, limit)));
  if (outcomes.every((o) => o.status === "rejected") && outcomes.length > 0) throw unavailable("no storage shard of this queue answered; retry");
  const utf8 = new TextDecoder();
  const found = outcomes.flatMap((o) => (o.status === "fulfilled" ? o.value : []));
  found.sort((a, b) => a.enqueuedAt - b.enqueuedAt);
  const messages = found.slice(0, limit).map((m) => ({
    id: m.id,
    // As pull encodes them: text as it is, everything else base64 of the stored bytes.
    body: m.contentType === "text" ? utf8.decode(m.body) : toBase64(m.body),
    content_type: m.contentType,
    attempts: m.attempts,
    timestamp_ms: m.enqueuedAt,
    size: m.size,
    ...(m.orderingKey !== undefined ? { ordering_key: m.orderingKey } : {}),
  }));
  return ok({ messages, incomplete: outcomes.some((o) => o.status === "rejected") });
}
