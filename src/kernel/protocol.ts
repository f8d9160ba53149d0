/**
 * The typed messages the parts exchange over Durable Object RPC. HTTP exists only
 * at the edge (broker); everything behind it speaks these shapes.
 */
import type { ConsumerRecord } from "./consumer-settings";
import type { QueueSettings } from "./settings";

export type ContentType = "json" | "text" | "bytes" | "v8";
export const CONTENT_TYPES: readonly ContentType[] = ["json", "text", "bytes", "v8"];

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

/**
 * What the Coordinator tells every storage shard before a map whose active shards changed
 * is used (docs/ordered-lanes.md): the epoch's number and its active shards, which decide
 * the owner of each ordering key.
 */
export interface Epoch {
  seq: number;
  active: string[];
}

/**
 * One storage shard's backlog: exact as the shard answers a call, or as its latest
 * heartbeat reported it. What the queue-wide figures of send, pull and MessageBatch
 * answers are summed from (src/routing/queue-figures.ts).
 */
export interface ShardBacklog {
  shard: string;
  count: number;
  bytes: number;
  /** When its oldest message arrived, or null when it is empty or this is not known. */
  oldestAt: number | null;
  /**
   * When these figures were last known true (a shard's own figures: when it answered; a
   * heartbeat's: when it came, or when it was asked for a sleeping shard, whose figures stay
   * true). Absent from answers older than it. Whoever gathers figures keeps the freshest.
   */
  at?: number;
}

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

/**
 * A Durable Object's billable work since it last started: requests (RPC calls served and
 * alarms run) and SQLite rows written and read (index entries included), as Cloudflare
 * counts them. Heartbeats stored before rowsRead and alarms existed lack them.
 */
export interface CostFigures {
  rpcs: number;
  rowsWritten: number;
  rowsRead?: number;
  alarms?: number;
}

/** Exact per-shard figures, kept in the same transaction as the rows they count. */
export interface ShardStats {
  backlogCount: number;
  backlogBytes: number;
  /** enqueued-at of the oldest message still stored, or null when empty. */
  oldestEnqueuedAt: number | null;
  /** Running totals since the shard was created. */
  totals: DeliveryTotals;
  /** Since this object last started: what Cloudflare bills a Durable Object for (sql-meter.ts). */
  cost: CostFigures;
  /** Ordered lanes here (docs/ordered-lanes.md): how many, how many held back by reason, and since when the longest. */
  ordering?: LaneFigures;
}

export interface LaneFigures {
  lanes: number;
  held: Record<HoldReason, number>;
  oldestHeldSince: number | null;
}

/** Why an ordering key is held back: a batch in flight, a retry or a delay not due, a hand-off from another shard. */
export type HoldReason = "leased" | "retry" | "delayed" | "handoff";

/** A key held back on a shard, as operators see it (GET .../ordering/held): `blocker` is its head, or for a hand-off the shard it waits on. */
export interface HeldKey {
  key: string;
  reason: HoldReason;
  blocker: string | null;
  since: number;
  messages: number;
}

export interface DeliveryTotals {
  /**
   * Messages stored (sends, and moves in: dead-letter moves, redrives; deduplicated
   * retries not counted). Optional only because heartbeats a Coordinator stored before
   * this counter existed lack it; stats() always sets it.
   */
  stored?: number;
  leased: number;
  acked: number;
  retried: number;
  deadLettered: number;
  dropped: number;
  expired: number;
  quarantined: number;
  /**
   * Deleted by a purge, and cancelled one by one. Optional only because heartbeats a
   * Coordinator stored before these counters existed lack them; stats() always sets them.
   */
  purged: number;
  cancelled: number;
}

/** How a shard learns what it is; sent by the Coordinator when it creates the shard. */
export interface ShardIdentity {
  name: string;
  queueId: string;
  accountId: string;
  region: string;
}

/** Ask a storage shard for a batch (QuiCK: a lease moves visible_at forward; nothing is removed). */
/**
 * How a long-polling pull's wait at its Coordinator ended: woken by messages, its time
 * up (or cancelled), delivery paused under it, or refused before it waited because the
 * queue's or the token's waiting pulls are at their cap (coordinator/pull-waiters.ts).
 */
