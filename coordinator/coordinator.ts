import { DurableObject } from "cloudflare:workers";
import { storageShardFor } from "../src/kernel/addressing";
import { systemClock, type Clock } from "../src/kernel/clock";
import { minShardsIn, serviceConfig } from "../src/kernel/config";
import { applyConsumerPatch, type ConsumerRecord, type ConsumerSettingsPatch } from "../src/kernel/consumer-settings";
import type { Env } from "../src/kernel/env";
import { randomHex } from "../src/kernel/ids";
import type { QueueCounters, SendLatencyCounts, ShardBacklog } from "../src/kernel/figures";
import type { PullCancelAnswer, PullWaitAnswer } from "../src/kernel/pull-waits";
import { notRetired, type DeliveryPlan, type ShardMap, type ShardState } from "../src/kernel/shard-map";
import type { HeartbeatReply, ShardHeartbeat, StorageHeartbeat } from "../src/kernel/heartbeat";
import type { QueueInfo } from "../src/kernel/queue-info";
import { applySettingsPatch, type QueueSettingsPatch } from "../src/kernel/settings";
import { meteredStorage, newMeter, readMeter, type CostMeter, type MeterReading } from "../src/kernel/sql-meter";
import { meteredRpcs } from "../src/kernel/rpc-meter";
import { testHooksFor, type FaultPoint, type TestHookStatus } from "../src/kernel/test-hooks";
import { deliveringNow } from "./consumer-scaler";
import { versionedPlan, type VersionedPlan } from "./delivery-plan";
import { deleteConsumer, insertConsumer, readConsumers, updateConsumer, type NewConsumer } from "./consumers";
import { ControlLoop } from "./control-loop";
import { tick, type TickDeps } from "./control-tick";
import { queueCounters } from "./counters";
import { recentDecisions, type Decision } from "./decisions";
import {
  latestConsumerCosts,
  readConsumerShards,
  readStorageBeats,
  recordConsumerReport,
  type ConsumerShardReport,
  type ConsumerShardStatus,
} from "./heartbeats";
import { answerHeartbeat, shardBacklogs, type HeartbeatAnswerDeps } from "./heartbeat-answer";
import { armAlarm, MapPublisher } from "./map-publisher";
import { QueueStore, type InitializeQueue } from "./queue-store";
import { migrateCoordinator } from "./schema";
import { PullWaiters } from "./pull-waiters";
import { MAX_PULL_WAIT_MS } from "../src/kernel/limits";
import { assertInJurisdiction } from "../src/kernel/jurisdiction";
import { readSendLatency, recordSendLatency } from "./send-latency";
import { readSeries, SERIES_STEP_MS, type SeriesPoint } from "./time-series";
import { describeQueue, LAST_PURGE, type PurgeRecord } from "./queue-description";

export type { InitializeQueue } from "./queue-store";

export type { PurgeRecord } from "./queue-description";

/**
 * The Coordinator of one queue (named by queue id): its settings and its shard map.
 * It creates the queue's storage shards, versions the map on every change and
 * publishes it to KV, where brokers read it. Its rows live in the queue store
 * (queue-store.ts); its alarm runs the control loop (control-tick.ts, control-loop.ts).
 */
