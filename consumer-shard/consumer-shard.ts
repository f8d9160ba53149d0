import { DurableObject } from "cloudflare:workers";
import { coordinatorFor } from "../src/kernel/addressing";
import { bindingMetrics, sumFigures } from "../src/routing/queue-figures";
import { systemClock, systemTimers, type Clock, type Timers } from "../src/kernel/clock";
import { BACKSTOP_MS, RoundSchedule } from "./round-schedule";
import { serviceConfig } from "../src/kernel/config";
import { ConsumerReports } from "./reports";
import { PushChoice } from "./push-choice";
import { consumerBinding, consumerBindingName, type ConsumerRecord } from "../src/kernel/consumer-settings";
import type { Env } from "../src/kernel/env";
import type { ShardBacklog } from "../src/kernel/figures";
import type { LeasedMessage } from "../src/kernel/protocol";
import type { DeliveryPlan } from "../src/kernel/shard-map";
import type { PushReply } from "../src/kernel/push-reply";
import { settleRequestFor } from "../src/delivery/settle";
import { handOver, type LeasedBatch, type PartOutcome } from "./batch-delivery";
import { RoundMemory, runRound, type RoundDeps } from "./delivery-round";
import { transportFor, type Dispatch } from "./transports";
import { keepFresher } from "./shard-choice";
import { meteredStorage, newMeter, readMeter, type MeterReading } from "../src/kernel/sql-meter";
import { meteredRpcs } from "../src/kernel/rpc-meter";
import { testHooksFor, type FaultPoint, type TestHookStatus } from "../src/kernel/test-hooks";

/** Wall-clock limit of one Cloudflare queue() invocation; leases are not extended past it. */
const MAX_EXECUTION_MS = 15 * 60_000;
/** When the consumer Worker is not bound yet, look again after this long. */
const UNBOUND_RETRY_MS = 30_000;
/** A round that failed (a storage shard or the Coordinator did not answer) runs again after this long. */
const RETRY_AFTER_ERROR_MS = 2000;
/**
 * How long a kept delivery plan serves without word from the Coordinator. Every change to the
 * plan reaches the shard sooner, by a wake-up carrying its version; this bounds what a lost
 * wake-up costs.
 */
export const PLAN_REFRESH_MS = 5 * 60_000;

/**
 * A consumer shard of one queue. Woken by a storage shard or the Coordinator when messages are
 * ready (and by its own timer or alarm: round-schedule.ts), it leases a batch from a shard picked
 * at random weighted by backlog, or gathers one from several none of which fills a batch alone
 * (gather.ts), hands it to the consumer, settles it on each shard, and goes on while any shard
 * has ready messages; then it schedules its next round. A trickle's batches come pushed instead
 * (takePushed). A crash anywhere loses nothing: unacked leases expire and come again.
 */
export class ConsumerShard extends DurableObject<Env> {
  /** Tests drive time and stand in for the consumer Worker through these. */
  clock: Clock = systemClock;
  dispatchOverride: Dispatch | undefined;
  /** A push lease (PUSH_LEASE_MS, 30 s unless set); renewed every third of it while the handler runs. */
  leaseMs = serviceConfig(this.env).pushLeaseMs;
  maxExecutionMs = MAX_EXECUTION_MS;
  /** The timers short waits run on (round-schedule.ts); a test with its own clock gets alarms. */
  timers: Timers = systemTimers;

  /** The fault harness's aborts and alarm throws; inert unless SHARDQ_TEST_HOOKS is "on" (src/kernel/test-hooks.ts). */
  private readonly hooks = testHooksFor(this.env, "consumer");

  /** The delivery plan kept from round to round (in memory: a restart asks again) and when it was fetched. */
  private plan: DeliveryPlan | null = null;
  private planAt = -Infinity;
  /** A wake-up named a plan version other than the one kept: fetch it before the next batch. */
  private planWanted: string | undefined;
  /** A storage shard refused this shard's lease (retired, unknown): the next round fetches the plan. */
  private planDoubted = false;
  /** Messages delivered since the last round ended: the round's and pushed batches'. */
  private roundDelivered = 0;
  /** When a pushed batch was last handed to the consumer. */
  private lastPushedAt = -Infinity;
  /** Plans fetched from the Coordinator since this object started (tests read it). */
  planFetches = 0;
  /** A pushed batch under way (takePushed): rounds wait for it. */
  private pushing: Promise<void> | null = null;
  /** Storage shards that pushed here since the last alarm: a push lost with a restart of one is looked for then. */
  private readonly pushers = new Set<string>();

