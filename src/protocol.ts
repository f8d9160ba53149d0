/**
 * The typed messages the parts exchange over Durable Object RPC. HTTP exists only
 * at the edge (broker); everything behind it speaks these shapes.
 */
import type { QueueSettings } from "./settings";

export type ContentType = "json" | "text" | "bytes" | "v8";
export const CONTENT_TYPES: readonly ContentType[] = ["json", "text", "bytes", "v8"];

/** active: takes sends. draining: takes no sends, still serves reads. retired: gone. */
export type ShardState = "active" | "draining" | "retired";

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

/** A message the broker has validated, encoded and checksummed. */
export interface EncodedMessage {
  id: string;
  body: Uint8Array;
  contentType: ContentType;
  /** Delay before the message becomes visible, already resolved against the queue's delivery_delay. */
  delayMs: number;
  /** CRC-32 of body, computed by the broker. */
  checksum: number;
}

export interface AppendRequest {
  queueId: string;
  messages: EncodedMessage[];
}

/**
 * Why a storage shard refused a send without storing anything. Every refusal means
 * "nothing of this batch was written", so the broker may safely try another shard.
 */
export type ShardRefusal = "draining" | "retired" | "unknown_shard" | "wrong_queue" | "corrupt";

export type AppendResult =
  | { ok: true; stored: number; duplicates: number }
  | { ok: false; refused: ShardRefusal; detail?: string };

/** Exact per-shard figures, kept in the same transaction as the rows they count. */
export interface ShardStats {
  backlogCount: number;
  backlogBytes: number;
  /** enqueued-at of the oldest message still stored, or null when empty. */
  oldestEnqueuedAt: number | null;
}

/** How a shard learns what it is; sent by the Coordinator when it creates the shard. */
export interface ShardIdentity {
  name: string;
  queueId: string;
  accountId: string;
  region: string;
}

/** A stored message read back (peek): body checked against its checksum. */
export interface StoredMessage {
  id: string;
  body: Uint8Array;
  contentType: ContentType;
  size: number;
  enqueuedAt: number;
  visibleAt: number;
  attempts: number;
}

export interface PeekResult {
  messages: StoredMessage[];
  /** Ids whose stored body no longer matches its checksum; never returned as messages. */
  corrupt: string[];
}

/**
 * What a storage shard reports to its Coordinator every HEARTBEAT_INTERVAL_MS while
 * it is taking messages, and once more when it goes idle.
 */
export interface StorageHeartbeat extends ShardStats {
  shard: string;
  /** Messages stored since the previous heartbeat. */
  messagesIn: number;
  /** Milliseconds those messages were counted over. */
  periodMs: number;
  sentAt: number;
}
