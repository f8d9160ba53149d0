/**
 * The storage-shard autoscaler, as a pure function of the shard list, each shard's
 * latest heartbeat, what the autoscaler remembers, and the time. The Coordinator runs
 * it every heartbeat interval and carries out what it returns; keeping it pure lets
 * scale-out, scale-in, hysteresis and bounds be tested with fake time and synthetic
 * heartbeats.
 *
 * Per region: scale out when the active shards take more than the target rate each
 * (messages/s, from heartbeats) or refused sends as overloaded; scale in, one shard at
 * a time, only after the load has stayed below a fraction of the target for a while;
 * never below the minimum or above the maximum; wait a cooldown after every change, so
 * new shards report before the next decision and the count does not flap. A draining
 * shard is retired only once it reports, as draining, that it holds nothing.
 */

export interface ScalingPolicy {
  /** Messages per second one storage shard should take at most (production: ~1,000 requests/s per object). */
  targetPerShard: number;
  minPerRegion: number;
  maxPerRegion: number;
  /** Scale in when load per shard stays below targetPerShard * this. */
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

export function decide(
  shards: ShardView[],
  regions: string[],
  policy: ScalingPolicy,
  memory: ScalingMemory,
  now: number,
): { actions: ScalingAction[]; memory: ScalingMemory } {
  const next: ScalingMemory = { lowSince: { ...memory.lowSince }, lastChange: { ...memory.lastChange } };
  const actions: ScalingAction[] = [];
  const fresh = (b: ShardView["beat"]) => b !== null && b.receivedAt >= now - 2 * policy.heartbeatIntervalMs;

  for (const region of regions) {
    const inRegion = shards.filter((s) => s.region === region);
    const active = inRegion.filter((s) => s.state === "active");
    let rate = 0;
    let refusals = 0;
    for (const s of active) {
      if (!fresh(s.beat) || s.beat!.periodMs <= 0) continue;
      rate += (s.beat!.messagesIn * 1000) / s.beat!.periodMs;
      refusals += s.beat!.refusals;
    }
    const perShard = active.length ? rate / active.length : rate;
    const figures: Figures = { activeShards: active.length, messagesPerSecond: Math.round(rate), perShard: Math.round(perShard), target: policy.targetPerShard, refusals };

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
    if (now - (next.lastChange[region] ?? -Infinity) < policy.cooldownMs) continue;

    if (perShard > policy.targetPerShard || refusals > 0) {
      delete next.lowSince[region];
      // Room for 30% more than the current load, at least one more shard, within the maximum.
      const wanted = Math.min(policy.maxPerRegion, Math.max(active.length + 1, Math.ceil(rate / (policy.targetPerShard * 0.7))));
      if (wanted > active.length) {
        const why = refusals > 0 ? `${refusals} send(s) refused as overloaded` : `${Math.round(perShard)} msg/s per shard > target ${policy.targetPerShard}`;
        actions.push({ kind: "add_shards", region, count: wanted - active.length, reason: why, figures });
        next.lastChange[region] = now;
      }
      continue;
    }

    if (perShard < policy.targetPerShard * policy.scaleInBelow && active.length > policy.minPerRegion) {
      const since = (next.lowSince[region] ??= now);
      if (now - since >= policy.scaleInAfterMs) {
        // The emptiest shard drains fastest; among equals, the newest goes first.
        const victim = [...active].sort((a, b) => (a.beat?.backlog ?? 0) - (b.beat?.backlog ?? 0) || b.createdAt - a.createdAt)[0]!;
        actions.push({
          kind: "drain_shard",
          region,
          shard: victim.name,
          reason: `${Math.round(perShard)} msg/s per shard < ${Math.round(policy.targetPerShard * policy.scaleInBelow)} for ${Math.round((now - since) / 1000)} s`,
          figures,
        });
        next.lastChange[region] = now;
        next.lowSince[region] = now;
      }
    } else {
      delete next.lowSince[region];
    }
  }
  return { actions, memory: next };
}
