/**
 * The queue-wide figures Cloudflare's answers carry since its Queues changelog of
 * 2026-04-28: `metadata.metrics` of `send()`, `sendBatch()`, `MessageBatch` and the REST
 * send, batch and pull answers. Summed over the queue's storage shards: exact for the
 * shard the call just wrote to or leased from, the latest heartbeat (at most a heartbeat
 * interval old) for every other one. Cloudflare calls these best-effort too; reading every
 * shard on every send would cost one RPC per shard per send.
 */
import { coordinatorFor } from "../kernel/addressing";
import type { Env } from "../kernel/env";
import type { ShardBacklog } from "../kernel/protocol";

export interface QueueFigures {
  backlogCount: number;
  backlogBytes: number;
  /** When the oldest message still in the queue arrived, or null when none (or not known). */
  oldestAt: number | null;
}

/** Sums the shards' figures, taking each of `exact` in place of what they say of its shard. */
export function sumFigures(shards: ReadonlyArray<ShardBacklog | null>, exact: readonly ShardBacklog[] = []): QueueFigures {
  let backlogCount = 0;
  let backlogBytes = 0;
  let oldestAt: number | null = null;
  const add = (b: ShardBacklog) => {
    backlogCount += b.count;
    backlogBytes += b.bytes;
    if (b.oldestAt !== null && (oldestAt === null || b.oldestAt < oldestAt)) oldestAt = b.oldestAt;
  };
  const known = new Set(exact.map((b) => b.shard));
  for (const b of shards) if (b && !known.has(b.shard)) add(b);
  for (const b of exact) add(b);
  return { backlogCount, backlogBytes, oldestAt };
}

/** As the Workers binding types them (QueueSendMetrics, MessageBatchMetrics): the oldest as a Date, absent when empty. */
export function bindingMetrics(f: QueueFigures): { backlogCount: number; backlogBytes: number; oldestMessageTimestamp?: Date } {
  return { backlogCount: f.backlogCount, backlogBytes: f.backlogBytes, ...(f.oldestAt !== null ? { oldestMessageTimestamp: new Date(f.oldestAt) } : {}) };
}

/** As the REST answers carry them (Cloudflare's API schema, QueueMetrics): the oldest in ms, 0 when unknown. */
export function restMetrics(f: QueueFigures): { backlogCount: number; backlogBytes: number; oldestMessageTimestampMs: number } {
  return { backlogCount: f.backlogCount, backlogBytes: f.backlogBytes, oldestMessageTimestampMs: f.oldestAt ?? 0 };
}

/** How long an isolate reuses a queue's per-shard figures: heartbeats come every few seconds anyway. */
const FIGURES_TTL_MS = 1000;
/** A refresh not done by then was cut off with its request: another request may try. */
const REFRESH_GIVE_UP_MS = 5000;
const cached = new Map<string, { at: number; shards: ShardBacklog[]; refreshingSince: number | null }>();

/**
 * The queue's figures after a send: the Coordinator's per-shard figures, read at most
 * about once a second per isolate and queue, with the exact figures of the shards the
 * send wrote to. While one request refreshes them, the others use the figures they have.
 * A request never awaits an RPC another request started: workerd may take a request that
 * waits only on another's I/O for hung and cancel it (src/routing/coalesce.ts). A failed
 * read costs the send nothing: the figures it has, or the shards' own, stand.
 */
export async function figuresAfterSend(env: Env, queueId: string, mine: readonly ShardBacklog[], now = Date.now()): Promise<QueueFigures> {
  const entry = cached.get(queueId);
  const refreshing = entry?.refreshingSince != null && now - entry.refreshingSince < REFRESH_GIVE_UP_MS;
  if (entry && (now - entry.at <= FIGURES_TTL_MS || refreshing)) return sumFigures(entry.shards, mine);
  if (entry) entry.refreshingSince = now;
  try {
    const shards = await coordinatorFor(env, queueId).backlogByShard();
    cached.set(queueId, { at: Date.now(), shards, refreshingSince: null });
    return sumFigures(shards, mine);
  } catch (err) {
    if (entry) entry.refreshingSince = null;
    console.error(`queue figures of ${queueId}: the Coordinator did not answer:`, err);
    return sumFigures(entry?.shards ?? [], mine);
  }
}
