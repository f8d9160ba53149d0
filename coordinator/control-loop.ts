/**
 * The Coordinator's control loop, run from its alarm every heartbeat interval: it
 * finishes changes a reset interrupted, reconciles shards with the map, runs the two
 * scaling policies (storage: autoscaler.ts, consumers: consumer-scaler.ts) and carries
 * out their decisions, and forgets long-retired shards. Its rows are written through
 * the queue store (queue-store.ts); the storage and consumer shards are told here.
 */
import { consumerShardFor, storageShardFor } from "../src/kernel/addressing";
import { minShardsIn, serviceConfig } from "../src/kernel/config";
import { MAX_CONCURRENCY } from "../src/kernel/consumer-settings";
import type { Env } from "../src/kernel/env";
import type { ShardState } from "../src/kernel/shard-map";
import type { ShardHeartbeat } from "../src/kernel/heartbeat";
import type { FaultPoint } from "../src/kernel/test-hooks";
import { decide, type ScalingAction, type ShardView } from "./autoscaler";
import { scaleConsumers, type ConsumerWake } from "./consumer-scaler";
import { readConsumers } from "./consumers";
import { carryForgottenShard } from "./counters";
import { loadMemory, logDecision, saveMemory, type Decision } from "./decisions";
import { forgetStorageBeat, readConsumerShards, readStorageBeats } from "./heartbeats";
import { commitEpoch, epochUnsettled, pushEpoch } from "./epochs";
import type { QueueRecord, QueueStore } from "./queue-store";

/** Retired shards stay in the map this long, so brokers with older maps learn of them. */
const KEEP_RETIRED_MS = 10 * 60_000;
/** Scale in only after a shard's share of the target stays below this. */
const SCALE_IN_BELOW = 0.3;

export interface ControlLoopDeps {
  store: QueueStore;
  /** The Coordinator's SQLite, for what the loop keeps beside the store: heartbeats, decisions, the autoscaler's memory. */
  sql: SqlStorage;
  env: Env;
  /** The fault harness's abort points (src/kernel/test-hooks.ts); a no-op unless armed. */
  faultPoint(point: FaultPoint): void;
  /** The delivery plan's version (Coordinator.deliveryPlan), carried by every wake-up of a consumer shard. */
  planVersion(): string;
}

export class ControlLoop {
  private readonly store: QueueStore;
  private readonly sql: SqlStorage;
  private readonly env: Env;
  /** Shards whose state change this instance is carrying out: their rows in state_changes are not cut short. */
  private readonly changing = new Set<string>();

  constructor(private readonly deps: ControlLoopDeps) {
    this.store = deps.store;
    this.sql = deps.sql;
    this.env = deps.env;
  }

  /** Runs the storage autoscaler and carries out its decisions; returns when it should run again for a scale-in coming due, if sooner than the next tick may be. */
  async autoscale(now: number): Promise<number | null> {
    const config = serviceConfig(this.env);
    const beats = new Map(this.heartbeats(now).map((b) => [b.name, b]));
    const views: ShardView[] = this.store.allShards().map((s) => {
      const b = beats.get(s.name);
      return {
        name: s.name,
        region: s.region,
        state: s.state,
        createdAt: s.created_at,
        // A sleeping shard's activity is of a period that is over: it takes no traffic now.
        beat: b
          ? {
              state: b.state,
              messagesIn: b.sleeping ? 0 : b.messages_in,
              periodMs: b.period_ms,
              backlog: b.backlog_count,
              leasedNow:
                b.leased_now + (b.handoffs ?? 0) /* owed hand-offs keep a drained shard from retiring, as leases do */,
              refusals: b.sleeping ? 0 : b.refusals,
              receivedAt: b.received_at,
              inFrom: b.sleeping ? undefined : (b.in_from ?? undefined),
              ...(b.next_report_at != null ? { nextReportAt: b.next_report_at } : {}),
            }
          : null,
      };
    });
    const policy = {
      targetPerShard: config.targetPerShard,
      capacityPerShard: config.shardCapacityPerSecond,
      minPerRegion: Object.fromEntries(config.regions.map((r) => [r, minShardsIn(config, r)])),
      maxPerRegion: Math.max(config.shardsPerRegion, config.maxShardsPerRegion),
      scaleInBelow: SCALE_IN_BELOW,
      scaleInAfterMs: config.scaleInAfterMs,
      cooldownMs: 2 * config.heartbeatIntervalMs,
      heartbeatIntervalMs: config.heartbeatIntervalMs,
    };
    const { actions, memory, wakeAt } = decide(views, config.regions, policy, loadMemory(this.sql), now);
    saveMemory(this.sql, memory);
    for (const action of actions) await this.apply(action, now);
    if (actions.length > 0) await this.tellPlan(now);
    return wakeAt;
  }

