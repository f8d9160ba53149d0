import { DurableObject } from "cloudflare:workers";
import { coordinatorFor, storageShardFor } from "../src/kernel/addressing";
import { bindingMetrics, sumFigures } from "../src/routing/queue-figures";
import { systemClock, type Clock } from "../src/kernel/clock";
import { serviceConfig } from "../src/kernel/config";
import type { DispatchMessage } from "../src/consumer/entrypoint";
import { consumerBinding, consumerBindingName, type ConsumerRecord } from "../src/kernel/consumer-settings";
import { decodeBody } from "../src/kernel/encoding";
import type { Env } from "../src/kernel/env";
import { leaseRefOf, type DeliveryPlan, type LeasedMessage, type DispatchOutcome } from "../src/kernel/protocol";
import { joinDispositions } from "../src/delivery/disposition";
import { dispose, FAILED_DISPATCH } from "../src/delivery/outcome";
import { applyDisposition } from "../src/delivery/settle";
import { transportFor, type Dispatch } from "./transports";
import { meteredStorage, newMeter, readMeter } from "../src/kernel/sql-meter";
import { testHooksFor, type FaultPoint, type TestHookStatus } from "../src/kernel/test-hooks";

/** Wall-clock limit of one Cloudflare queue() invocation; leases are not extended past it. */
const MAX_EXECUTION_MS = 15 * 60_000;
/** One alarm delivers for at most this long, then hands over to the next alarm. */
const ROUND_BUDGET_MS = 30_000;
/** When the consumer Worker is not bound yet, look again after this long. */
const UNBOUND_RETRY_MS = 30_000;
/** A round that failed (a storage shard or the Coordinator did not answer) runs again after this long. */
const RETRY_AFTER_ERROR_MS = 2000;
/** How often a consumer shard at work reports to its Coordinator. */
const REPORT_EVERY_MS = 5000;

type PlannedShard = DeliveryPlan["shards"][number];

/**
 * A consumer shard of one queue, alarm-driven. Woken by the Coordinator when messages
 * are ready (and by its own alarm), it leases a batch from a storage shard picked at
 * random weighted by backlog, hands it to the consumer, applies the outcome, and goes
 * on while any shard has ready messages; then it sets its alarm for the next message
 * that becomes visible. A crash anywhere loses nothing: unacked leases expire and the
 * messages are delivered again.
 */
export class ConsumerShard extends DurableObject<Env> {
  /** Tests drive time and stand in for the consumer Worker through these. */
  clock: Clock = systemClock;
  dispatchOverride: Dispatch | undefined;
  /** A push lease (PUSH_LEASE_MS, 30 s unless set); renewed every third of it while the handler runs. */
  leaseMs = serviceConfig(this.env).pushLeaseMs;
  maxExecutionMs = MAX_EXECUTION_MS;

  /** The fault harness's aborts and alarm throws; inert unless SHARDQ_TEST_HOOKS is "on" (src/kernel/test-hooks.ts). */
  private readonly hooks = testHooksFor(this.env, "consumer");

  /** Delivered since the last report to the Coordinator. */
  private report = { delivered: 0, batches: 0, errors: 0, at: 0 };

  /** RPCs served, alarms run, rows written and read since this object started (src/kernel/sql-meter.ts), sent with every report. */
  private readonly cost = newMeter();
  private readonly since = Date.now();
  /** ctx.storage, metered: its key-value and alarm calls are billed as rows. */
  private readonly storage = meteredStorage(this.ctx.storage, this.cost);

  /** Makes sure a round runs now, unless one is already due. */
  async wake(queueId: string, index: number): Promise<void> {
    this.cost.rpcs++;
    if ((await this.storage.get<string>("queueId")) !== queueId) await this.storage.put("queueId", queueId);
    if ((await this.storage.get<number>("index")) !== index) await this.storage.put("index", index);
    const now = this.clock.now();
    const alarm = await this.storage.getAlarm();
    if (alarm === null || alarm > now) await this.storage.setAlarm(now);
  }