export type PullWaitAnswer = "woken" | "ended" | "paused" | { capped: WaitCap; limit: number };

/** The cap of waiting pulls a pull went over: the queue's, or its token's on the queue. */
export type WaitCap = "queue" | "token";

/** What a cancel found: the pull waiting or just woken (cancelled), or why not. */
export type PullCancelAnswer = { cancelled: true } | { cancelled: false; reason: "answered" | "not_waiting" };

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

/** Where a stored message stands: ready to lease, not visible yet (a delay or a retry's delay), or held under a live lease. */
export type MessageState = "ready" | "delayed" | "leased";

/** One stored message as a lookup by id sees it, without its body. */
export interface MessageStatus {
  id: string;
  state: MessageState;
  attempts: number;
  enqueuedAt: number;
  visibleAt: number;
  size: number;
  contentType: ContentType;
}

/** One bounded step of a purge: `more` while the shard still holds messages. */
export interface PurgeResult {
  deleted: number;
  more: boolean;
  /** The ids of the messages deleted, when asked for. */
  ids?: string[];
}

/** Which messages a redrive moves: by age (from enqueued-at, on the shard's clock) and by deliveries so far. Absent bounds are open. */
export interface MessageFilter {
  minAgeMs?: number;
  maxAgeMs?: number;
  minAttempts?: number;
  maxAttempts?: number;
}

// What crosses RPC between the parts besides the calls above (heartbeats: heartbeat.ts): the queue's counters, send latency counts, idempotency claims, and
// what a consumer Worker reports of a batch.

export type CounterName = keyof DeliveryTotals;
export const COUNTER_NAMES: readonly CounterName[] = [
  "stored",
  "leased",
  "acked",
  "retried",
  "deadLettered",
  "dropped",
  "expired",
  "quarantined",
  "purged",
  "cancelled",
];
export type QueueCounters = Record<CounterName, number>;

/** Sends counted by latency. Crosses DO RPC from the broker to the Coordinator. */
export interface SendLatencyCounts {
  /** Sends per bucket, NOT cumulative, by the bucket's upper bound in seconds as an `le` label: "0.005", "1", "+Inf". */
  buckets: Record<string, number>;
  sumSeconds: number;
  count: number;
}

/** One key a send wants: its request digest, and the message ids it would store under. */
export interface KeyClaim {
  key: string;
  digest: string;
  ids: string[];
  /**
   * An Idempotency-Key's claim: the tag its drawn ids carry (src/kernel/ids.ts keyDrawnId)
   * and each message's digest, so that one of those ids sent later as a producer's own is
   * recognised. A producer id's claim: the tag a key send that drew this id would have.
   */
  tag?: string;
  /** An Idempotency-Key's claim: each message's digest, in the order of `ids`. */
  digests?: string[];
}

/**
 * A storage shard's answer about a producer's id that names one of its own places (a
 * located id): null when it never drew this id; else whether the message it drew is
 * this one (same content type and body bytes), or another, or one whose every trace
 * is gone (consumed), which is taken all the same.
 */
export type DrawnIdAnswer = null | "same" | "other";

/** A producer's id asked about, with what the producer sends under it. */
export interface DrawnIdProbe {
  id: string;
  contentType: ContentType;
  body: Uint8Array;
  orderingKey?: string;
}

export type ClaimOutcome =
  /** Store under `ids`. `retry`: an earlier attempt may have stored them already (send with dedupe). */
  | { status: "claimed"; ids: string[]; retry: boolean }
  /** Stored by an earlier request: answer with its ids, store nothing. */
  | { status: "done"; ids: string[] }
  /** Another request holds the key right now. */
  | { status: "busy"; retryAfterMs: number }
  /** The key was used with a different request. */
  | { status: "mismatch" };

/** What a dispatch reports: the shape of Fetcher.queue()'s result. */
export interface DispatchOutcome {
  outcome: string;
  ackAll: boolean;
  retryBatch: { retry: boolean; delaySeconds?: number };
  explicitAcks: string[];
  retryMessages: Array<{ msgId: string; delaySeconds?: number }>;
}
