import { DurableObject } from "cloudflare:workers";
import { systemClock, type Clock } from "../src/kernel/clock";
import { serviceConfig } from "../src/kernel/config";
import type { Env } from "../src/kernel/env";
import { applyConsumerPatch, MAX_CONCURRENCY, type ConsumerRecord, type ConsumerSettingsPatch } from "../src/kernel/consumer-settings";
import { randomHex } from "../src/kernel/ids";
import type { DeliveryPlan, ShardBacklog, ShardEntry, ShardMap, ShardState, StorageHeartbeat, QueueCounters, SendLatencyCounts, ShardHeartbeat } from "../src/kernel/protocol";
import type { QueueInfo } from "../src/kernel/queue-info";
import { applySettingsPatch, type QueueSettings, type QueueSettingsPatch } from "../src/kernel/settings";
import { consumerShardFor, shardMapKeys, storageShardFor } from "../src/kernel/addressing";
import { ControlLoop } from "./control-loop";
import { deleteConsumer, insertConsumer, readConsumers, updateConsumer, type NewConsumer } from "./consumers";
import { logDecision, recentDecisions, type Decision } from "./decisions";
import { queueCounters } from "./counters";
import { readSendLatency, recordSendLatency } from "./send-latency";
import { readConsumerShards, readStorageBeats, recordConsumerReport, recordStorageBeat, type ConsumerShardReport, type ConsumerShardStatus } from "./heartbeats";
import { migrateCoordinator, type QueueRow } from "./schema";
import { readSeries, recordPoint, SERIES_STEP_MS, type SeriesPoint } from "./time-series";
import { TestHooks, testHooksEnabled, type FaultPoint, type TestHookStatus } from "../src/kernel/test-hooks";

/** Messages per consumer shard before the Coordinator wakes another (up to max_concurrency). */
const BACKLOG_PER_CONSUMER_SHARD = 200;

/** Workers KV accepts at most one write per second to a key. */
const KV_MIN_WRITE_INTERVAL_MS = 1000;
const PUBLISH_RETRY_MS = 5000;
/** The map in KV is rewritten at least this often even when nothing changed (KV entries go cold). */
const REFRESH_MAP_MS = 60_000;



export interface InitializeQueue {
  accountId: string;
  queueId: string;
  queueName: string;
  settings: QueueSettings;
}

/**
 * The Coordinator of one queue (named by queue id): its settings and its shard map.
 * It creates the queue's storage shards, versions the map on every change and
 * publishes it to KV, where brokers read it.
 */
