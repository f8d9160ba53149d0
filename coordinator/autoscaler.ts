/**
 * The storage-shard autoscaler, as a pure function of the shard list, each shard's
 * latest heartbeat, what the autoscaler remembers, and the time. The Coordinator runs
 * it every heartbeat interval and carries out what it returns; keeping it pure lets
 * scale-out, scale-in, hysteresis and bounds be tested with fake time and synthetic
 * heartbeats.
 *
 * It measures the shards: the load is what they took (heartbeats' messagesIn over their
 * period), never how the machine or the brokers fare. With a capacity set
 * (SHARD_CAPACITY_PER_SECOND), a shard that refused sends for want of room counts at its
 * capacity (it was full, and a full shard's own count swings with the batches it let into
 * debt or turned away), and none counts above it: more in one period is its reserve or
 * a debt, not a rate it can hold. Per region:
 * - scale out when the load per shard is above the target by more than SCALE_OUT_TOLERANCE
 *   in two readings in a row (every shard reported again in between), to as many shards as
 *   carry the lower of the two loads at the target, ceil(load / target), at least one more.
 *   One reading alone may be a burst, not a load: sends held back by full shards or by a
 *   blocked producer going through at once, on the second's worth a shard keeps in reserve.
 *   Full shards count at their capacity, which is above the target, so the count grows by
 *   capacity / target per step until the shards stop being full: what full shards were
 *   asked beyond it cannot be seen from them. Refusals alone never
 *   scale out: a shard refuses whenever its own second is used up, and the broker then
 *   places the send on another shard of the region.
 * - scale in once the load has stayed below a fraction of the target for scaleInAfterMs:
 *   straight to what the load needs with room to grow (half the target per shard), never
 *   below the minimum, so an idle queue is back at its minimum in one step.
 * - decide only on evidence from after the last change has settled: every active shard (the
 *   new ones too) must have reported a period that began at least a heartbeat interval
 *   after it. Reports from before would count the load of a smaller map again, and the
 *   first interval after a change is a transition: brokers learn of the new shards, and
 *   sends held back while every shard was full go through at once. A shard that never
 *   reports is waited for at most three heartbeat intervals past the cooldown.
 * It also says when a scale-in comes due, so the Coordinator can decide then rather than
 * at its next tick.
 * A draining shard is retired only once it reports, as draining, that it holds nothing (a report
 * as old as the shard's sleep counts: it has not changed since).
 */

export interface ScalingPolicy {
  /** Messages per second one storage shard should take at most (production: ~1,000 requests/s per object). */
  targetPerShard: number;
  /** Messages per second a shard accepts before refusing as overloaded (SHARD_CAPACITY_PER_SECOND); 0: no such limit. */
  capacityPerShard: number;
  /** The fewest active shards a region keeps: one figure for every region, or one per region (absent: 0). */
  minPerRegion: number | Readonly<Record<string, number>>;
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
    /** When the shard said it reports next (on the slow cadence, minutes on); absent: an interval on. */
    nextReportAt?: number;
    /** Of messagesIn, those sent from other regions, by region. */
    inFrom?: Readonly<Record<string, number>>;
  } | null;
}

