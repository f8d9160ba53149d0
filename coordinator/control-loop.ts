/**
 * The Coordinator's control loop, run from its alarm every heartbeat interval: it
 * finishes changes a reset interrupted, reconciles shards with the map, runs the
 * autoscaler and carries out its decisions, and forgets long-retired shards.
 */
import { storageShardFor } from "../src/kernel/addressing";
import { serviceConfig } from "../src/kernel/config";
import type { Env } from "../src/kernel/env";
import type { ShardEntry, ShardHeartbeat } from "../src/kernel/protocol";
import { decide, type ScalingAction, type ShardView } from "./autoscaler";
import { carryForgottenShard } from "./counters";
import { loadMemory, logDecision, saveMemory } from "./decisions";
import type { QueueRow } from "./schema";
import type { FaultPoint } from "../src/kernel/test-hooks";

/** Retired shards stay in the map this long, so brokers with older maps learn of them. */
const KEEP_RETIRED_MS = 10 * 60_000;
/** Scale in only after a shard's share of the target stays below this. */
const SCALE_IN_BELOW = 0.3;

/** What the loop needs of its Coordinator. */
export interface CoordinatorState {
  sql: SqlStorage;
  env: Env;
  storage: DurableObjectStorage;
  now(): number;
  row(): QueueRow | null;
  shards(): ShardEntry[];
  heartbeats(): ShardHeartbeat[];
  /** The fault harness's abort points (src/kernel/test-hooks.ts); a no-op unless armed. */
  faultPoint(point: FaultPoint): void;
}

export class ControlLoop {
  constructor(private readonly c: CoordinatorState) {}

  async autoscale(now: number): Promise<void> {
    const config = serviceConfig(this.c.env);
    const beats = new Map(this.c.heartbeats().map((b) => [b.name, b]));
    const raw = this.c.sql.exec("SELECT name, region, state, created_at FROM shards").toArray() as unknown as Array<{ name: string; region: string; state: ShardView["state"]; created_at: number }>;
    const views: ShardView[] = raw.map((s) => {
      const b = beats.get(s.name);
      return {
        name: s.name,
        region: s.region,
        state: s.state,
        createdAt: s.created_at,
        beat: b ? { state: b.state, messagesIn: b.messages_in, periodMs: b.period_ms, backlog: b.backlog_count, leasedNow: b.leased_now, refusals: b.refusals, receivedAt: b.received_at } : null,
      };
    });
    const policy = {
      targetPerShard: config.targetPerShard,
      minPerRegion: config.shardsPerRegion,
      maxPerRegion: Math.max(config.shardsPerRegion, config.maxShardsPerRegion),
      scaleInBelow: SCALE_IN_BELOW,
      scaleInAfterMs: config.scaleInAfterMs,
      cooldownMs: 2 * config.heartbeatIntervalMs,
      heartbeatIntervalMs: config.heartbeatIntervalMs,
    };
    const { actions, memory } = decide(views, config.regions, policy, loadMemory(this.c.sql), now);
    saveMemory(this.c.sql, memory);
    for (const action of actions) await this.apply(action, now);
  }

  /**
   * Carries out one decision. New shards are written as pending, activated, and only
   * then made active in the map; a state change is told to the shard before it is
   * recorded. A reset at any point leaves a state the next tick completes or redoes.
   */
  private async apply(action: ScalingAction, now: number): Promise<void> {
    const row = this.c.row()!;
    const log = (target: string | null) =>
      logDecision(this.c.sql, { at: now, kind: action.kind, region: action.region, target, reason: action.reason, figures: action.figures });
    if (action.kind === "add_shards") {
      const names: string[] = [];
      this.c.storage.transactionSync(() => {
        for (let i = 0; i < action.count; i++) names.push(`${row.queue_id}:${action.region}:${row.next_shard + i}`);
        for (const name of names) this.c.sql.exec("INSERT INTO shards (name, region, state, created_at) VALUES (?, ?, 'pending', ?)", name, action.region, now);
        this.c.sql.exec("UPDATE queue SET next_shard = next_shard + ?", action.count);
        log(names.join(","));
      });
      await this.activatePending();
      return;
    }
    const state = action.kind === "drain_shard" ? "draining" : "retired";
    await storageShardFor(this.c.env, action.shard, action.region).setState(state);
    this.c.faultPoint("abort-drain");
    this.c.storage.transactionSync(() => {
      this.c.sql.exec("UPDATE shards SET state = ?, changed_at = ? WHERE name = ?", state, now, action.shard);
      this.c.sql.exec("UPDATE queue SET map_version = map_version + 1");
      log(action.shard);
    });
  }