  /**
   * Sizes the consumer shards to the backlog and wakes those the scaler names; nothing
   * while the queue has no Worker consumer or its delivery is paused. `shard`: the storage
   * shard with new messages, when one is known (the woken shard visits it; without one, all).
   */
  async wakeConsumers(wake: ConsumerWake, now: number, shard?: string): Promise<void> {
    const queue = this.store.queue();
    const consumer = queue ? readConsumers(this.sql, queue.queue_name)[0] : undefined;
    if (!queue || !consumer || consumer.type !== "worker" || queue.settings.delivery_paused) return;
    const scaling = scaleConsumers({
      backlog: this.heartbeats(now).reduce((n, h) => n + h.backlog_count, 0),
      maxConcurrency: consumer.settings.max_concurrency ?? MAX_CONCURRENCY,
      previous: queue.consumer_shards_wanted,
      wake,
      // Only an "idle" wake-up asks who is delivering; the others (one per shard's new
      // messages among them) leave the reports table unread.
      reports: wake === "idle" ? readConsumerShards(this.sql) : [],
      now,
      heartbeatIntervalMs: serviceConfig(this.env).heartbeatIntervalMs,
      random: Math.random(),
    });
    const change = scaling.change;
    if (change)
      this.store.setConsumerShardsWanted(scaling.wanted, () =>
        logDecision(this.sql, { at: now, region: null, target: null, ...change }),
      );
    const version = this.deps.planVersion();
    await Promise.all(
      scaling.wake.map((i) => consumerShardFor(this.env, queue.queue_id, i).wake(queue.queue_id, i, version, shard)),
    );
  }

  /**
   * The delivery plan changed (settings, pause, consumer, dead-letter queue, shards): every
   * consumer shard that may be at work or is wanted is woken with its new version, paused or
   * not (consumer shards keep their plan, and a paused one must hear of it to stop). A shard
   * that cannot be told now fetches the plan at its next refresh.
   */
  async tellPlan(now: number): Promise<void> {
    const queue = this.store.queue();
    if (!queue) return;
    const consumer = readConsumers(this.sql, queue.queue_name)[0];
    const pushing = consumer?.type === "worker" && !queue.settings.delivery_paused;
    if (pushing) await this.wakeConsumers("all", now);
    const version = this.deps.planVersion();
    const wanted = pushing ? Math.max(1, queue.consumer_shards_wanted) : 0;
    const others = readConsumerShards(this.sql)
      .map((c) => c.index)
      .filter((i) => i >= wanted);
    await Promise.all(
      others.map((i) =>
        consumerShardFor(this.env, queue.queue_id, i)
          .wake(queue.queue_id, i, version)
          .catch((err: unknown) => console.error(`consumer shard ${i}: the plan's change was not told:`, err)),
      ),
    );
  }

  /**
   * Carries out one decision; returns the shards it names. New shards are written as
   * pending, activated, and only then made active in the map; a state change is told to
   * the shard before it is recorded. A reset at any point leaves a state the next tick
   * completes or redoes.
   */
  private async apply(action: ScalingAction, now: number): Promise<string[]> {
    const decision = (target: string): Decision => ({
      at: now,
      kind: action.kind,
      region: action.region,
      target,
      reason: action.reason,
      figures: action.figures,
    });
    if (action.kind === "add_shards") {
      const names = this.store.addPendingShards(action.region, action.count, now, (added) =>
        logDecision(this.sql, decision(added.join(","))),
      );
      await this.activatePending();
      return names;
    }
    const state = action.kind === "drain_shard" ? "draining" : "retired";
    await this.changeState({ name: action.shard, region: action.region }, state, now, decision(action.shard));
    return [action.shard];
  }