export interface ScalingMemory {
  /** Per region: since when load has been low, or absent. */
  lowSince: Record<string, number>;
  /** Per region: when the shard count last changed. */
  lastChange: Record<string, number>;
  /** Per region: the reading that first showed the load above the target (when the latest of its reports' periods began) and that load. Absent from memory saved before it. */
  high?: Record<string, { since: number; load: number }>;
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

/**
 * How far above the target the load per shard must be before shards are added. A report
 * covers one heartbeat interval, and sends arrive in coalesced batches, so a steady load
 * reads a few percent either side of its mean from one report to the next; a region sized
 * at the target would otherwise add a shard on a high reading.
 */
export const SCALE_OUT_TOLERANCE = 0.1;

/**
 * A region without a shard of its own gets one once the sends from it exceed this share of
 * the target per shard in two readings in a row (docs/cost.md, "Regions"); its last shard is
 * drained only below a tenth of that, so a region near the line does not gain and lose one
 * over and over.
 */
export const OWN_SHARD_SHARE = 0.3;
export const LAST_SHARD_SHARE = OWN_SHARD_SHARE / 10;

/** The load per shard the autoscaler aims at: the configured target, and never above CAPACITY_SHARE of the capacity. */
export function effectiveTarget(policy: Pick<ScalingPolicy, "targetPerShard" | "capacityPerShard">): number {
  return policy.capacityPerShard > 0
    ? Math.min(policy.targetPerShard, policy.capacityPerShard * CAPACITY_SHARE)
    : policy.targetPerShard;
}

export function decide(
  shards: ShardView[],
  regions: string[],
  policy: ScalingPolicy,
  memory: ScalingMemory,
  now: number,
): { actions: ScalingAction[]; memory: ScalingMemory; wakeAt: number | null } {
  const next: ScalingMemory = {
    lowSince: { ...memory.lowSince },
    lastChange: { ...memory.lastChange },
    high: { ...memory.high },
  };
  const high = next.high!;
  const actions: ScalingAction[] = [];
  let wakeAt: number | null = null;
  const target = effectiveTarget(policy);
  // A shard on the slow cadence (its traffic far below the target) stays fresh until its next report is late.
  const fresh = (b: ShardView["beat"]) =>
    b !== null &&
    (b.receivedAt >= now - 2 * policy.heartbeatIntervalMs ||
      (b.nextReportAt ?? 0) + policy.heartbeatIntervalMs >= now) &&
    b.periodMs > 0;
  const periodStart = (b: NonNullable<ShardView["beat"]>) => b.receivedAt - b.periodMs;

  for (const region of regions) {
    const inRegion = shards.filter((s) => s.region === region);
    const active = inRegion.filter((s) => s.state === "active");
    let rate = 0;
    let load = 0;
    let refusals = 0;
    let full = 0;
    for (const s of active) {
      if (!fresh(s.beat)) continue;
      const took = (s.beat!.messagesIn * 1000) / s.beat!.periodMs;
      const refused = policy.capacityPerShard > 0 && s.beat!.refusals > 0;
      rate += took;
      load +=
        policy.capacityPerShard > 0
          ? refused
            ? policy.capacityPerShard
            : Math.min(took, policy.capacityPerShard)
          : took;
      refusals += s.beat!.refusals;
      if (refused) full++;
    }
    const perShard = active.length ? rate / active.length : rate;
    const loadPerShard = active.length ? load / active.length : load;
    const figures: Figures = {
      activeShards: active.length,
      messagesPerSecond: Math.round(rate),
      perShard: Math.round(perShard),
      target: Math.round(target),
      refusals,
    };

    // Retire what has drained: the shard itself says it is draining and empty. That report may be
    // old: a draining shard takes no new messages, and whatever changes it wakes it to report, so
    // one that sleeps after saying it is empty is empty still.
    for (const s of inRegion) {
      if (s.state !== "draining" || !s.beat) continue;
      if (s.beat!.state === "draining" && s.beat!.backlog === 0 && s.beat!.leasedNow === 0) {
        actions.push({
          kind: "retire_shard",
          region,
          shard: s.name,
          reason: "drained: no messages and no leases left",
          figures,
        });
      }
    }

    const min = typeof policy.minPerRegion === "number" ? policy.minPerRegion : (policy.minPerRegion[region] ?? 0);
    if (active.length === 0 && min === 0) {
      // Its sends go to other regions' shards: it gets one of its own when they are worth one.
      const from = fromRegion(shards, region, fresh);
      const reports = shards.filter((s) => s.state === "active" && fresh(s.beat)).map((s) => periodStart(s.beat!));
      const changed = next.lastChange[region] ?? -Infinity;
      if (from < target * OWN_SHARD_SHARE || reports.length === 0 || now - changed < policy.cooldownMs) {
        delete high[region];
        continue;
      }
      const first = high[region];
      if (!first || first.since < changed) {
        high[region] = { since: Math.max(...reports), load: from };
        continue;
      }
      if (!reports.every((start) => start > first.since)) continue;
      delete high[region];
      const reason = `${Math.round(from)} msg/s sent from ${region}, which has no shard of its own, >= ${Math.round(target * OWN_SHARD_SHARE)} in two readings in a row`;
      actions.push({
        kind: "add_shards",
        region,
        count: 1,
        reason,
        figures: { ...figures, messagesPerSecond: Math.round(from) },
      });
      next.lastChange[region] = now;
      continue;
    }
    if (active.length < min) {
      actions.push({
        kind: "add_shards",
        region,
        count: min - active.length,
        reason: `below the minimum of ${min}`,
        figures,
      });
      next.lastChange[region] = now;
      delete next.lowSince[region];
      delete high[region];
      continue;
    }
    const changed = next.lastChange[region] ?? -Infinity;
    if (now - changed < policy.cooldownMs) continue;
    // Evidence from after the change has settled: each active shard reported a period that began an interval after it.
    const settled = active.every((s) => fresh(s.beat) && periodStart(s.beat!) >= changed + policy.heartbeatIntervalMs);
    if (!settled && now - changed < policy.cooldownMs + 3 * policy.heartbeatIntervalMs) continue;

    const reports = active.filter((s) => fresh(s.beat)).map((s) => periodStart(s.beat!));
    if (loadPerShard > target * (1 + SCALE_OUT_TOLERANCE)) {
      delete next.lowSince[region];
      const first = high[region];
      if (!first || first.since < changed) {
        high[region] = { since: Math.max(...reports), load };
        continue;
      }
      // Wait for every shard's next report: the same reports read again are not a second reading.
      if (!reports.every((start) => start > first.since)) continue;
      delete high[region];
      const wanted = Math.min(
        policy.maxPerRegion,
        Math.max(active.length + 1, Math.ceil(Math.min(first.load, load) / target)),
      );
      if (wanted > active.length) {
        const why =
          full > 0
            ? ` (${full} shard(s) full, counted at their capacity; ${refusals} send(s) refused as overloaded)`
            : "";
        actions.push({
          kind: "add_shards",
          region,
          count: wanted - active.length,
          reason: `${Math.round(loadPerShard)} msg/s per shard > target ${Math.round(target)} in two readings in a row${why}`,
          figures,
        });
        next.lastChange[region] = now;
      }
      continue;
    }
    delete high[region];

    if (perShard < target * policy.scaleInBelow && active.length > min) {
      // Low since the start of the latest reports that all show it (not before the last change).
      const since = (next.lowSince[region] ??= reports.length ? Math.min(now, Math.max(changed, ...reports)) : now);
      if (now - since >= policy.scaleInAfterMs) {
        // Enough shards for the load at half the target each: room to grow before the next scale-out.
        // A region's last shard, kept at no minimum, goes only once its own sends are well below what gave it one.
        const floor = min === 0 && rate >= target * LAST_SHARD_SHARE ? 1 : min;
        const wanted = Math.max(floor, Math.min(active.length - 1, Math.ceil(rate / (target / 2))));
        if (wanted >= active.length) continue;
        // The emptiest shards drain fastest; among equals, the newest go first.
        const victims = [...active]
          .sort((a, b) => (a.beat?.backlog ?? 0) - (b.beat?.backlog ?? 0) || b.createdAt - a.createdAt)
          .slice(0, active.length - wanted);
        const reason = `${Math.round(perShard)} msg/s per shard < ${Math.round(target * policy.scaleInBelow)} for ${Math.round((now - since) / 1000)} s: ${active.length} -> ${wanted} shards`;
        for (const victim of victims)
          actions.push({ kind: "drain_shard", region, shard: victim.name, reason, figures });
        next.lastChange[region] = now;
        next.lowSince[region] = now;
      } else {
        wakeAt = Math.min(wakeAt ?? Infinity, since + policy.scaleInAfterMs);
      }
    } else {
      delete next.lowSince[region];
    }
  }
  return { actions, memory: next, wakeAt };
}

/** Messages per second sent from `region` to shards of other regions, by their fresh reports. */
function fromRegion(shards: readonly ShardView[], region: string, fresh: (b: ShardView["beat"]) => boolean): number {
  let perSecond = 0;
  for (const s of shards) {
    if (s.state !== "active" || !fresh(s.beat) || !s.beat!.inFrom) continue;
    perSecond += ((s.beat!.inFrom[region] ?? 0) * 1000) / s.beat!.periodMs;
  }
  return perSecond;
}
