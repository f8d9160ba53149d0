import { coordinatorFor, shardMapKeyById } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import type { ShardMap } from "../../src/kernel/shard-map";
import { ok } from "./envelope";
import { lookupQueueId } from "../../src/routing/queue-lookup";

/**
 * GET .../queues/:queue/shards: the control plane laid open. The Coordinator's map
 * (version, every shard and its state), the copy brokers read from KV, each shard's
 * latest heartbeat and health, the consumer shards, and the autoscaler's recent
 * decisions with their reasons and figures.
 */
export async function getShards(env: Env, accountId: string, queueRef: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const coordinator = coordinatorFor(env, queueId);
  const [map, heartbeats, consumers, decisions, published] = await Promise.all([
    coordinator.shardMap(),
    coordinator.heartbeats(),
    coordinator.consumerShards(),
    coordinator.decisions(50),
    env.SHARD_MAPS.get<ShardMap>(shardMapKeyById(accountId, queueId), "json"),
  ]);
  const beatOf = new Map(heartbeats.map((b) => [b.name, b]));
  return ok({
    version: map?.version ?? null,
    published: published
      ? { version: published.version, published_at_ms: published.publishedAt, shards: published.shards }
      : null,
    shards: (map?.shards ?? []).map((s) => ({ ...s, heartbeat: beatOf.get(s.name) ?? null })),
    consumer_shards: consumers,
    decisions,
  });
}
