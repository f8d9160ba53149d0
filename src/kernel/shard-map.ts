/**
 * What the Coordinator tells the other parts about a queue's shards: the map a send is
 * routed by (published to KV), the plan delivery follows, and what a storage shard is told of
 * itself and of the active set. Split from protocol.ts, which holds a message's own calls.
 */
import type { ConsumerRecord } from "./consumer-settings";
import type { ShardBacklog } from "./figures";
import type { QueueSettings } from "./settings";

/** active: takes sends. draining: takes no sends, still serves reads. retired: gone. */
export type ShardState = "active" | "draining" | "retired";

/**
 * The shards that may still hold messages: active ones, and draining ones until they are empty.
 * A retired shard holds nothing and is kept on the map only until the Coordinator forgets it.
 */
export const notRetired = <T extends { state: ShardState }>(shards: readonly T[]): T[] =>
  shards.filter((s) => s.state !== "retired");

export interface ShardEntry {
  /** The Durable Object name of the storage shard. */
  name: string;
  region: string;
  state: ShardState;
}

/** What the broker needs to route a send; published to KV by the Coordinator. */
export interface ShardMap {
  version: number;
  accountId: string;
  queueId: string;
  queueName: string;
  settings: QueueSettings;
  shards: ShardEntry[];
  publishedAt: number;
}

/**
 * What the Coordinator tells every storage shard before a map whose active shards changed
 * is used (docs/ordered-lanes.md): the epoch's number and its active shards, which decide
 * the owner of each ordering key.
 */
export interface Epoch {
  seq: number;
  active: string[];
}

/** How a shard learns what it is; sent by the Coordinator when it creates the shard. */
export interface ShardIdentity {
  name: string;
  queueId: string;
  accountId: string;
  region: string;
}

/** What a consumer shard needs from the Coordinator to deliver a queue's messages. */
export interface DeliveryPlan {
  /**
   * Names everything below but the backlogs: a consumer shard keeps its plan while the
   * Coordinator's wake-ups carry this same version (coordinator/coordinator.ts planVersion).
   */
  version: string;
  accountId: string;
  queueId: string;
  queueName: string;
  paused: boolean;
  retentionMs: number;
  consumer: ConsumerRecord | null;
  /** Shards that may hold messages, with the backlog of their latest heartbeat (null before one). */
  shards: Array<ShardEntry & { backlog: ShardBacklog | null }>;
}
