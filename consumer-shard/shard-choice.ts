/**
 * Which storage shard a consumer round leases from next, and the figures it weighs them by:
 * kept from round to round, each shard's freshest (its own lease's, or a peer's as handed on).
 */
import type { ShardBacklog } from "../src/kernel/figures";
import type { DeliveryPlan } from "../src/kernel/shard-map";

type PlannedShard = DeliveryPlan["shards"][number];

/**
 * A shard picked at random, weighted by its backlog plus one: busy shards are visited
 * more, and a small (or not yet reported) shard always keeps a chance.
 */
export function pickWeighted(
  shards: PlannedShard[],
  weights: Map<string, number | null>,
  random: () => number = Math.random,
): PlannedShard | undefined {
  if (shards.length === 0) return undefined;
  const w = shards.map((s) => 1 + Math.max(0, weights.get(s.name) ?? 0));
  let r = random() * w.reduce((a, b) => a + b, 0);
  for (let i = 0; i < shards.length; i++) {
    r -= w[i]!;
    if (r < 0) return shards[i];
  }
  return shards[shards.length - 1];
}

/** Keeps `b` unless fresher figures of its shard are kept (ShardBacklog.at; none counts as oldest). */
export function keepFresher(figures: Map<string, ShardBacklog>, b: ShardBacklog): void {
  const had = figures.get(b.shard);
  if (!had || (had.at ?? 0) <= (b.at ?? 0)) figures.set(b.shard, b);
}