  override async alarm(): Promise<void> {
    this.cost.alarms++;
    const queueId = await this.storage.get<string>("queueId");
    if (!queueId) return;
    let next: number | null;
    let failed = false;
    try {
      this.hooks.alarmStarts();
      next = await this.deliverRound(queueId);
    } catch (err) {
      failed = true;
      // Not thrown: the platform retries a throwing alarm 6 times and then drops it, and
      // this shard would deliver nothing until the Coordinator woke it again.
      console.error(`consumer shard: delivery round failed, again in ${RETRY_AFTER_ERROR_MS} ms:`, err);
      this.report.errors++;
      next = this.clock.now() + RETRY_AFTER_ERROR_MS;
    }
    // Running: its next round comes within a heartbeat interval (its budget ran out, or
    // a batch is filling), so the Coordinator's heartbeat wake-ups leave it alone. One
    // with no round due, or only one far off (a lease ending in a minute), is idle: a
    // heartbeat that sees backlog wakes it.
    const soon = this.clock.now() + serviceConfig(this.env).heartbeatIntervalMs;
    await this.sendReport(queueId, next !== null && next <= soon);
    await this.armNext(next);
    if (!failed) this.hooks.alarmEnds(this.clock.now());
  }

  /**
   * Sets the alarm for the next round, unless one is already due sooner. A wake() that
   * came during this round set an alarm for now (inside a running alarm, getAlarm() sees
   * only alarms set since it began); overwriting it with this round's later `next` lost
   * that wake-up, and the Coordinator, told this shard was running, left it alone until
   * its report went stale, heartbeat intervals later: a message sent meanwhile waited
   * all that time instead of going out at once.
   */
  async armNext(next: number | null): Promise<void> {
    if (next === null) return;
    const pending = await this.storage.getAlarm();
    if (pending === null || pending > next) await this.storage.setAlarm(next);
  }

  /** The fault harness's hook (src/kernel/test-hooks.ts): throws unless SHARDQ_TEST_HOOKS is "on". */
  testHook(req: { arm?: FaultPoint | null; times?: number } = {}): TestHookStatus {
    return this.hooks.control(req.arm, req.times);
  }

  /** Tells the Coordinator what this shard delivered, and whether it is still at work. */
  private async sendReport(queueId: string, running: boolean): Promise<void> {
    const index = (await this.storage.get<number>("index")) ?? 0;
    const { delivered, batches, errors } = this.report;
    this.report = { delivered: 0, batches: 0, errors: 0, at: this.clock.now() };
    try {
      await coordinatorFor(this.env, queueId).consumerReport({ index, running, delivered, batches, errors, cost: readMeter(this.cost, this.since) });
    } catch (err) {
      console.error("consumer shard report failed:", err);
    }
  }

  /** Delivers batches until no storage shard has ready messages or the round's budget is spent. Returns when to run again. */
  async deliverRound(queueId: string): Promise<number | null> {
    const plan = await coordinatorFor(this.env, queueId).deliveryPlan();
    const consumer = plan?.consumer;
    // Paused, deleted, or no push consumer: the Coordinator wakes us when that changes.
    if (!plan || !consumer || consumer.type !== "worker" || plan.paused) return null;
    const dispatch = this.dispatchOverride ?? this.transport(consumer);
    if (!dispatch) return this.clock.now() + UNBOUND_RETRY_MS;

    const started = this.clock.now();
    const weights = new Map(plan.shards.map((s) => [s.name, s.backlog?.count ?? null]));
    // The queue's figures for each batch's metadata: heartbeats, then each shard's exact figures as it is leased from.
    const figures = new Map(plan.shards.map((s) => [s.name, s.backlog]));
    const idle = new Set<string>();
    let next: number | null = null;
    const later = (t: number | null) => {
      if (t !== null && (next === null || t < next)) next = t;
    };
    while (this.clock.now() - started < ROUND_BUDGET_MS) {
      const shard = pickWeighted(plan.shards.filter((s) => !idle.has(s.name)), weights);
      if (!shard) return next;
      const lease = await storageShardFor(this.env, shard.name).lease({
        queueId,
        limit: consumer.settings.batch_size,
        leaseMs: this.leaseMs,
        maxWaitMs: consumer.settings.max_wait_time_ms,
        retentionMs: plan.retentionMs,
      });
      weights.set(shard.name, lease.backlog.count);
      figures.set(shard.name, lease.backlog);
      if (lease.messages.length === 0) {
        idle.add(shard.name);
        // A batch still filling: the storage shard wakes consumers when it fills before then.
        later(lease.waitUntil);
        later(lease.nextVisibleAt);
        continue;
      }
      // Leased and not yet handed over: a reset here leaves the leases to expire.
      this.hooks.at("abort-leased", this.ctx);
      await this.deliverBatch(plan, consumer, shard.name, lease.messages, dispatch, { metrics: bindingMetrics(sumFigures([...figures.values()])) });
      // A long round still reports every few seconds, so the Coordinator sees it working.
      if (this.clock.now() - this.report.at >= Math.min(REPORT_EVERY_MS, serviceConfig(this.env).heartbeatIntervalMs)) await this.sendReport(queueId, true);
    }
    return this.clock.now();
  }