export class Coordinator extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly loop: ControlLoop;
  private publishing = false;
  clock: Clock = systemClock;
  /** The fault harness's aborts and alarm throws; inert unless SHARDQ_TEST_HOOKS is "on" (src/kernel/test-hooks.ts). */
  private readonly hooks = new TestHooks(testHooksEnabled(this.env), "coordinator");
  /** The fault harness's stale map: KV keeps the old one until then (as KV's own delay could). */
  private holdMapUntil = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    migrateCoordinator(this.sql);
    this.loop = new ControlLoop({
      sql: this.sql,
      env,
      storage: ctx.storage,
      now: () => this.clock.now(),
      row: () => this.row(),
      shards: () => this.shards(),
      heartbeats: () => this.heartbeats(),
      faultPoint: (point) => this.hooks.at(point, ctx),
    });
  }

  /**
   * Creates the queue and its initial shards (SHARDS_PER_REGION in every region).
   * Idempotent for the same queue id, so the catalog can retry a half-finished create.
   */
  async initialize(init: InitializeQueue): Promise<QueueInfo> {
    let row = this.row();
    if (row && row.queue_id !== init.queueId) throw new Error(`coordinator already holds queue ${row.queue_id}`);
    if (!row) {
      const now = this.clock.now();
      const { regions, shardsPerRegion } = serviceConfig(this.env);
      this.ctx.storage.transactionSync(() => {
        this.sql.exec(
          `INSERT INTO queue (one, queue_id, account_id, queue_name, created_at, modified_at, settings, next_shard)
           VALUES (1, ?, ?, ?, ?, ?, ?, ?)`,
          init.queueId, init.accountId, init.queueName, now, now, JSON.stringify(init.settings), shardsPerRegion,
        );
        for (const region of regions) {
          for (let i = 0; i < shardsPerRegion; i++) {
            this.sql.exec("INSERT INTO shards (name, region, state, created_at) VALUES (?, ?, 'active', ?)", `${init.queueId}:${region}:${i}`, region, now);
          }
        }
      });
      row = this.row()!;
    }
    if (!row.ready) {
      // Shards learn their identity before the map naming them is published:
      // a broker never sees a shard that would refuse it as unknown.
      await Promise.all(
        this.shards().map((s) =>
          storageShardFor(this.env, s.name, s.region).activate({ name: s.name, queueId: row!.queue_id, accountId: row!.account_id, region: s.region }),
        ),
      );
      this.sql.exec("UPDATE queue SET ready = 1");
      await this.publish();
      await this.armTick(this.clock.now() + serviceConfig(this.env).heartbeatIntervalMs);
    }
    return this.info()!;
  }

  info(): QueueInfo | null {
    const row = this.row();
    if (!row || !row.ready) return null;
    return {
      queue_id: row.queue_id,
      queue_name: row.queue_name,
      created_on: new Date(row.created_at).toISOString(),
      modified_on: new Date(row.modified_at).toISOString(),
      producers_total_count: 0,
      producers: [],
      consumers_total_count: this.consumers().length,
      consumers: this.consumers().map((c) => ({ type: c.type, consumer_id: c.consumer_id, ...(c.script_name ? { script: c.script_name } : {}) })),
      settings: JSON.parse(row.settings) as QueueSettings,
    };
  }

  consumers(): ConsumerRecord[] {
    const row = this.row();
    return row ? readConsumers(this.sql, row.queue_name) : [];
  }

  /** One consumer per queue, as on Cloudflare: null when the queue has one already (or is gone). */
  async addConsumer(c: NewConsumer): Promise<ConsumerRecord | null> {
    if (!this.row()?.ready || this.consumers().length > 0) return null;
    const id = randomHex(16);
    insertConsumer(this.sql, id, c, this.clock.now());
    await this.wakeConsumers({ all: true });
    return this.consumers().find((x) => x.consumer_id === id)!;
  }

  async updateConsumer(id: string, patch: ConsumerSettingsPatch, deadLetterQueue: string | null | undefined): Promise<ConsumerRecord | null> {
    const current = this.consumers().find((c) => c.consumer_id === id);
    if (!current) return null;
    const settings = applyConsumerPatch(current.settings, patch);
    updateConsumer(this.sql, id, settings, deadLetterQueue === undefined ? current.dead_letter_queue : deadLetterQueue, this.clock.now());
    await this.wakeConsumers({ all: true });
    return this.consumers().find((c) => c.consumer_id === id)!;
  }

  removeConsumer(id: string): boolean {
    return deleteConsumer(this.sql, id);
  }

  /** Everything a consumer shard needs for one round of delivery. */
  deliveryPlan(): DeliveryPlan | null {
    const row = this.row();
    if (!row || !row.ready) return null;
    const settings = JSON.parse(row.settings) as QueueSettings;
    const backlog = new Map(this.backlogByShard().map((b) => [b.shard, b]));
    return {
      accountId: row.account_id,
      queueId: row.queue_id,
      queueName: row.queue_name,
      paused: settings.delivery_paused,
      retentionMs: settings.message_retention_period * 1000,
      consumer: this.consumers()[0] ?? null,
      shards: this.shards()
        .filter((s) => s.state !== "retired")
        .map((s) => ({ ...s, backlog: backlog.get(s.name) ?? null })),
    };
  }

  /**
   * A storage shard went from empty to holding messages, or filled a batch a consumer
   * waits for: one consumer shard is woken, enough to take it. (Waking every wanted
   * consumer shard on each of these made a storm of rounds, run after run of the
   * benchmark, once a large backlog had asked for many: heartbeats scale up instead.)
   */
  async notifyReady(shard: string): Promise<void> {
    if (this.shards().some((s) => s.name === shard)) await this.wakeConsumers({ one: true });
  }

  /**
   * Wakes as many consumer shards as the backlog calls for: one per
   * BACKLOG_PER_CONSUMER_SHARD messages, at least one, at most max_concurrency; those
   * that reported a round still running are left to it. With `one`, a single one of
   * them at random, running or not; with `all`, every one: after a change of settings
   * (a resume, a new consumer) a shard's last report says nothing about what it will
   * do next, and its next round may be many seconds away.
   */
  private async wakeConsumers(opts: { one?: boolean; all?: boolean } = {}): Promise<void> {
    const row = this.row();
    const consumer = this.consumers()[0];
    if (!row || !consumer || consumer.type !== "worker") return;
    if ((JSON.parse(row.settings) as QueueSettings).delivery_paused) return;
    const backlog = this.heartbeats().reduce((n, h) => n + h.backlog_count, 0);
    const max = consumer.settings.max_concurrency ?? MAX_CONCURRENCY;
    const wanted = Math.max(1, Math.min(max, Math.ceil(backlog / BACKLOG_PER_CONSUMER_SHARD)));
    if (wanted !== row.consumer_shards_wanted) {
      this.ctx.storage.transactionSync(() => {
        this.sql.exec("UPDATE queue SET consumer_shards_wanted = ?", wanted);
        logDecision(this.sql, {
          at: this.clock.now(),
          kind: wanted > row.consumer_shards_wanted ? "add_consumers" : "remove_consumers",
          region: null,
          target: null,
          reason: `backlog ${backlog}: ${wanted} consumer shard(s) at ${BACKLOG_PER_CONSUMER_SHARD} messages each, max ${max}`,
          figures: { backlog, consumerShards: wanted, previous: row.consumer_shards_wanted, maxConcurrency: max },
        });
      });
    }
    // Shards past `wanted` are not woken again: they finish their round and stop.
    let indexes = Array.from({ length: wanted }, (_, i) => i);
    if (opts.one) indexes = [Math.floor(Math.random() * wanted)];
    else if (!opts.all) {
      const fresh = this.clock.now() - 3 * serviceConfig(this.env).heartbeatIntervalMs;
      const busy = new Set(readConsumerShards(this.sql).filter((c) => c.running && c.received_at >= fresh).map((c) => c.index));
      indexes = indexes.filter((i) => !busy.has(i));
    }
    await Promise.all(indexes.map((i) => consumerShardFor(this.env, row.queue_id, i).wake(row.queue_id, i)));
  }


  /** The authoritative map; brokers come here when KV has none yet or theirs proved stale. */
  shardMap(): ShardMap | null {
    const row = this.row();
    if (!row || !row.ready) return null;
    return {
      version: row.map_version,
      accountId: row.account_id,
      queueId: row.queue_id,
      queueName: row.queue_name,
      settings: JSON.parse(row.settings) as QueueSettings,
      shards: this.shards(),
      publishedAt: this.clock.now(),
    };
  }

  async updateSettings(patch: QueueSettingsPatch): Promise<QueueInfo | null> {
    const row = this.row();
    if (!row || !row.ready) return null;
    const next = applySettingsPatch(JSON.parse(row.settings) as QueueSettings, patch);
    if (JSON.stringify(next) === row.settings) return this.info();
    this.sql.exec(
      "UPDATE queue SET settings = ?, modified_at = ?, map_version = map_version + 1",
      JSON.stringify(next),
      this.clock.now(),
    );
    await this.publish();
    await this.wakeConsumers({ all: true });
    return this.info();
  }

  /**
   * Changes a shard's state. The shard is told first, so it refuses sends the
   * moment it is draining; brokers holding the old map retry another shard.
   */
  async setShardState(name: string, state: ShardState): Promise<ShardMap | null> {
    const shard = this.shards().find((s) => s.name === name);
    if (!shard) return null;
    await storageShardFor(this.env, name, shard.region).setState(state);
    this.sql.exec("UPDATE shards SET state = ?, changed_at = ? WHERE name = ?", state, this.clock.now(), name);
    this.sql.exec("UPDATE queue SET map_version = map_version + 1");
    await this.publish();
    return this.shardMap();
  }

  /** Keeps the latest report of each of this queue's shards; reports from shards it does not know are dropped. */
  heartbeat(beat: StorageHeartbeat): { known: boolean; retentionMs: number | null } {
    const row = this.row();
    if (!row || !this.shards().some((s) => s.name === beat.shard)) return { known: false, retentionMs: null };
    recordStorageBeat(this.sql, beat, this.clock.now());
    if (beat.backlogCount > 0) this.ctx.waitUntil(this.wakeConsumers());
    // The shard learns the queue's retention here, so it can expire messages no consumer reads.
    return { known: true, retentionMs: (JSON.parse(row.settings) as QueueSettings).message_retention_period * 1000 };
  }

  /** A consumer shard's report after a round of delivery. */
  consumerReport(report: ConsumerShardReport): void {
    if (this.row()) recordConsumerReport(this.sql, report, this.clock.now());
  }

  /** Consumer shards that have reported, and how many are delivering now. */
  consumerShards(): { running: number; shards: ConsumerShardStatus[] } {
    const shards = readConsumerShards(this.sql);
    const fresh = this.clock.now() - 3 * serviceConfig(this.env).heartbeatIntervalMs;
    return { running: shards.filter((s) => s.running && s.received_at >= fresh).length, shards };
  }


  /**
   * The backlog of every shard not retired, as its latest heartbeat reported it: what
   * send answers sum their queue figures from (src/routing/queue-figures.ts), cached by brokers.
   */
  backlogByShard(): ShardBacklog[] {
    const live = new Set(this.shards().filter((s) => s.state !== "retired").map((s) => s.name));
    return this.heartbeats()
      .filter((h) => live.has(h.name))
      .map((h) => ({ shard: h.name, count: h.backlog_count, bytes: h.backlog_bytes, oldestAt: h.oldest_at }));
  }

  /** The latest heartbeat of every shard that has sent one. */
  heartbeats(): ShardHeartbeat[] {
    return readStorageBeats(this.sql, this.clock.now(), serviceConfig(this.env).heartbeatIntervalMs);
  }


  /** Deletes the queue: every shard's data, the published maps, then this object's own state. */
  async destroy(): Promise<boolean> {
    const row = this.row();
    if (!row) return false;
    await Promise.all(this.shards().map((s) => storageShardFor(this.env, s.name, s.region).destroy()));
    await Promise.all(shardMapKeys(row.account_id, row.queue_id, row.queue_name).map((k) => this.env.SHARD_MAPS.delete(k)));
    await this.ctx.storage.deleteAll();
    migrateCoordinator(this.sql);
    return true;
  }

  /**
   * The control loop, every heartbeat interval while the queue exists: finish any change
   * a reset interrupted, run the autoscaler and carry out its decisions, size the
   * consumer shards, and publish the map (deferred writes, and a periodic refresh).
   */
  override async alarm(): Promise<void> {
    const now = this.clock.now();
    try {
      await this.tick(now);
    } catch (err) {
      // Not thrown: the platform retries a throwing alarm 6 times and then drops it, and
      // the control loop would stop for good (the fault run's throw-alarm fault).
      console.error(`coordinator ${this.row()?.queue_id}: control loop failed, next tick in one interval:`, err);
      if (this.row()?.ready) await this.armTick(now + serviceConfig(this.env).heartbeatIntervalMs);
    }
  }

  private async tick(now: number): Promise<void> {
    this.hooks.alarmStarts();
    const row = this.row();
    if (!row || !row.ready) return;
    await this.loop.activatePending();
    await this.loop.reconcileStates(now);
    await this.loop.autoscale(now);
    await this.wakeConsumers();
    this.loop.pruneRetired(now);
    recordPoint(this.sql, now, this.heartbeats(), this.shards().filter((s) => s.state === "active").length, this.consumerShards().running);
    if (now - row.published_at >= REFRESH_MAP_MS) this.sql.exec("UPDATE queue SET published_version = MIN(published_version, map_version - 1)");
    await this.publish();
    await this.armTick(now + serviceConfig(this.env).heartbeatIntervalMs);
    this.hooks.alarmEnds(now);
  }

  /**
   * The fault harness's hook (src/kernel/test-hooks.ts): arm a point, force a scale-out or a
   * drain now, or keep the published map as it is for `holdMapMs`. Throws unless
   * SHARDQ_TEST_HOOKS is "on".
   */
  async testHook(req: { arm?: FaultPoint | null; times?: number; action?: "scale-out" | "drain"; shard?: string; holdMapMs?: number } = {}): Promise<TestHookStatus & { changed?: string; map_held_until?: number }> {
    this.hooks.check();
    if (req.holdMapMs) this.holdMapUntil = Date.now() + req.holdMapMs;
    this.hooks.control(req.arm, req.times);
    const changed = req.action ? await this.loop.force(req.action, this.clock.now(), req.shard) : undefined;
    await this.publish();
    return { ...this.hooks.status(), ...(changed ? { changed } : {}), ...(this.holdMapUntil > Date.now() ? { map_held_until: this.holdMapUntil } : {}) };
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
    if (this.row()) recordSendLatency(this.sql, counts);
  }

  /** GET /metrics: the delivery counters (counters.ts) and the send latency histogram, cumulative. */
  metricsTotals(): { counters: QueueCounters; sendLatency: SendLatencyCounts } {
    return { counters: queueCounters(this.sql), sendLatency: readSendLatency(this.sql) };
  }

  /** Sets the alarm to `at` unless it is already due sooner. */
  private async armTick(at: number): Promise<void> {
    const current = await this.ctx.storage.getAlarm();
    if (current === null || at < current) await this.ctx.storage.setAlarm(at);
  }

  /**
   * Writes the current map to KV under the queue's id and name. At most one write a
   * second per key: a change inside that window is deferred to an alarm, never lost.
   */
  private async publish(): Promise<void> {
    const row = this.row();
    if (!row || !row.ready || row.published_version >= row.map_version) return;
    const now = this.clock.now();
    if (Date.now() < this.holdMapUntil) return void (await this.armTick(this.holdMapUntil));
    const earliest = row.published_at + KV_MIN_WRITE_INTERVAL_MS;
    // A write already on its way to KV counts as the one write of this second.
    if (this.publishing || now < earliest) {
      await this.armTick(Math.max(earliest, now + (this.publishing ? KV_MIN_WRITE_INTERVAL_MS : 0)));
      return;
    }
    this.publishing = true;
    const map = this.shardMap()!;
    const value = JSON.stringify(map);
    try {
      await Promise.all(shardMapKeys(row.account_id, row.queue_id, row.queue_name).map((k) => this.env.SHARD_MAPS.put(k, value)));
    } catch (err) {
      console.error(`shard map publish failed for queue ${row.queue_id}, retrying: ${(err as Error).message}`);
      await this.armTick(now + PUBLISH_RETRY_MS);
      return;
    } finally {
      this.publishing = false;
    }
    // Another change may have landed while we awaited KV: only mark what we wrote.
    this.sql.exec("UPDATE queue SET published_version = MAX(published_version, ?), published_at = ?", map.version, now);
    const after = this.row(); // null if the queue was deleted meanwhile
    if (after && after.map_version > map.version) await this.armTick(now + KV_MIN_WRITE_INTERVAL_MS);
  }

  private row(): QueueRow | null {
    return (this.sql.exec("SELECT * FROM queue").toArray()[0] as unknown as QueueRow | undefined) ?? null;
  }

  /** The shards brokers and consumers may use: not the ones still being created. */
  private shards(): ShardEntry[] {
    return this.sql
      .exec("SELECT name, region, state FROM shards WHERE state != 'pending' ORDER BY created_at, name")
      .toArray() as unknown as ShardEntry[];
  }
}
