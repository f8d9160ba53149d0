/**
 * A message's own calls over Durable Object RPC: appended to a storage shard, leased from it,
 * settled there, and what a consumer Worker reports of a batch it was given. HTTP exists only
 * at the edge (broker); everything behind it speaks these shapes. The rest of what crosses RPC
 * has a module each: the shard map and delivery plan (shard-map.ts), figures (figures.ts),
 * operators' calls (message-operations.ts), id claims (id-claims.ts), long-polling waits
 * (pull-waits.ts), heartbeats (heartbeat.ts), pushed batches (push-reply.ts).
 */
import type { ShardBacklog } from "./figures";

export type ContentType = "json" | "text" | "bytes" | "v8";
export const CONTENT_TYPES: readonly ContentType[] = ["json", "text", "bytes", "v8"];

/** A message the broker has validated, encoded and checksummed. */
export interface EncodedMessage {
  /**
   * Absent for a fresh message: the shard draws an id that says where it is stored
   * (storage-shard/segments/segment.ts). Given for an id the sender chose or a message keeps (an
   * idempotent send, a move), which the shard indexes.
   */
  id?: string;
  body: Uint8Array;
  contentType: ContentType;
  /** Delay before the message becomes visible, already resolved against the queue's delivery_delay. */
  delayMs: number;
  /** CRC-32 of body, computed by the broker. */
  checksum: number;
  /** Deliveries it already had; 0 or absent for a new message, and for a moved one (it starts again). */
  attempts?: number;
  /** Its ordering key: stored in its key's lane, not in a segment (docs/ordered-lanes.md). */
  orderingKey?: string;
  /**
   * When the message was first sent, for a message moved from another queue (dead-lettering,
   * a redrive): consumers see this as its timestamp, as Cloudflare keeps a dead-lettered
   * message's. Its age in this queue (retention, batch timeouts, redrive filters) still
   * counts from its arrival here.
   */
  sentAt?: number;
  /**
   * Set when this write moves a stored copy from another queue (dead-lettering, a
   * redrive): the source shard's name and the copy's LeasedMessage.copyKey. The target
   * stores each move once and never skips one it has not seen (storage-shard/segments/remembered-ids.ts).
   */
  moveKey?: string;
}

export interface AppendRequest {
  queueId: string;
  messages: EncodedMessage[];
  /**
   * A token the sender draws for this batch and sends again with a retry (`dedupe`): a
   * batch of fresh messages written again after a lost reply is found by it, and
   * answered with the ids of its first write.
   */
  batch?: string;
  /** Skip ids the shard stored moments ago: set on a retry after a lost reply. */
  dedupe?: boolean;
  /**
   * Ids the sender chose or kept (idempotent sends): the shard skips those it stored
   * within a day, consumed or not, and remembers these. Messages with a moveKey are
   * never skipped by id, only by their move.
   */
  remember?: boolean;
  /** The sender's region, when it is not the shard's own: sends from a region without a shard of its own (docs/cost.md, "Regions"). */
  origin?: string;
}

/**
 * Why a storage shard refused a send without storing anything. Every refusal means
 * "nothing of this batch was written", so the broker may safely try another shard.
 */
export type ShardRefusal =
  "draining" | "retired" | "unknown_shard" | "wrong_queue" | "corrupt" | "overloaded" | "not_owner";

export type AppendResult =
  | {
      ok: true;
      stored: number;
      duplicates: number;
      backlog: ShardBacklog;
      /** Every message's id, in the request's order. */
      ids: string[];
      /** The queue's other shards' figures as this shard last heard them from its Coordinator (src/routing/queue-figures.ts). */
      peers?: ShardBacklog[];
    }
  | { ok: false; refused: ShardRefusal; detail?: string };

/** Ask a storage shard for a batch (QuiCK: a lease moves visible_at forward; nothing is removed). */
export interface LeaseRequest {
  queueId: string;
  limit: number;
  leaseMs: number;
  /** Lease fewer than `limit` only once the oldest ready message has waited this long (0: never wait). */
  maxWaitMs: number;
  /** The queue's message_retention_period, in ms: older messages are deleted, not delivered. */
  retentionMs: number;
  /**
   * A long-polling pull that waits until then if it finds nothing: the shard wakes the
   * Coordinator when a message becomes ready before that (consumer-wakeups.ts).
   */
  watchUntil?: number;
  /**
   * The consumer shard leasing (its index): the storage shard wakes it directly when new
   * messages arrive after it found the shard empty (storage-shard/consumer-wakeups.ts). Absent for pulls.
   */
  consumerShard?: number;
  /**
   * With consumerShard: whether the storage shard may push that consumer shard its next batch
   * (storage-shard/batch-push.ts) rather than wake it for its round; absent means yes.
   */
  pushes?: boolean;
}