  /**
   * A scale-out of one shard, or the drain of `shard`, decided now and carried out as
   * the autoscaler's own decisions are: the fault harness's way to have a change in
   * flight when it aborts the Coordinator (src/kernel/test-hooks.ts). Returns the shard changed.
   */
  async force(kind: "scale-out" | "drain", now: number, shard?: string): Promise<string> {
    const figures = { activeShards: this.c.shards().filter((s) => s.state === "active").length, messagesPerSecond: 0, perShard: 0, target: 0, refusals: 0 };
    if (kind === "scale-out") {
      const before = this.c.row()!.next_shard;
      const region = serviceConfig(this.c.env).defaultRegion;
      await this.apply({ kind: "add_shards", region, count: 1, reason: "test hook: forced scale-out", figures }, now);
      return `${this.c.row()!.queue_id}:${region}:${before}`;
    }
    const target = this.c.shards().find((s) => s.name === shard && s.state === "active");
    if (!target) throw new Error(`${String(shard)} is not an active storage shard of this queue`);
    await this.apply({ kind: "drain_shard", region: target.region, shard: target.name, reason: "test hook: forced drain", figures }, now);
    return target.name;
  }

  /** Activates shards written as pending (by a scale-out, possibly one a reset interrupted) and publishes them. */
  async activatePending(): Promise<void> {
    const row = this.c.row()!;
    const pending = this.c.sql.exec("SELECT name, region FROM shards WHERE state = 'pending'").toArray() as unknown as Array<{ name: string; region: string }>;
    if (pending.length === 0) return;
    await Promise.all(pending.map((s) => storageShardFor(this.c.env, s.name, s.region).activate({ name: s.name, queueId: row.queue_id, accountId: row.account_id, region: s.region })));
    this.c.faultPoint("abort-scale-out");
    this.c.storage.transactionSync(() => {
      for (const s of pending) this.c.sql.exec("UPDATE shards SET state = 'active' WHERE name = ? AND state = 'pending'", s.name);
      this.c.sql.exec("UPDATE queue SET map_version = map_version + 1");
    });
  }

  /**
   * A shard whose own report disagrees with the map (a state change told to the shard
   * before a reset kept it from being recorded) is told the recorded state again: the
   * map is the truth, and a half-made decision is simply made again or not at all.
   */
  async reconcileStates(now: number): Promise<void> {
    const fresh = now - 2 * serviceConfig(this.c.env).heartbeatIntervalMs;
    const recorded = new Map(this.c.shards().map((s) => [s.name, s]));
    for (const beat of this.c.heartbeats()) {
      const shard = recorded.get(beat.name);
      if (!shard || beat.received_at < fresh || beat.state === shard.state) continue;
      await storageShardFor(this.c.env, shard.name, shard.region).setState(shard.state);
    }
  }

  /** Forgets shards retired long ago: their objects are empty, and every broker map has moved on. */
  pruneRetired(now: number): void {
    const gone = this.c.sql.exec("DELETE FROM shards WHERE state = 'retired' AND changed_at < ? RETURNING name", now - KEEP_RETIRED_MS).toArray() as unknown as Array<{ name: string }>;
    if (gone.length === 0) return;
    for (const g of gone) {
      carryForgottenShard(this.c.sql, g.name); // its counts stay in the queue's counters
      this.c.sql.exec("DELETE FROM heartbeats WHERE name = ?", g.name);
    }
    this.c.sql.exec("UPDATE queue SET map_version = map_version + 1");
  }
}
