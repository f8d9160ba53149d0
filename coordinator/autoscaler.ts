/**
 * The storage-shard autoscaler, as a pure function of the shard list, each shard's
 * latest heartbeat, what the autoscaler remembers, and the time. The Coordinator runs
 * it every heartbeat interval and carries out what it returns; keeping it pure lets
 * scale-out, scale-in, hysteresis and bounds be tested with fake time and synthetic
 * heartbeats.
 *
 * It measures the shards: the load is what they took (heartbeats' messagesIn over their
 * period), never how the machine or the brokers fare. Per region:
 * - scale out when the active shards take more than the target each, to as many shards as
 *   keep each at the target (ceil(rate / target)), at least one more. Shards that take all
 *   they can (at capacity) report their capacity as their rate, which is above the target,
 *   so the count grows by capacity / target per step until the shards stop being full.
 *   Refusals alone never scale out: a shard refuses whenever its own second is used up,
 *   and the broker then places the send on another shard of the region.
 * - scale in once the load has stayed below a fraction of the target for scaleInAfterMs:
 *   straight to what the load needs with room to grow (half the target per shard), never
 *   below the minimum, so an idle queue is back at its minimum in one step.
 * - decide only on evidence from after the last change: every active shard (the new ones
 *   too) must have reported a period that began after it, else the next decision would
 *   count the load of a smaller map again. A shard that never reports is waited for
 *   at most two heartbeat intervals past the cooldown.
 * A draining shard is retired only once it reports, as draining, that it holds nothing.
 */

export interface ScalingPolicy {
  /** Messages per second one storage shard should take at most (production: ~1,000 requests/s per object). */
  targetPerShard: number;
  /** Messages per second a shard accepts before refusing as overloaded (SHARD_CAPACITY_PER_SECOND); 0: no such limit. */
  capacityPerShard: number;
  minPerRegion: number;
  maxPerRegion: number;
  /** Scale in when load per shard stays below the target * this. */
  scaleInBelow: number;
  /** ...for this long. */
  scaleInAfterMs: number;
  /** No two changes in a region closer than this. */
  cooldownMs: number;
  /** A heartbeat older than two intervals is not evidence of current load. */
  heartbeatIntervalMs: number;
}

export interface ShardView {
  name: string;
  region: string;
  state: "active" | "draining" | "retired" | "pending";
  createdAt: number;
  beat: {
    state: string;
    messagesIn: number;
    periodMs: number;
    backlog: number;
    leasedNow: number;
    refusals: number;
    receivedAt: number;
  } | null;
}

export interface ScalingMemory {
  /** Per region: since when load has been low, or absent. */
  lowSince: Record<string, number>;
  /** Per region: when the shard count last changed. */
  lastChange: Record<string, number>;
}

export interface Figures {
  activeShards: number;
  messagesPerSecond: number;
  perShard: number;
  target: number;
  refusals: number;
}

export type ScalingAction =
  | { kind: "add_shards"; region: string; count: number; reason: string; figures: Figures }
  | { kind: "drain_shard"; region: string; shard: string; reason: string; figures: Figures }
  | { kind: "retire_shard"; region: string; shard: string; reason: string; figures: Figures };

/**
 * Of a shard's capacity, the share the autoscaler aims at: the rest absorbs what random
 * placement puts on one shard more than on another within a second, so sends rarely
 * find their first shard full.
 */
export const CAPACITY_SHARE = 0.85;

/** The load per shard the autoscaler aims at: the configured target, and never above CAPACITY_SHARE of the capacity. */
export function effectiveTarget(policy: Pick<ScalingPolicy, "targetPerShard" | "capacityPerShard">): number {
  return policy.capacityPerShard > 0 ? Math.min(policy.targetPerShard, policy.capacityPerShard * CAPACITY_SHARE) : policy.targetPerShard;
}

