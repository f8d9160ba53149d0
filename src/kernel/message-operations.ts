/**
 * What an operator's calls on stored messages ask a storage shard and get back: a lookup by
 * id, a purge's steps, a redrive's filter, the ordering keys held back. Split from
 * protocol.ts, which holds a message's own calls.
 */
import type { HoldReason } from "./figures";
import type { ContentType } from "./protocol";

/** A key held back on a shard, as operators see it (GET .../ordering/held): `blocker` is its head, or for a hand-off the shard it waits on. */
export interface HeldKey {
  key: string;
  reason: HoldReason;
  blocker: string | null;
  since: number;
  messages: number;
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
