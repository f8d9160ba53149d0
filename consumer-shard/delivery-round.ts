/**
 * A consumer shard's round of delivery: batch after batch, each leased from a storage shard picked
 * at random weighted by backlog (shard-choice.ts) or gathered from several none of which fills a
 * batch alone (gather.ts), handed to the consumer and settled on each shard, until no shard has
 * ready messages or the round's budget is spent. What a round learns of the storage shards is
 * kept for the next (RoundMemory).
 */
import { storageShardFor } from "../src/kernel/addressing";
import { serviceConfig } from "../src/kernel/config";
import type { ConsumerRecord } from "../src/kernel/consumer-settings";
import type { Env } from "../src/kernel/env";
import type { ShardBacklog } from "../src/kernel/figures";
import type { SettleRequest, SettleResult } from "../src/kernel/protocol";
import type { DeliveryPlan } from "../src/kernel/shard-map";
import type { FaultPoint } from "../src/kernel/test-hooks";
import { bindingMetrics, sumFigures } from "../src/routing/queue-figures";
import { applyDisposition } from "../src/delivery/settle";
import type { LeasedBatch, PartOutcome } from "./batch-delivery";
import { decideGather, oldestFirst, reserveFor, type FillingShard } from "./gather";
import type { PushChoice } from "./push-choice";
import type { ConsumerReports } from "./reports";
import { keepFresher, pickWeighted } from "./shard-choice";
import type { Dispatch } from "./transports";

/** One alarm delivers for at most this long, then hands over to the next alarm. */
const ROUND_BUDGET_MS = 30_000;
/**
 * A round visits the storage shards it has word of messages on (a wake-up naming one, a
 * lease that left some, a partial batch); every shard only when woken without a name (the
 * Coordinator's safety wake-ups, a plan change), after a restart, or this long after the
 * last such sweep. A shard that gets messages after a lease found it empty wakes the
 * consumer naming itself (storage-shard/consumer-wakeups.ts), and one whose wake-up or push
 * fails tells the Coordinator instead, so the sweep is a backstop: as slow as a storage shard's
 * report on the slow cadence (src/kernel/heartbeat.ts), whose ready messages wake consumers too.
 * Each sweep is a request to every storage shard of the queue.
 */
export const SWEEP_EVERY_MS = 5 * 60_000;

/** What rounds keep of the storage shards from one round to the next. */
export class RoundMemory {
  /** The freshest figures of each storage shard of the plan (ShardBacklog.at), kept from round to round. */
  readonly figures = new Map<string, ShardBacklog>();
  /** Storage shards last seen holding a partial batch, kept from round to round (in memory: lost with the object, which only costs a wait). */
  readonly waiting = new Map<string, FillingShard>();
  /** Storage shards a wake-up named as holding new messages, not leased from since. */
  readonly named = new Set<string>();
  /** Storage shards this shard's last lease from found with nothing ready and no batch filling. */
  readonly foundEmpty = new Set<string>();
  /** A wake-up named no shard: the next round visits every one. */
  sweepAsked = false;
  lastSweep = -Infinity;
}

/** What a round needs of its consumer shard. */
export interface RoundDeps {
  env: Env;
  now(): number;
  /** The push lease, as the consumer shard has it now. */
  leaseMs(): number;
  memory: RoundMemory;
  pushChoice: PushChoice;
  reports: ConsumerReports;
  /** Whether a wake-up named a plan other than `version`: the round ends after its batch. */
  planSuperseded(version: string): boolean;
  /** A storage shard refused a lease (retired, unknown): the next round fetches the plan. */
  doubtPlan(): void;
  /** The fault harness's abort points (src/kernel/test-hooks.ts); a no-op unless armed. */
  faultPoint(point: FaultPoint): void;
  /** The handler run on a batch, counted for the next report (ConsumerShard.handOver). */
  handOver(
    plan: DeliveryPlan,
    consumer: ConsumerRecord,
    batch: LeasedBatch,
    dispatch: Dispatch,
    metadata: MessageBatchMetadata,
    leasedAt: number,
  ): Promise<PartOutcome[]>;
}

