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
import type { ShardBacklog } from "../kernel/figures";

export interface QueueFigures {
  backlogCount: number;
  backlogBytes: number;
  /** When the oldest message still in the queue arrived, or null when none (or not known). */
  oldestAt: number | null;
}

/** Sums the shards' figures, taking each of `exact` in place of what they say of its shard. */
export function sumFigures(
  shards: ReadonlyArray<ShardBacklog | null>,
  exact: readonly ShardBacklog[] = [],
): QueueFigures {
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
export function bindingMetrics(f: QueueFigures): {
  backlogCount: number;
  backlogBytes: number;
  oldestMessageTimestamp?: Date;
} {
  return {
    backlogCount: f.backlogCount,
    backlogBytes: f.backlogBytes,
    ...(f.oldestAt !== null ? { oldestMessageTimestamp: new Date(f.oldestAt) } : {}),
  };
}

/** As the REST answers carry them (Cloudflare's API schema, QueueMetrics): the oldest in ms, 0 when unknown. */
export function restMetrics(f: QueueFigures): {
  backlogCount: number;
  backlogBytes: number;
  oldestMessageTimestampMs: number;
} {
  return { backlogCount: f.backlogCount, backlogBytes: f.backlogBytes, oldestMessageTimestampMs: f.oldestAt ?? 0 };
}

/**
 * How long a broker isolate counts a shard's figures current without a newer word of them.
 * Appends bring the shard written to exactly and, from that shard, its peers' figures as of
 * its latest heartbeat; the Coordinator is read only for a shard heard of by no answer yet,
 * or one not heard of for this long (a shard whose writer sleeps, or a new isolate).
 */
export const FIGURES_REFRESH_MS = 60_000;
/** A refresh not done by then was cut off with its request: another request may try. */
const REFRESH_GIVE_UP_MS = 5000;

interface Known {
  figures: ShardBacklog;
  /** When they were true (ShardBacklog.at). */
  at: number;
  /** When the broker last had word that they are the latest: `at`, or its own read of the Coordinator since. */
  checked: number;
}
interface Figures {
  shards: Map<string, Known>;
  /** The shards that may hold messages, from the latest map a send went by; undefined before one. */
  live: readonly string[] | undefined;
  refreshingSince: number | null;
}
const cached = new Map<string, Figures>();

/** Keeps `b`, true at `at`, unless fresher figures of its shard are kept already; either way they are the latest as of `checked`. */
function keep(entry: Figures, b: ShardBacklog, at: number, checked = at): void {
  const had = entry.shards.get(b.shard);
  if (had && had.at > at) had.checked = Math.max(had.checked, checked);
  else entry.shards.set(b.shard, { figures: b, at, checked: Math.max(checked, had?.checked ?? -Infinity) });
}

/** What a send learned of the queue's shards, besides the exact figures of those it wrote to. */
export interface SendFigures {
  /** Other shards' figures as the shards written to last heard them (AppendResult.peers). */
  peers?: readonly ShardBacklog[];
  /** The shards that may hold messages (not retired) in the map the send went by. */
  live?: readonly string[];
}

/**
 * The queue's figures after a send: exact for the shards the send wrote to, and for every
 * other shard not retired the freshest word this isolate has of it (the peers' figures each
 * append brings, or the Coordinator's). The Coordinator is read only when a shard of the map
 * has no word fresher than FIGURES_REFRESH_MS; a queue whose one shard took the send never
 * needs it. While one request refreshes them, the others use the figures they have. A
 * request never awaits an RPC another request started: workerd may take a request that
 * waits only on another's I/O for hung and cancel it (src/routing/coalesce.ts). A failed
 * read costs the send nothing: the figures it has, or the shards' own, stand.
 */
export async function figuresAfterSend(
  env: Env,
  queueId: string,
  mine: readonly ShardBacklog[],
  learned: SendFigures = {},
  now = Date.now(),
): Promise<QueueFigures> {
  let entry = cached.get(queueId);
  if (!entry) cached.set(queueId, (entry = { shards: new Map(), live: undefined, refreshingSince: null }));
  for (const b of learned.peers ?? []) keep(entry, b, b.at ?? 0);
  for (const b of mine) keep(entry, b, b.at ?? now);
  if (learned.live) entry.live = learned.live;
  const exact = new Set(mine.map((b) => b.shard));
  const stale = (name: string) =>
    !exact.has(name) && (entry.shards.get(name)?.checked ?? -Infinity) < now - FIGURES_REFRESH_MS;
  // Without a map (an idempotent send that stored nothing), any shard heard of counts: a read when none is fresh.
  const due = entry.live ? entry.live.some(stale) : entry.shards.size === 0 || [...entry.shards.keys()].every(stale);
  const refreshing = entry.refreshingSince !== null && now - entry.refreshingSince < REFRESH_GIVE_UP_MS;
  if (due && !refreshing) {
    entry.refreshingSince = now;
    try {
      const shards = await coordinatorFor(env, queueId).backlogByShard();
      const read = Date.now();
      // A shard the Coordinator has no report of holds nothing it knows of: counted as empty until one says otherwise.
      for (const name of entry.live ?? [])
        if (!shards.some((b) => b.shard === name))
          keep(entry, { shard: name, count: 0, bytes: 0, oldestAt: null }, -1, read);
      for (const b of shards) keep(entry, b, b.at ?? 0, read);
    } catch (err) {
      console.error(`queue figures of ${queueId}: the Coordinator did not answer:`, err);
    } finally {
      entry.refreshingSince = null;
    }
  }
  return sumFigures(queueFiguresOf(entry), mine);
}

/** The figures kept of the shards that may hold messages. */
function queueFiguresOf(entry: Figures): ShardBacklog[] {
  const live = entry.live ? new Set(entry.live) : null;
  return [...entry.shards.values()].filter((k) => !live || live.has(k.figures.shard)).map((k) => k.figures);
}

/** Forgets what this isolate keeps of every queue's figures (tests). */
export function forgetFigures(): void {
  cached.clear();
}