export class Coordinator extends DurableObject<Env> {
  /**
   * RPCs served, alarms run and SQLite rows written and read since this object started
   * (src/kernel/sql-meter.ts); RPCs are counted by meteredRpcs (src/kernel/rpc-meter.ts).
   */
  private readonly cost = newMeter();
  private readonly since = Date.now();
  /** ctx.storage, metered: every part of this object writes through it. */
  private readonly storage: DurableObjectStorage;
  private readonly sql: SqlStorage;
  private readonly store: QueueStore;
  private readonly loop: ControlLoop;
  private readonly publisher: MapPublisher;
  /** What the tick and the heartbeat's answer need of this object (control-tick.ts, heartbeat-answer.ts). */
  private readonly parts: TickDeps & HeartbeatAnswerDeps;
  clock: Clock = systemClock;
  /** Long-polling pulls waiting for messages; tests swap in their own timers. */
  readonly pullWaiters = new PullWaiters(() => this.clock.now());
  /** The fault harness's aborts and alarm throws; inert unless SHARDQ_TEST_HOOKS is "on" (src/kernel/test-hooks.ts). */
  private readonly hooks = testHooksFor(this.env, "coordinator");

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.storage = meteredStorage(ctx.storage, this.cost);
    this.sql = this.storage.sql;
    migrateCoordinator(this.sql);
    this.store = new QueueStore(this.storage);
    this.loop = new ControlLoop({
      store: this.store,
      sql: this.sql,
      env,
      faultPoint: (point) => this.hooks.at(point, ctx),
      planVersion: () => this.plan()?.version ?? "",
    });
    this.publisher = new MapPublisher(this.store, this.storage, env.SHARD_MAPS, () => this.clock.now());
    this.parts = {
      store: this.store,
      sql: this.sql,
      storage: this.storage,
      env,
      loop: this.loop,
      publisher: this.publisher,
      hooks: this.hooks,
      now: () => this.clock.now(),
      waitUntil: (work) => ctx.waitUntil(work),
      consumers: () => this.consumers(),
      backlogByShard: () => this.backlogByShard(),
      heartbeats: () => this.heartbeats(),
      consumersRunning: () => this.consumerShards().running,
    };
    // A change a reset cut short is finished or undone now, not at the next tick: keyed
    // sends of the keys it moves wait for it (docs/ordered-lanes.md).
    if (this.loop.halfDone()) void ctx.blockConcurrencyWhile(() => armAlarm(this.storage, this.clock.now()));
    return meteredRpcs(this, this.cost, ["testHook", "costFigures"]);
  }

  /**
   * Creates the queue and its initial shards: one, in the default region, unless
   * SHARDS_PER_REGION pins a layout (src/kernel/config.ts minShardsIn).
   * Idempotent for the same queue id, so the catalog can retry a half-finished create.
   */
  async initialize(init: InitializeQueue): Promise<QueueInfo> {
    let queue = this.store.queue();
    if (queue && queue.queue_id !== init.queueId) throw new Error(`coordinator already holds queue ${queue.queue_id}`);
    assertInJurisdiction(this.ctx.id, init.queueId);
    if (!queue) {
      const config = serviceConfig(this.env);
      this.store.create(
        init,
        Object.fromEntries(config.regions.map((r) => [r, minShardsIn(config, r)])),
        this.clock.now(),
      );
      queue = this.store.queue()!;
    }
    if (!queue.ready) {
      // Shards learn their identity before the map naming them is published:
      // a broker never sees a shard that would refuse it as unknown.
      await this.loop.activateShards(queue, this.store.shards());
      await this.loop.settleEpoch();
      this.store.markReady();
      await this.publisher.publish();
      await armAlarm(this.storage, this.clock.now() + serviceConfig(this.env).heartbeatIntervalMs);
    }
    return this.info()!;
  }

  info(): QueueInfo | null {
    const queue = this.store.readyQueue();
    return queue ? describeQueue(queue, this.consumers()) : null;
  }

  /**
   * Records a purge of the queue (POST .../purge): when it started and, once it is over, whether
   * it emptied the queue. What Cloudflare's purge status (GET .../purge) answers from. Returns
   * the queue as it is now (what the purge answers), null when there is none.
   */
  async notePurge(startedAt: number, completed: boolean): Promise<QueueInfo | null> {
    if (!this.store.readyQueue()) return null;
    await this.storage.put(LAST_PURGE, { startedAt, completed } satisfies PurgeRecord);
    return this.info();
  }

  /** The last purge noted; `queue: false` when there is no queue. */
  async lastPurge(): Promise<{ queue: boolean; last: PurgeRecord | null }> {
    if (!this.store.readyQueue()) return { queue: false, last: null };
    return { queue: true, last: (await this.storage.get<PurgeRecord>(LAST_PURGE)) ?? null };
  }

  consumers(): ConsumerRecord[] {
    const queue = this.store.queue();
    return queue ? readConsumers(this.sql, queue.queue_name) : [];
  }

  /**
   * One consumer per queue, as on Cloudflare: null when the queue has one already (or is gone).
   * `id` is the one a PUT of Cloudflare's API names (broker/http/consumers-api.ts); a new one otherwise.
   */
  async addConsumer(c: NewConsumer, id: string = randomHex(16)): Promise<ConsumerRecord | null> {
    if (!this.store.readyQueue() || this.consumers().length > 0) return null;
    insertConsumer(this.sql, id, c, this.clock.now());
    await this.loop.tellPlan(this.clock.now());
    return this.consumers().find((x) => x.consumer_id === id)!;
  }

  async updateConsumer(
    id: string,
    patch: ConsumerSettingsPatch,
    deadLetterQueue: string | null | undefined,
  ): Promise<ConsumerRecord | null> {
    const current = this.consumers().find((c) => c.consumer_id === id);
    if (!current) return null;
    const settings = applyConsumerPatch(current.settings, patch);
    updateConsumer(
      this.sql,
      id,
      settings,
      deadLetterQueue === undefined ? current.dead_letter_queue : deadLetterQueue,
      this.clock.now(),
    );
    await this.loop.tellPlan(this.clock.now());
    return this.consumers().find((c) => c.consumer_id === id)!;
  }

  async removeConsumer(id: string): Promise<boolean> {
    const removed = deleteConsumer(this.sql, id);
    // Consumer shards keep their plan: they stop pushing once told.
    if (removed) await this.loop.tellPlan(this.clock.now());
    return removed;
  }

  /** Everything a consumer shard needs for its rounds of delivery; it keeps it while wake-ups carry the same version. */
  deliveryPlan(): DeliveryPlan | null {
    const plan = this.plan();
    const backlog = new Map(this.backlogByShard().map((b) => [b.shard, b]));
    return plan && { ...plan, shards: plan.shards.map((s) => ({ ...s, backlog: backlog.get(s.name) ?? null })) };
  }

  /** The plan without its backlogs, and its version (delivery-plan.ts). */
  private plan(): VersionedPlan | null {
    const queue = this.store.readyQueue();
    return queue ? versionedPlan(queue, this.consumers()[0] ?? null, this.store.shards()) : null;
  }

  /**
   * A storage shard went from empty to holding messages, or filled a batch a consumer
   * waits for: one consumer shard is woken, enough to take it (consumer-scaler.ts), or the
   * longest-waiting long-polling pull. True when pulls still wait: the shard says so again
   * on its next new messages.
   */
  async notifyReady(shard: string): Promise<boolean> {
    if (!this.store.shards().some((s) => s.name === shard)) return false;
    const more = this.pullWaiters.wakeOne();
    await this.loop.wakeConsumers("one", this.clock.now(), shard);
    return more;
  }

  /**
   * A long-polling pull that found nothing waits here until a shard has new messages
   * ("woken") or `ms` pass ("ended"): coordinator/pull-waiters.ts. It does not wait while
   * delivery is paused, and a pause ends its wait ("paused"): a short pull is refused then,
   * and a waiting one must not lease either. Over a cap of waiting pulls, it is refused
   * before it waits. `token` names the caller's token (its digest's prefix), for its cap.
   */
  async waitForMessages(ms: number, waitId?: string, token?: string): Promise<PullWaitAnswer> {
    if (this.paused()) return "paused";
    const over = this.pullWaiters.overCap(token);
    if (over) return over;
    const woken = await this.pullWaiters.wait(Math.max(0, Math.min(ms, MAX_PULL_WAIT_MS)), waitId, token);
    if (woken) return "woken";
    return this.paused() ? "paused" : "ended";
  }

  /**
   * A woken pull answered with messages: a cancel under its wait id is too late from now
   * on. `fullFrom` names the shard it took a full batch from: more may be ready there, for
   * the next pull waiting (as notifyReady).
   */
  async pullAnswered(waitId: string, fullFrom: string | null): Promise<void> {
    this.pullWaiters.answered(waitId);
    if (fullFrom !== null && this.store.shards().some((s) => s.name === fullFrom)) {
      this.pullWaiters.wakeOne();
      await this.loop.wakeConsumers("one", this.clock.now(), fullFrom);
    }
  }

  /**
   * The client of a waiting pull went away: stop waiting for it, and if it was already
   * woken, wake the next pull instead (coordinator/pull-waiters.ts). Not cancelled when the
   * pull had answered with messages (its wake-up was used: nobody else is woken), or when
   * no such pull waited or was just woken.
   */
  cancelWait(waitId: string): PullCancelAnswer {
    if (this.pullWaiters.hasAnswered(waitId)) return { cancelled: false, reason: "answered" };
    return this.pullWaiters.cancel(waitId) ? { cancelled: true } : { cancelled: false, reason: "not_waiting" };
  }

  private paused(): boolean {
    return this.store.readyQueue()?.settings.delivery_paused === true;
  }

  /** The authoritative map; brokers come here when KV has none yet or theirs proved stale. */
  shardMap(): ShardMap | null {
    return this.store.shardMap(this.clock.now());
  }

  async updateSettings(patch: QueueSettingsPatch): Promise<QueueInfo | null> {
    const queue = this.store.readyQueue();
    if (!queue) return null;
    const settings = applySettingsPatch(queue.settings, patch);
    if (!this.store.writeSettings(settings, this.clock.now())) return this.info();
    // Pulls waiting now must not lease while paused: they answer as a short pull would.
    if (settings.delivery_paused) this.pullWaiters.endAll();
    // A sleeping shard's retention alarm moves with the setting (it hears of it otherwise only when it next reports).
    if (settings.message_retention_period !== queue.settings.message_retention_period) {
      const ms = settings.message_retention_period * 1000;
      await Promise.all(
        notRetired(this.store.shards()).map((s) =>
          storageShardFor(this.env, s.name, s.region).setRetention(queue.queue_id, ms),
        ),
      );
    }
    await this.publisher.publish();
    await this.loop.tellPlan(this.clock.now());
    return this.info();
  }

  /** Changes a shard's state (the shard is told first: control-loop.ts) and publishes the map. */
  async setShardState(name: string, state: ShardState): Promise<ShardMap | null> {
    const shard = this.store.shards().find((s) => s.name === name);
    if (!shard) return null;
    await this.loop.changeState(shard, state, this.clock.now());
    await this.publisher.publish();
    await this.loop.tellPlan(this.clock.now());
    return this.store.shardMap(this.clock.now());
  }

  /** A storage shard's report, and the answer it gets (heartbeat-answer.ts). */
  heartbeat(beat: StorageHeartbeat): HeartbeatReply {
    return answerHeartbeat(this.parts, beat);
  }

  /** A consumer shard's report after a round of delivery. */
  consumerReport(report: ConsumerShardReport): void {
    if (this.store.exists()) recordConsumerReport(this.sql, report, this.clock.now());
  }

  /** Consumer shards that have reported, and how many are delivering now. */
  consumerShards(): { running: number; shards: ConsumerShardStatus[] } {
    const shards = readConsumerShards(this.sql, this.clock.now());
    return {
      running: deliveringNow(shards, this.clock.now(), serviceConfig(this.env).heartbeatIntervalMs).length,
      shards,
    };
  }

  /**
   * Every shard's backlog as its latest heartbeat reported it, what send answers sum their queue
   * figures from (heartbeat-answer.ts shardBacklogs).
   */
  backlogByShard(): ShardBacklog[] {
    return shardBacklogs(this.heartbeats(), this.store.shards(), this.clock.now());
  }

  /** The latest heartbeat of every shard that has sent one. */
  heartbeats(): ShardHeartbeat[] {
    return readStorageBeats(this.sql, this.clock.now(), serviceConfig(this.env).heartbeatIntervalMs);
  }

  /** Deletes the queue: every shard's data, the published maps, then this object's own state. */
  async destroy(): Promise<boolean> {
    const queue = this.store.queue();
    if (!queue) return false;
    await Promise.all(this.store.shards().map((s) => storageShardFor(this.env, s.name, s.region).destroy()));
    await this.publisher.unpublish(queue);
    await this.storage.deleteAll();
    migrateCoordinator(this.sql);
    return true;
  }

  /**
   * The control loop, every heartbeat interval while the queue exists: finish any change
   * a reset interrupted, run the autoscaler and carry out its decisions, size the
   * consumer shards, and publish the map (deferred writes, and a periodic refresh): control-tick.ts.
   */
  override async alarm(): Promise<void> {
    this.cost.alarms++;
    const now = this.clock.now();
    try {
      await tick(this.parts, now);
    } catch (err) {
      // Not thrown: the platform retries a throwing alarm 6 times and then drops it, and
      // the control loop would stop for good (the fault run's throw-alarm fault).
      const queue = this.store.queue();
      console.error(`coordinator ${queue?.queue_id}: control loop failed, next tick in one interval:`, err);
      if (queue?.ready) await armAlarm(this.storage, now + serviceConfig(this.env).heartbeatIntervalMs);
    }
  }

  /**
   * The fault harness's hook (src/kernel/test-hooks.ts): arm a point, force a scale-out or a
   * drain now, or keep the published map as it is for `holdMapMs`. Throws unless
   * SHARDQ_TEST_HOOKS is "on".
   */
  async testHook(
    req: {
      arm?: FaultPoint | null;
      times?: number;
      action?: "scale-out" | "drain";
      shard?: string;
      holdMapMs?: number;
    } = {},
  ): Promise<TestHookStatus & { changed?: string; map_held_until?: number }> {
    this.hooks.check();
    if (req.holdMapMs) this.publisher.hold(req.holdMapMs);
    this.hooks.control(req.arm, req.times);
    const changed = req.action ? await this.loop.force(req.action, this.clock.now(), req.shard) : undefined;
    await this.publisher.publish();
    const heldUntil = this.publisher.heldUntil();
    return {
      ...this.hooks.status(),
      ...(changed ? { changed } : {}),
      ...(heldUntil !== null ? { map_held_until: heldUntil } : {}),
    };
  }

  /** The last hour of backlog, rates and shards, a point every SERIES_STEP_MS, oldest first. */
  series(): { stepMs: number; points: SeriesPoint[] } {
    return { stepMs: SERIES_STEP_MS, points: readSeries(this.sql, this.clock.now()) };
  }

  /** What the autoscaler has done lately, newest first. */
  decisions(limit = 50): Decision[] {
    return recentDecisions(this.sql, limit);
  }

  /** Adds what a broker isolate measured since its last flush (broker/metrics/latency-histogram.ts). */
  recordSendLatency(counts: SendLatencyCounts): void {
    if (this.store.exists()) recordSendLatency(this.sql, counts);
  }

  /** GET /metrics: the delivery counters (counters.ts) and the send latency histogram, cumulative. */
  metricsTotals(): { counters: QueueCounters; sendLatency: SendLatencyCounts } {
    return { counters: queueCounters(this.sql), sendLatency: readSendLatency(this.sql) };
  }

  /**
   * What this object was billed for since it started, the names of the queue's storage shards
   * (the benchmark reads theirs from them), and what each consumer shard reported it was billed
   * for, over its restarts (an idle consumer shard may be evicted, and its figures with it).
   * The benchmark's own read: not counted as an RPC (its rows read are).
   */
  costFigures(): MeterReading & {
    storageShards: string[];
    consumerShards: Record<string, CostMeter>;
    consumerLatest: Record<string, MeterReading>;
  } {
    const reading = readMeter(this.cost, this.since);
    const consumerShards: Record<string, CostMeter> = {};
    for (const c of readConsumerShards(this.sql)) if (c.cost) consumerShards[String(c.index)] = c.cost;
    return {
      ...reading,
      storageShards: this.store.shards().map((s) => s.name),
      consumerShards,
      consumerLatest: latestConsumerCosts(this.sql),
    };
  }
}