/** One round, for a plan with a push consumer and its transport. Returns when to run again. */
export async function runRound(
  deps: RoundDeps,
  queueId: string,
  index: number,
  plan: DeliveryPlan,
  consumer: ConsumerRecord,
  dispatch: Dispatch,
): Promise<number | null> {
  const { memory } = deps;
  const { figures, waiting, named, foundEmpty } = memory;
  const started = deps.now();
  const { batch_size: batchSize, max_wait_time_ms: maxWaitMs } = consumer.settings;
  // The queue's figures for each batch's metadata, and the weights shards are picked by: the
  // freshest of the plan's (heartbeats), each lease's exact figures of its shard and the
  // figures of the others it hands on, kept from round to round.
  for (const s of plan.shards) if (s.backlog) keepFresher(figures, s.backlog);
  for (const name of figures.keys()) if (!plan.shards.some((s) => s.name === name)) figures.delete(name);
  const weights = new Map(plan.shards.map((s) => [s.name, figures.get(s.name)?.count ?? null]));
  const sweep = memory.sweepAsked || started - memory.lastSweep >= SWEEP_EVERY_MS;
  if (sweep) {
    memory.sweepAsked = false;
    memory.lastSweep = started;
  }
  // Shards this shard's own lease found empty, and no wake-up named since, are passed over: that
  // lease made the shard wake a consumer, naming itself, at its next arrival (consumer-wakeups.ts).
  const idle = new Set<string>(
    sweep ? [] : plan.shards.filter((s) => foundEmpty.has(s.name) && !named.has(s.name)).map((s) => s.name),
  );
  // Shards holding a partial batch that is not due yet (gather.ts), found in this round.
  const filling = new Map<string, FillingShard>();
  // The same, as last seen in any round: a remainder seen before joins the next full batch
  // another shard fills. A shard gone from the plan is forgotten, one due by now looked at again.
  for (const [name, f] of waiting)
    if (f.waitUntil <= started || !plan.shards.some((s) => s.name === name)) waiting.delete(name);
  let next: number | null = null;
  const later = (t: number | null) => {
    if (t !== null && (next === null || t < next)) next = t;
  };
  const leaseFrom = async (name: string, limit: number, waitMs: number) => {
    named.delete(name);
    const pushes = deps.pushChoice.wanted(deps.now(), batchSize, maxWaitMs);
    const lease = await storageShardFor(deps.env, name).lease({
      queueId,
      limit,
      leaseMs: deps.leaseMs(),
      maxWaitMs: waitMs,
      retentionMs: plan.retentionMs,
      consumerShard: index,
      pushes,
    });
    // Retired or unknown: the plan kept is older than the map.
    if (lease.refused) deps.doubtPlan();
    else keepFresher(figures, { ...lease.backlog, at: lease.backlog.at ?? Date.now() });
    for (const b of lease.peers ?? []) if (weights.has(b.shard)) keepFresher(figures, b);
    // Nothing here now or later (no delay, retry or lease to run out, or nothing stored at all):
    // passed over until named.
    if (
      lease.messages.length === 0 &&
      lease.waitUntil === null &&
      (lease.nextVisibleAt === null || lease.backlog.count === 0) &&
      !lease.refused
    )
      foundEmpty.add(name);
    else foundEmpty.delete(name);
    weights.set(name, figures.get(name)?.count ?? lease.backlog.count);
    if (lease.messages.length === 0 && lease.waitUntil !== null)
      waiting.set(name, { name, ready: lease.ready ?? 1, waitUntil: lease.waitUntil });
    else waiting.delete(name);
    return lease;
  };
  while (deps.now() - started < ROUND_BUDGET_MS) {
    // The Coordinator woke this shard with another plan (a pause, a new consumer, a shard
    // drained): the next round starts with it, now.
    if (deps.planSuperseded(plan.version)) return deps.now();
    let batch: LeasedBatch;
    let reserved = 0;
    // When this batch's first lease was taken: its leases run from then, not from the dispatch.
    let leasedAt = Date.now();
    const shard = pickWeighted(
      plan.shards.filter((s) => !idle.has(s.name) && !filling.has(s.name)),
      weights,
    );
    if (shard) {
      // Room in the batch for what already waits on filling shards, which joins it below.
      reserved = reserveFor(waiting, batchSize, shard.name);
      const lease = await leaseFrom(shard.name, batchSize - reserved, maxWaitMs);
      if (lease.messages.length === 0) {
        if (lease.waitUntil !== null)
          filling.set(shard.name, { name: shard.name, ready: lease.ready ?? 1, waitUntil: lease.waitUntil });
        else idle.add(shard.name);
        later(lease.nextVisibleAt);
        continue;
      }
      batch = [{ shard: shard.name, messages: lease.messages }];
      leasedAt = Date.now();
    } else {
      // Every shard is empty or filling a batch: gather one batch from them, or wait.
      if (filling.size === 0) return next;
      const decision = decideGather([...filling.values()], batchSize, maxWaitMs, deps.now());
      if (!decision.gather) {
        later(decision.wakeAt);
        return next;
      }
      batch = [];
    }
    // A batch short of full (room left for what waits elsewhere, its shard's oldest message
    // due, or shards that fill it only together) takes what the other shards have ready,
    // the oldest first, up to the batch size.
    let left = batchSize - batch.reduce((n, p) => n + p.messages.length, 0);
    // Not past a third of the lease: a slow shard must not let the leases already taken run out before the dispatch.
    const inTime = () => Date.now() - leasedAt < deps.leaseMs() / 3;
    for (const s of oldestFirst(plan.shards, waiting)) {
      if (left <= 0 || !inTime()) break;
      if (idle.has(s.name) || batch.some((p) => p.shard === s.name)) continue;
      filling.delete(s.name);
      const lease = await leaseFrom(s.name, left, 0);
      later(lease.nextVisibleAt);
      if (lease.messages.length === 0) {
        idle.add(s.name);
        continue;
      }
      batch.push({ shard: s.name, messages: lease.messages });
      left -= lease.messages.length;
    }
    // Less waited elsewhere than the room left for it: the first shard, which gave all it was asked, fills the rest.
    const first = batch[0];
    if (shard && first && left > 0 && first.messages.length === batchSize - reserved && inTime()) {
      const more = await leaseFrom(first.shard, left, 0);
      first.messages = first.messages.concat(more.messages);
    }
    if (batch.length === 0) continue;
    // Leased and not yet handed over: a reset here leaves the leases to expire.
    deps.faultPoint("abort-leased");
    const settled = await deliverBatch(
      deps,
      plan,
      consumer,
      batch,
      dispatch,
      { metrics: bindingMetrics(sumFigures([...figures.values()])) },
      leasedAt,
      {
        shard: index,
        limit: batchSize,
        maxWaitMs,
        ...(deps.pushChoice.wanted(deps.now(), batchSize, maxWaitMs) ? { leaseMs: deps.leaseMs() } : {}),
      },
    );
    // A shard its settle left with nothing ready is passed over, as an empty lease would have
    // found it (and it wakes this shard at its next arrival): no lease to find out.
    for (const { shard: name, after } of settled) {
      if (!after || after.ready) continue;
      idle.add(name);
      waiting.delete(name);
      later(after.nextVisibleAt);
      if (after.nextVisibleAt === null) foundEmpty.add(name);
    }
    // A long round still reports, so the Coordinator sees it working until its next report
    // (a short one reports at its end, when one is due).
    if (deps.now() - started >= serviceConfig(deps.env).heartbeatIntervalMs)
      await deps.reports.duringLongRound(queueId);
  }
  return deps.now();
}

/** Hands one batch (leased from one shard or gathered from several) to the consumer and settles it on each shard. */
async function deliverBatch(
  deps: RoundDeps,
  plan: DeliveryPlan,
  consumer: ConsumerRecord,
  batch: LeasedBatch,
  dispatch: Dispatch,
  metadata: MessageBatchMetadata,
  leasedAt: number,
  settler: NonNullable<SettleRequest["consumer"]>,
): Promise<Array<{ shard: string; after?: SettleResult["after"] }>> {
  const parts = await deps.handOver(plan, consumer, batch, dispatch, metadata, leasedAt);
  // Each shard settles its own messages; the batch is in hand, so the dead-letter queue gets its messages without a read.
  return Promise.all(
    parts.map(async (p) => ({
      shard: p.shard,
      after: (await applyDisposition(deps.env, plan, consumer, p.shard, p.disposition, p.messages, settler)).after,
    })),
  );
}
