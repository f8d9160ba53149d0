/**
 * What a consumer shard needs for its rounds (DeliveryPlan) without the backlogs, and its
 * version: a checksum of it, so whatever changes the plan (settings, the consumer, a pause,
 * the dead-letter queue, a shard added, drained or retired) changes the version without a
 * row written or a place that must remember to. Consumer shards keep their plan while
 * wake-ups carry the same version.
 */
import { crc32 } from "../src/kernel/checksum";
import type { ConsumerRecord } from "../src/kernel/consumer-settings";
import { notRetired, type DeliveryPlan, type ShardEntry, type ShardState } from "../src/kernel/shard-map";
import type { QueueRecord } from "./queue-store";

export type VersionedPlan = Omit<DeliveryPlan, "shards"> & {
  shards: Array<{ name: string; region: string; state: ShardState }>;
};

export function versionedPlan(
  queue: QueueRecord,
  consumer: ConsumerRecord | null,
  shards: ShardEntry[],
): VersionedPlan {
  const plan = {
    accountId: queue.account_id,
    queueId: queue.queue_id,
    queueName: queue.queue_name,
    paused: queue.settings.delivery_paused,
    retentionMs: queue.settings.message_retention_period * 1000,
    consumer,
    shards: notRetired(shards).map((s) => ({ name: s.name, region: s.region, state: s.state })),
  };
  return { version: crc32(new TextEncoder().encode(JSON.stringify(plan))).toString(16), ...plan };
}