  /** RPCs served, alarms run, rows written and read since this object started (src/kernel/sql-meter.ts), sent with every report. */
  private readonly cost = newMeter();
  private readonly since = Date.now();
  /** ctx.storage, metered: its key-value and alarm calls are billed as rows. */
  private readonly storage = meteredStorage(this.ctx.storage, this.cost);
  /** Whether storage shards push it batches or its rounds lease them (push-choice.ts). */
  private readonly pushChoice = new PushChoice();
  /** Its reports to the Coordinator (reports.ts). */
  private readonly reports = new ConsumerReports(
    this.env,
    () => this.clock.now(),
    async () => (await this.storage.get<number>("index")) ?? 0,
    this.cost,
    this.since,
  );
  /** When rounds run: on a timer for a short wait, else on the alarm, never two at once (round-schedule.ts). */
  private readonly rounds = new RoundSchedule(
    this.storage,
    () => (this.clock === systemClock ? this.timers : null),
    () => this.clock.now(),
    () => this.roundOnce(),
  );

  /** What rounds keep of the storage shards from one round to the next (delivery-round.ts). */
  private readonly memory = new RoundMemory();
  /** What a round needs of this object. */
  private readonly roundDeps: RoundDeps = {
    env: this.env,
    now: () => this.clock.now(),
    leaseMs: () => this.leaseMs,
    memory: this.memory,
    pushChoice: this.pushChoice,
    reports: this.reports,
    planSuperseded: (version) => this.planWanted !== undefined && this.planWanted !== version,
    doubtPlan: () => void (this.planDoubted = true),
    faultPoint: (point) => this.hooks.at(point, this.ctx),
    handOver: (...args) => this.handOver(...args),
  };

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    // Its rounds, and tests driving them, are not requests; wake() and takePushed() are.
    return meteredRpcs(this, this.cost, ["costFigures", "testHook", "schedule", "deliverRound"]);
  }

  /**
   * Makes sure a round runs now, unless one is already due. `planVersion` is the Coordinator's
   * delivery plan as of this wake-up (absent when a storage shard wakes it): a round under way
   * with another plan ends after its batch, and the next one fetches it. `shard` names the
   * storage shard with new messages, when the waker knows it (delivery-round.ts, SWEEP_EVERY_MS); `dueAt`, when
   * the batch filling there is due (its oldest message will have waited max_wait_time_ms): the
   * round runs then, not now, so a partial batch costs one lease, not two.
   */
  async wake(queueId: string, index: number, planVersion?: string, shard?: string, dueAt?: number): Promise<void> {
    if (planVersion !== undefined && planVersion !== this.plan?.version) this.planWanted = planVersion;
    if (shard !== undefined) this.memory.named.add(shard);
    else this.memory.sweepAsked = true;
    await this.remember(queueId, index);
    const now = this.clock.now();
    await this.schedule(dueAt === undefined ? now : Math.max(now, dueAt));
  }

  /**
   * A batch a storage shard pushed (storage-shard/batch-push.ts), delivered now; the reply is its
   * outcome (dead-letter writes done), settled there. Not taken while busy (the next round leases
   * from that shard), paused, or with no Worker bound.
   */
  async takePushed(
    queueId: string,
    index: number,
    shard: string,
    messages: LeasedMessage[],
    figures: ShardBacklog[],
  ): Promise<PushReply> {
    await this.remember(queueId, index);
    // A Coordinator that does not answer: not taken, and a round tries again.
    const plan = this.busy() ? null : await this.currentPlan(queueId).catch(() => undefined);
    const consumer = plan?.consumer;
    if (this.busy() || plan === undefined) {
      this.memory.named.add(shard);
      await this.schedule(this.clock.now() + (plan === undefined ? RETRY_AFTER_ERROR_MS : 0));
      return { taken: false };
    }
    if (!plan || consumer?.type !== "worker" || plan.paused) return { taken: false };
    // Leased under a batch size since lowered: given back, and the round leases it anew.
    if (messages.length > consumer.settings.batch_size) {
      this.memory.named.add(shard);
      await this.schedule(this.clock.now());
      return { taken: false };
    }
    const dispatch = this.dispatchOverride ?? this.transport(consumer, plan.accountId);
    if (!dispatch) return (await this.schedule(this.clock.now() + UNBOUND_RETRY_MS), { taken: false });
    for (const f of figures) keepFresher(this.memory.figures, f);
    this.pushers.add(shard);
    let done!: () => void;
    this.pushing = new Promise<void>((r) => (done = r));
    try {
      // Leased and not yet handed over: a reset here leaves the leases to expire.
      this.hooks.at("abort-leased", this.ctx);
      const [part] = await this.handOver(
        plan,
        consumer,
        [{ shard, messages }],
        dispatch,
        { metrics: bindingMetrics(sumFigures([...this.memory.figures.values()])) },
        Date.now(),
      );
      this.lastPushedAt = this.clock.now();
      const settle = await settleRequestFor(this.env, plan, consumer, shard, part!.disposition, messages);
      await this.reports.ifDue(queueId, this.clock.now() + serviceConfig(this.env).heartbeatIntervalMs, false);
      await this.rounds
        .backstop()
        .catch((err: unknown) => console.error("consumer shard: backstop alarm not set:", err));
      const { batch_size: batchSize, max_wait_time_ms: maxWaitMs } = consumer.settings;
      return {
        taken: true,
        settle,
        pushes: this.pushChoice.wanted(this.clock.now(), batchSize, maxWaitMs),
        batch: { limit: batchSize, maxWaitMs },
      };
    } finally {
      this.pushing = null;
      done();
    }
  }

  /** A round or a pushed batch is under way. */
  private readonly busy = (): boolean => this.rounds.busy || this.pushing !== null;

  /** Which queue and index this object is, for its rounds. */
  private async remember(queueId: string, index: number): Promise<void> {
    if ((await this.storage.get<string>("queueId")) !== queueId) await this.storage.put("queueId", queueId);
    if ((await this.storage.get<number>("index")) !== index) await this.storage.put("index", index);
  }

  override async alarm(): Promise<void> {
    this.cost.alarms++;
    // A backstop: a storage shard that pushed batches here may have lost the next with a restart.
    for (const s of this.pushers) this.memory.named.add(s);
    this.pushers.clear();
    await this.rounds.alarmFired();
  }

  private async roundOnce(): Promise<void> {
    // One batch at a time: a pushed one under way goes first.
    while (this.pushing) await this.pushing;
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
      this.reports.counts.errors++;
      next = this.clock.now() + RETRY_AFTER_ERROR_MS;
    }
    // Running: its next round comes within a heartbeat interval (its budget ran out, or
    // a batch is filling), so the Coordinator's heartbeat wake-ups leave it alone. One
    // with no round due, or only one far off (a lease ending in a minute), is idle: a
    // heartbeat that sees backlog wakes it.
    const interval = serviceConfig(this.env).heartbeatIntervalMs;
    const now = this.clock.now();
    // A round that delivered counts as delivering too: at a steady trickle every round ends for
    // want of messages, and a shard delivering one round after another must not report stopping
    // at each (a report per round); it stops at the first round that delivers nothing. Pushed
    // batches count too, since the last round and within the backstop's period: they come
    // between rounds, whose backstop round finds nothing to lease, and a stop reported there,
    // then a start at the next push, were two reports and rows each time. Within an interval
    // was too short: a trickle's pushes come every max_wait_time_ms (Cloudflare's default 5 s)
    // and more, so the backstop's round found the last one older and reported a stop.
    const running =
      (next !== null && next <= now + interval) ||
      this.roundDelivered > 0 ||
      now - this.lastPushedAt < Math.max(interval, BACKSTOP_MS);
    this.roundDelivered = 0;
    await this.reports.ifDue(queueId, running ? Math.max(next ?? now, now) + interval : null, failed);
    await this.schedule(next);
    if (!failed) this.hooks.alarmEnds(this.clock.now());
  }

  /** Makes sure a round runs at `at` (round-schedule.ts); null: nothing is due. */
  schedule(at: number | null): Promise<void> {
    return this.rounds.schedule(at);
  }

  /**
   * What this object was billed for since it started, as its reports carry it but as of now:
   * the benchmark's read, not counted as an RPC. A report at a trickle comes every 2 minutes,
   * so a window read from reports counted the traffic before it.
   */
  costFigures(): MeterReading {
    return readMeter(this.cost, this.since);
  }

  /** The fault harness's hook (src/kernel/test-hooks.ts): throws unless SHARDQ_TEST_HOOKS is "on". */
  testHook(req: { arm?: FaultPoint | null; times?: number } = {}): TestHookStatus {
    return this.hooks.control(req.arm, req.times);
  }

  /**
   * The delivery plan: the one kept, unless a wake-up named another version, a storage shard
   * refused a lease, or it is PLAN_REFRESH_MS old; then the Coordinator's.
   */
  private async currentPlan(queueId: string): Promise<DeliveryPlan | null> {
    const now = this.clock.now();
    const kept = this.plan;
    if (
      kept &&
      kept.queueId === queueId &&
      this.planWanted === undefined &&
      !this.planDoubted &&
      now - this.planAt < PLAN_REFRESH_MS
    )
      return kept;
    // Cleared first: a wake-up that comes while this fetch is under way names a version this may not have.
    const wanted = this.planWanted;
    this.planWanted = undefined;
    this.planDoubted = false;
    this.planFetches++;
    const plan = await coordinatorFor(this.env, queueId).deliveryPlan();
    if (this.planWanted === wanted || this.planWanted === plan?.version) this.planWanted = undefined;
    this.plan = plan;
    this.planAt = now;
    return plan;
  }

  /** Delivers batches until no storage shard has ready messages or the round's budget is spent (delivery-round.ts). Returns when to run again. */
  async deliverRound(queueId: string): Promise<number | null> {
    const index = (await this.storage.get<number>("index")) ?? 0;
    const plan = await this.currentPlan(queueId);
    const consumer = plan?.consumer;
    // Paused, deleted, or no push consumer: the Coordinator wakes us when that changes.
    if (!plan || !consumer || consumer.type !== "worker" || plan.paused) return null;
    const dispatch = this.dispatchOverride ?? this.transport(consumer, plan.accountId);
    if (!dispatch) return this.clock.now() + UNBOUND_RETRY_MS;
    return runRound(this.roundDeps, queueId, index, plan, consumer, dispatch);
  }

  /** The handler run on a batch (batch-delivery.ts), counted for the next report. */
  private async handOver(
    plan: DeliveryPlan,
    consumer: ConsumerRecord,
    batch: LeasedBatch,
    dispatch: Dispatch,
    metadata: MessageBatchMetadata,
    leasedAt: number,
  ): Promise<PartOutcome[]> {
    const { outcome, parts } = await handOver(
      {
        env: this.env,
        queueId: plan.queueId,
        queueName: plan.queueName,
        consumer,
        dispatch,
        metadata,
        leasedAt,
        leaseMs: this.leaseMs,
        maxExecutionMs: this.maxExecutionMs,
      },
      batch,
    );
    const count = batch.reduce((n, p) => n + p.messages.length, 0);
    for (const p of batch) this.pushChoice.delivered(p.shard, p.messages.length, this.clock.now());
    this.reports.counts.batches++;
    this.reports.counts.delivered += count;
    this.roundDelivered += count;
    if (outcome.outcome !== "ok") this.reports.counts.errors++;
    // The consumer is done with the batch and its acks are not applied: they come again.
    this.hooks.at("abort-dispatched", this.ctx);
    return parts;
  }

  private transport(consumer: ConsumerRecord, accountId: string): Dispatch | null {
    // Checked at every round, not only when the consumer was added: a consumer stored before
    // a binding was tied to its accounts, or since taken off them, pushes nothing.
    const binding = consumer.script_name ? consumerBinding(this.env, consumer.script_name, accountId) : null;
    if (!binding) {
      console.error(
        `no service binding ${consumerBindingName(consumer.script_name ?? "")} for consumer ${consumer.script_name} of account ${accountId}; add it to shardq's wrangler.toml and the account to WORKER_CONSUMER_ACCOUNTS`,
      );
      return null;
    }
    return transportFor(binding, consumer.settings.transport);
  }
}