  private async deliverBatch(
    plan: DeliveryPlan,
    consumer: ConsumerRecord,
    shardName: string,
    leased: LeasedMessage[],
    dispatch: Dispatch,
    metadata: MessageBatchMetadata,
  ): Promise<void> {
    const readable: Array<{ leased: LeasedMessage; message: DispatchMessage }> = [];
    const unreadable: LeasedMessage[] = [];
    for (const m of leased) {
      try {
        readable.push({ leased: m, message: { id: m.id, timestamp: new Date(m.enqueuedAt), body: decodeBody(m.body, m.contentType), attempts: m.attempts } });
      } catch {
        unreadable.push(m);
      }
    }
    const outcome = await this.withLeasesHeld(plan.queueId, shardName, leased, () =>
      dispatch(plan.queueName, readable.map((r) => r.message), metadata),
    );
    this.report.batches++;
    this.report.delivered += leased.length;
    if (outcome.outcome !== "ok") this.report.errors++;
    // The consumer is done with the batch and its acks are not applied: they come again.
    this.hooks.at("abort-dispatched", this.ctx);
    const d = dispose(readable.map((r) => r.leased), outcome, consumer.settings);
    // A body that cannot be decoded fails its delivery, and so ends in the dead-letter queue.
    const u = dispose(unreadable, FAILED_DISPATCH, consumer.settings);
    // The batch is in hand, so the dead-letter queue gets its messages without a read.
    await applyDisposition(this.env, plan, consumer, shardName, joinDispositions(d, u), leased);
  }

  /**
   * Runs the handler while renewing the batch's leases (QuiCK's Algorithm 3), so a slow
   * handler is not raced by a second delivery, up to the maximum execution time. A
   * dispatch that fails outright counts as a handler that threw.
   */
  private async withLeasesHeld(queueId: string, shardName: string, leased: LeasedMessage[], run: () => Promise<DispatchOutcome>): Promise<DispatchOutcome> {
    const refs = leased.map(leaseRefOf);
    const shard = storageShardFor(this.env, shardName);
    const started = Date.now();
    const timer = setInterval(() => {
      if (Date.now() - started + this.leaseMs > this.maxExecutionMs) return clearInterval(timer);
      shard.extendLeases(queueId, refs, this.leaseMs).catch((err) => console.error("lease extension failed:", err));
    }, Math.max(1, Math.floor(this.leaseMs / 3)));
    try {
      return await run();
    } catch (err) {
      console.error(`dispatch of ${leased.length} message(s) failed:`, err);
      return FAILED_DISPATCH;
    } finally {
      clearInterval(timer);
    }
  }

  private transport(consumer: ConsumerRecord): Dispatch | null {
    const binding = consumer.script_name ? consumerBinding(this.env, consumer.script_name) : null;
    if (!binding) {
      console.error(`no service binding ${consumerBindingName(consumer.script_name ?? "")} for consumer ${consumer.script_name}; add it to shardq's wrangler.toml`);
      return null;
    }
    return transportFor(binding, consumer.settings.transport);
  }
}

/**
 * A shard picked at random, weighted by its backlog plus one: busy shards are visited
 * more, and a small (or not yet reported) shard always keeps a chance.
 */
export function pickWeighted(shards: PlannedShard[], weights: Map<string, number | null>, random: () => number = Math.random): PlannedShard | undefined {
  if (shards.length === 0) return undefined;
  const w = shards.map((s) => 1 + Math.max(0, weights.get(s.name) ?? 0));
  let r = random() * w.reduce((a, b) => a + b, 0);
  for (let i = 0; i < shards.length; i++) {
    r -= w[i]!;
    if (r < 0) return shards[i];
  }
  return shards[shards.length - 1];
}