  /**
   * Changes a shard's state. The shard is told first, so it refuses sends the moment it
   * is draining; brokers holding the old map retry another shard. With the decision
   * that made the change, it is logged with it, and the fault harness may end the
   * Coordinator between telling and recording.
   */
  async changeState(
    shard: { name: string; region: string },
    state: ShardState,
    now: number,
    decision?: Decision,
  ): Promise<void> {
    // Written before the shard is told, deleted with the record: a Coordinator that starts
    // and finds it knows a reset cut the change short, and undoes it then (undoCutChanges)
    // rather than once the shard's report shows it, while its keys' sends wait.
    this.sql.exec("INSERT OR REPLACE INTO state_changes (name, state) VALUES (?, ?)", shard.name, state);
    this.changing.add(shard.name);
    try {
      await storageShardFor(this.env, shard.name, shard.region).setState(state);
      if (decision) this.deps.faultPoint("abort-drain");
      // A shard leaving or joining the active ones moves ordering keys: every shard enters the new epoch first.
      const active = this.store
        .shards()
        .filter((s) => s.state === "active" && s.name !== shard.name)
        .map((s) => s.name);
      const wasActive = this.store.shards().some((s) => s.name === shard.name && s.state === "active");
      const seq =
        wasActive !== (state === "active")
          ? await this.pushEpoch(state === "active" ? [...active, shard.name] : active)
          : null;
      this.store.recordShardState(shard.name, state, now, () => {
        this.sql.exec("DELETE FROM state_changes WHERE name = ?", shard.name);
        if (decision) logDecision(this.sql, decision);
      });
      if (seq !== null) commitEpoch(this.sql, seq);
    } finally {
      this.changing.delete(shard.name);
    }
  }

  /**
   * Undoes the state changes told to their shard and never recorded (a reset, or an epoch
   * push that failed, cut them short): the shard is told the map's state again, as
   * reconcileStates would once the shard's own report showed the difference. A drain cut
   * short leaves a shard refusing every send while the map and every epoch still name it
   * its keys' home, so no keyed send of those keys could land until this.
   */
  async undoCutChanges(): Promise<void> {
    const rows = this.sql.exec<{ name: string; state: string }>("SELECT name, state FROM state_changes").toArray();
    if (rows.length === 0) return;
    const recorded = new Map(this.store.shards().map((s) => [s.name, s]));
    for (const row of rows) {
      if (this.changing.has(row.name)) continue; // under way in this instance, not cut
      const shard = recorded.get(row.name);
      if (shard) await storageShardFor(this.env, shard.name, shard.region).setState(shard.state);
      if (!this.changing.has(row.name))
        this.sql.exec("DELETE FROM state_changes WHERE name = ? AND state = ?", row.name, row.state);
    }
  }

  /** Whether a change was left half done: a state change or a scale-out cut short, or an epoch pushed and not committed. */
  halfDone(): boolean {
    if (!this.store.readyQueue()) return false;
    const cut = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM state_changes").one().n > 0;
    return cut || this.store.pendingShards().length > 0 || epochUnsettled(this.sql);
  }

  /** Tells every shard not retired the epoch whose active shards are `active` (coordinator/epochs.ts). */
  private pushEpoch(
    active: readonly string[],
    extra: ReadonlyArray<{ name: string; region: string }> = [],
  ): Promise<number> {
    const queue = this.store.queue()!;
    const targets = [...this.store.shards().filter((s) => s.state !== "retired"), ...extra];
    return pushEpoch(this.sql, this.env, queue.queue_id, active, targets);
  }

  /**
   * Pushes the stored map's epoch again when the shards may be in another (a push a reset
   * or an unreachable shard left unfinished), or in none yet (a queue older than epochs).
   */
  async settleEpoch(): Promise<void> {
    if (!epochUnsettled(this.sql)) return;
    const seq = await this.pushEpoch(
      this.store
        .shards()
        .filter((s) => s.state === "active")
        .map((s) => s.name),
    );
    commitEpoch(this.sql, seq);
  }