export interface LeasedMessage {
  id: string;
  body: Uint8Array;
  contentType: ContentType;
  enqueuedAt: number;
  /** Deliveries so far, this one included: 1 on first delivery. */
  attempts: number;
  leaseId: string;
  /** Names this stored copy within its shard for ever (storage-shard/schema.ts copyKey): what a move of it is remembered by. */
  copyKey: string;
  /** Its ordering key, when it was sent with one (docs/ordered-lanes.md). */
  orderingKey?: string;
}

export interface LeaseResult {
  messages: LeasedMessage[];
  /** Set when a batch is waiting to fill: lease again then. */
  waitUntil: number | null;
  /**
   * With waitUntil: how many messages are ready here now (fewer than the limit). A consumer
   * shard adds these up over the queue's shards to gather one batch from several of them.
   */
  ready?: number;
  /** True when the batch was full: more may be ready. */
  more: boolean;
  /** Earliest visible_at of anything not ready now (delayed, retried or leased), or null. */
  nextVisibleAt: number | null;
  /** This shard's backlog after the lease (leased messages included: they are not acked yet). */
  backlog: ShardBacklog;
  /** The queue's other shards' figures as this shard last heard them (as AppendResult's). */
  peers?: ShardBacklog[];
  /** The shard is not (or no longer) one of the queue's: retired, or unknown. A consumer shard's plan is out of date. */
  refused?: boolean;
}

/** A message named by the lease it was handed out under: acts on it only while that lease is current. */
export interface LeaseRef {
  id: string;
  leaseId: string;
}

/** The ref that settles a leased message: what every ack, retry and move names it by. */
export const leaseRefOf = (m: { id: string; leaseId: string }): LeaseRef => ({ id: m.id, leaseId: m.leaseId });

export interface SettleRequest {
  queueId: string;
  acks: LeaseRef[];
  retries: Array<LeaseRef & { delayMs: number }>;
  /** Already written to the dead-letter queue: delete and count. */
  deadLettered: LeaseRef[];
  /** Out of retries with no dead-letter queue: delete and count. */
  dropped: LeaseRef[];
  /** The acks are a redrive's, its messages written elsewhere: the moves that brought them are forgotten (remembered-ids.ts). */
  moved?: true;
  /**
   * Wake consumers at once for the lanes this frees, instead of a moment later: no consumer
   * that settled a batch is about to lease again (an operator's release).
   */
  wakeAtOnce?: true;
  /**
   * Nobody waits on these acks (a push consumer's round): the shard may settle them in
   * memory at once and write them with the next write of their segment, within a bound.
   * A reset before that delivers them again (docs/guarantees.md). Retries, dead-letters
   * and drops are written at once all the same.
   */
  deferrable?: boolean;
  /**
   * The consumer shard settling (its index) and its batch (size, max_wait_time_ms): the answer
   * then says whether anything is left to lease (SettleResult.after), so the consumer shard
   * need not lease to find out, and a shard left empty wakes it, as after an empty lease.
   */
  consumer?: {
    shard: number;
    limit: number;
    maxWaitMs: number;
    /** Present when the storage shard may push it its next batch. */ leaseMs?: number;
  };
}

export interface SettleResult {
  acked: number;
  retried: number;
  deadLettered: number;
  dropped: number;
  /** Ids whose lease had been taken over (or that were gone): nothing was done to them. */
  stale: string[];
  /**
   * With SettleRequest.consumer: whether a message is ready here now, and if not, when one
   * next becomes ready (a delay, a retry delay, a lease running out), as an empty lease says.
   */
  after?: { ready: boolean; nextVisibleAt: number | null };
}

/** What a dispatch reports: the shape of Fetcher.queue()'s result. */
export interface DispatchOutcome {
  outcome: string;
  ackAll: boolean;
  retryBatch: { retry: boolean; delaySeconds?: number };
  explicitAcks: string[];
  retryMessages: Array<{ msgId: string; delaySeconds?: number }>;
}
