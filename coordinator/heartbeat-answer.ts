/**
 * A storage shard's report (heartbeat) as its Coordinator takes it in: kept (heartbeats.ts), what
 * it wakes (consumer shards, the control loop), what the shard is told back; and the backlog of
 * every shard that the latest reports give, which replies, delivery plans and brokers read.
 */
import { serviceConfig } from "../src/kernel/config";
import type { ConsumerRecord } from "../src/kernel/consumer-settings";
import type { Env } from "../src/kernel/env";
import type { HeartbeatReply, ShardHeartbeat, StorageHeartbeat } from "../src/kernel/heartbeat";
import type { ShardBacklog } from "../src/kernel/figures";
import { notRetired, type ShardEntry } from "../src/kernel/shard-map";
import type { ControlLoop } from "./control-loop";
import { recordStorageBeat } from "./heartbeats";
import { armAlarm } from "./map-publisher";
import type { QueueStore } from "./queue-store";

/** What answering a heartbeat needs of the Coordinator. */
export interface HeartbeatAnswerDeps {
  store: QueueStore;
  sql: SqlStorage;
  storage: DurableObjectStorage;
  env: Env;
  loop: ControlLoop;
  now(): number;
  /** Work the reply does not wait for (ctx.waitUntil). */
  waitUntil(work: Promise<unknown>): void;
  /** The queue's consumers (Coordinator.consumers). */
  consumers(): ConsumerRecord[];
  /** Coordinator.backlogByShard: shardBacklogs of the latest heartbeats. */
  backlogByShard(): ShardBacklog[];
}

/**
 * Keeps the latest report of each of this queue's shards; reports from shards it does not
 * know are dropped. A report wakes the control loop, which runs while shards report and
 * sleeps once they all do (tick). Ready messages wake consumer shards not delivering now;
 * while a push consumer should take them, the shard is asked to report again.
 */
export function answerHeartbeat(deps: HeartbeatAnswerDeps, beat: StorageHeartbeat): HeartbeatReply {
  const { store, loop } = deps;
  const queue = store.queue();
  if (!queue || !store.shards().some((s) => s.name === beat.shard)) return { known: false, retentionMs: null };
  const now = deps.now();
  recordStorageBeat(deps.sql, beat, now);
  const ready = beat.readyNow ?? beat.backlogCount > 0;
  if (ready) deps.waitUntil(loop.wakeConsumers("idle", now));
  // A report on the slow cadence (traffic far below what the autoscaler acts on) has nothing for the control loop.
  const interval = serviceConfig(deps.env).heartbeatIntervalMs;
  const slow = beat.nextReportAt !== undefined && beat.nextReportAt - beat.sentAt > 2 * interval;
  if (queue.ready && !slow) deps.waitUntil(armAlarm(deps.storage, now + interval));
  const pushed = deps.consumers()[0]?.type === "worker" && !queue.settings.delivery_paused;
  const region = store.shards().find((s) => s.name === beat.shard)!.region;
  // The shard learns the queue's retention here, so it can expire messages no consumer reads,
  // and its peers' figures, which it hands on to brokers and consumer shards.
  const backlogs = deps.backlogByShard().filter((b) => b.shard !== beat.shard);
  // Ready messages a consumer took some of in the period are being taken: no need to report sooner for them.
  const untaken = ready && pushed && beat.messagesOut === 0;
  return {
    known: true,
    retentionMs: queue.settings.message_retention_period * 1000,
    stayAwake: untaken || loop.settling(region, now),
    backlogs,
  };
}

/**
 * The backlog of every shard not retired, as its latest heartbeat reported it: what
 * send answers sum their queue figures from (src/routing/queue-figures.ts), cached by brokers.
 * Each figure is as of its report, or now for a sleeping shard: its last report stays true while it sleeps.
 */
export function shardBacklogs(beats: ShardHeartbeat[], shards: ShardEntry[], now: number): ShardBacklog[] {
  const live = new Set(notRetired(shards).map((s) => s.name));
  return beats
    .filter((h) => live.has(h.name))
    .map((h) => ({
      shard: h.name,
      count: h.backlog_count,
      bytes: h.backlog_bytes,
      oldestAt: h.oldest_at,
      at: h.sleeping ? now : h.received_at,
    }));
}
