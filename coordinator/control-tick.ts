/**
 * One tick of a Coordinator's control loop, as its alarm runs it: the loop's steps in their order
 * (control-loop.ts), the point of the series (time-series.ts), the map published, and when the
 * next tick comes: an interval on while shards report, else only what comes due (the loop sleeps).
 */
import { serviceConfig } from "../src/kernel/config";
import type { Env } from "../src/kernel/env";
import type { ShardHeartbeat } from "../src/kernel/heartbeat";
import type { TestHooks } from "../src/kernel/test-hooks";
import type { ControlLoop } from "./control-loop";
import { armAlarm, type MapPublisher } from "./map-publisher";
import type { QueueStore } from "./queue-store";
import { recordPoint } from "./time-series";

/** What a tick needs of the Coordinator. */
export interface TickDeps {
  store: QueueStore;
  sql: SqlStorage;
  storage: DurableObjectStorage;
  env: Env;
  loop: ControlLoop;
  publisher: MapPublisher;
  hooks: TestHooks;
  now(): number;
  /** The latest heartbeat of every shard (Coordinator.heartbeats). */
  heartbeats(): ShardHeartbeat[];
  /** How many consumer shards deliver now (Coordinator.consumerShards). */
  consumersRunning(): number;
}

/** The tick at `now`: none before the queue is ready. */
export async function tick(deps: TickDeps, now: number): Promise<void> {
  const { store, loop, publisher } = deps;
  deps.hooks.alarmStarts();
  const queue = store.readyQueue();
  if (!queue) return;
  await loop.activatePending();
  await loop.undoCutChanges();
  await loop.reconcileStates(now);
  await loop.settleEpoch();
  const scaleInDue = await loop.autoscale(now);
  await loop.wakeConsumers("idle", deps.now());
  loop.pruneRetired(now);
  const interval = serviceConfig(deps.env).heartbeatIntervalMs;
  const beats = deps.heartbeats();
  // Shards report while they are busy; once none has for two intervals, they all sleep, and so does
  // this loop. Shards on the slow cadence (traffic far below what the autoscaler acts on) and
  // shards whose report was their last keep it asleep.
  const awake =
    beats.some(
      (b) =>
        !b.sleeping && b.received_at >= now - 2 * interval && (b.next_report_at ?? 0) <= b.received_at + 2 * interval,
    ) || loop.halfDone();
  // The point before a sleep is written whatever the step: the series carries it through the quiet time (time-series.ts).
  recordPoint(
    deps.sql,
    now,
    beats,
    store.shards().filter((s) => s.state === "active").length,
    deps.consumersRunning(),
    !awake,
  );
  await publisher.publish();
  // A scale-in due between ticks is decided when due, so a queue is back at its minimum
  // within SCALE_IN_AFTER_MS of its load going quiet (and the heartbeat that shows it);
  // a retired shard is forgotten when due. Neither is a loop: one alarm each.
  const next = Math.min(awake ? now + interval : Infinity, scaleInDue ?? Infinity, loop.nextPruneAt() ?? Infinity);
  if (next !== Infinity) await armAlarm(deps.storage, Math.max(next, now + 1));
  deps.hooks.alarmEnds(now);
}