export function decide(
  shards: ShardView[],
  regions: string[],
  policy: ScalingPolicy,
  memory: ScalingMemory,
  now: number,
): { actions: ScalingAction[]; memory: ScalingMemory } {
  const next: ScalingMemory = { lowSince: { ...memory.lowSince }, lastChange: { ...memory.lastChange } };
  const actions: ScalingAction[] = [];
  const target = effectiveTarget(policy);
  const fresh = (b: ShardView["beat"]) => b !== null && b.receivedAt >= now - 2 * policy.heartbeatIntervalMs && b.periodMs > 0;
  const periodStart = (b: NonNullable<ShardView["beat"]>) => b.receivedAt - b.periodMs;

  for (const region of regions) {
    const inRegion = shards.filter((s) => s.region === region);
    const active = inRegion.filter((s) => s.state === "active");
    let rate = 0;
    let refusals = 0;
    for (const s of active) {
      if (!fresh(s.beat)) continue;
      rate += (s.beat!.messagesIn * 1000) / s.beat!.periodMs;
      refusals += s.beat!.refusals;
    }
    const perShard = active.length ? rate / active.length : rate;
    const figures: Figures = { activeShards: active.length, messagesPerSecond: Math.round(rate), perShard: Math.round(perShard), target: Math.round(target), refusals };

    // Retire what has drained: the shard itself says it is draining and empty.
    for (const s of inRegion) {
      if (s.state !== "draining" || !fresh(s.beat)) continue;
      if (s.beat!.state === "draining" && s.beat!.backlog === 0 && s.beat!.leasedNow === 0) {
        actions.push({ kind: "retire_shard", region, shard: s.name, reason: "drained: no messages and no leases left", figures });
      }
    }

    if (active.length < policy.minPerRegion) {
      actions.push({ kind: "add_shards", region, count: policy.minPerRegion - active.length, reason: `below the minimum of ${policy.minPerRegion}`, figures });
      next.lastChange[region] = now;
      delete next.lowSince[region];
      continue;
    }
    const changed = next.lastChange[region] ?? -Infinity;
    if (now - changed < policy.cooldownMs) continue;
    // Evidence from after the change: each active shard reported a period that began after it.
    const reportedSince = active.every((s) => fresh(s.beat) && periodStart(s.beat!) >= changed);
    if (!reportedSince && now - changed < policy.cooldownMs + 2 * policy.heartbeatIntervalMs) continue;

    if (perShard > target) {
      delete next.lowSince[region];
      const wanted = Math.min(policy.maxPerRegion, Math.max(active.length + 1, Math.ceil(rate / target)));
      if (wanted > active.length) {
        const full = refusals > 0 ? `; ${refusals} send(s) refused as overloaded` : "";
        actions.push({ kind: "add_shards", region, count: wanted - active.length, reason: `${Math.round(perShard)} msg/s per shard > target ${Math.round(target)}${full}`, figures });
        next.lastChange[region] = now;
      }
      continue;
    }

    if (perShard < target * policy.scaleInBelow && active.length > policy.minPerRegion) {
      // Low since the start of the latest reports that all show it (not before the last change).
      const evidence = active.filter((s) => fresh(s.beat)).map((s) => periodStart(s.beat!));
      const since = (next.lowSince[region] ??= evidence.length ? Math.min(now, Math.max(changed, ...evidence)) : now);
      if (now - since >= policy.scaleInAfterMs) {
        // Enough shards for the load at half the target each: room to grow before the next scale-out.
        const wanted = Math.max(policy.minPerRegion, Math.min(active.length - 1, Math.ceil(rate / (target / 2))));
        // The emptiest shards drain fastest; among equals, the newest go first.
        const victims = [...active].sort((a, b) => (a.beat?.backlog ?? 0) - (b.beat?.backlog ?? 0) || b.createdAt - a.createdAt).slice(0, active.length - wanted);
        const reason = `${Math.round(perShard)} msg/s per shard < ${Math.round(target * policy.scaleInBelow)} for ${Math.round((now - since) / 1000)} s: ${active.length} -> ${wanted} shards`;
        for (const victim of victims) actions.push({ kind: "drain_shard", region, shard: victim.name, reason, figures });
        next.lastChange[region] = now;
        next.lowSince[region] = now;
      }
    } else {
      delete next.lowSince[region];
    }
  }
  return { actions, memory: next };
}