  /**
   * A scale-out of one shard, or the drain of `shard`, decided now and carried out as
   * the autoscaler's own decisions are: the fault harness's way to have a change in
   * flight when it aborts the Coordinator (src/kernel/test-hooks.ts). Returns the shard changed.
   */
  async force(kind: "scale-out" | "drain", now: number, shard?: string): Promise<string> {
    const shards = this.store.shards();
    const figures = {
      activeShards: shards.filter((s) => s.state === "active").length,
      messagesPerSecond: 0,
      perShard: 0,
      target: 0,
      refusals: 0,
    };
    // Remembered before it is carried out, as the autoscaler's own changes are: the cooldown
    // and the scale-in wait count from it, so the tick that finishes a scale-out a reset cut
    // short does not drain the new shard at once for a load that was low before it.
    const remember = (region: string) => {
      const memory = loadMemory(this.sql);
      memory.lastChange[region] = now;
      delete memory.lowSince[region];
      saveMemory(this.sql, memory);
    };
    if (kind === "scale-out") {
      const region = serviceConfig(this.env).defaultRegion;
      remember(region);
      return (
        await this.apply({ kind: "add_shards", region, count: 1, reason: "test hook: forced scale-out", figures }, now)
      )[0]!;
    }
    const target = shards.find((s) => s.name === shard && s.state === "active");
    if (!target) throw new Error(`${String(shard)} is not an active storage shard of this queue`);
    // A queue at its one shard keeps taking sends: the drained shard's replacement comes first,
    // as the autoscaler never drains below a region's minimum.
    remember(target.region);
    if (!shards.some((s) => s.state === "active" && s.region === target.region && s.name !== target.name)) {
      await this.apply(
        {
          kind: "add_shards",
          region: target.region,
          count: 1,
          reason: "test hook: a replacement for the forced drain of the region's last active shard",
          figures,
        },
        now,
      );
    }
    const drained = (
      await this.apply(
        { kind: "drain_shard", region: target.region, shard: target.name, reason: "test hook: forced drain", figures },
        now,
      )
    )[0]!;
    await this.tellPlan(now);
    return drained;
  }

  /** Tells each shard who it is (its queue, account and region), so it takes the sends a map naming it sends. */
  async activateShards(queue: QueueRecord, shards: ReadonlyArray<{ name: string; region: string }>): Promise<void> {
    await Promise.all(
      shards.map((s) =>
        storageShardFor(this.env, s.name, s.region).activate({
          name: s.name,
          queueId: queue.queue_id,
          accountId: queue.account_id,
          region: s.region,
        }),
      ),
    );
  }

  /** Activates shards written as pending (by a scale-out, possibly one a reset interrupted) and puts them on the map. */
  async activatePending(): Promise<void> {
    const queue = this.store.queue()!;
    const pending = this.store.pendingShards();
    if (pending.length === 0) return;
    await this.activateShards(queue, pending);
    this.deps.faultPoint("abort-scale-out");
    const active = this.store
      .shards()
      .filter((s) => s.state === "active")
      .map((s) => s.name);
    const seq = await this.pushEpoch([...active, ...pending.map((s) => s.name)], pending);
    this.store.markActive(pending.map((s) => s.name));
    commitEpoch(this.sql, seq);
    await this.tellPlan(Date.now());
  }

  /**
   * A shard whose own report disagrees with the map (a state change told to the shard
   * before a reset kept it from being recorded) is told the recorded state again: the
   * map is the truth, and a half-made decision is simply made again or not at all.
   */
  async reconcileStates(now: number): Promise<void> {
    const fresh = now - 2 * serviceConfig(this.env).heartbeatIntervalMs;
    const recorded = new Map(this.store.shards().map((s) => [s.name, s]));
    for (const beat of this.heartbeats(now)) {
      const shard = recorded.get(beat.name);
      if (!shard || beat.received_at < fresh || beat.state === shard.state) continue;
      await storageShardFor(this.env, shard.name, shard.region).setState(shard.state);
    }
  }

  /**
   * Whether the autoscaler still waits for reports from after its last change in `region`
   * (autoscaler.ts: every active shard must report a period that began an interval after the
   * change, for at most the cooldown and three intervals). A shard new to the map has nothing
   * to report until brokers send to it, and would sleep after its first report, leaving every
   * next step of a growing queue to wait out that bound.
   */
  settling(region: string, now: number): boolean {
    const interval = serviceConfig(this.env).heartbeatIntervalMs;
    const changed = loadMemory(this.sql).lastChange[region];
    return changed !== undefined && now - changed < 2 * interval /* the cooldown */ + 4 * interval;
  }

  /** When the next retired shard is due to be forgotten (pruneRetired), or null. */
  nextPruneAt(): number | null {
    const first = this.store.firstRetiredAt();
    return first === null ? null : first + KEEP_RETIRED_MS;
  }

  /** Forgets shards retired long ago: their objects are empty, and every broker map has moved on. */
  pruneRetired(now: number): void {
    for (const name of this.store.forgetRetired(now - KEEP_RETIRED_MS)) {
      carryForgottenShard(this.sql, name); // its counts stay in the queue's counters
      forgetStorageBeat(this.sql, name);
    }
  }

  private heartbeats(now: number): ShardHeartbeat[] {
    return readStorageBeats(this.sql, now, serviceConfig(this.env).heartbeatIntervalMs);
  }
}
