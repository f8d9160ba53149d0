/**
 * Claims on message ids that a send makes before it stores: an idempotency key's at
 * IdempotencyKeys, and a producer's own id asked of the storage shard whose place it names.
 * Split from protocol.ts, which holds a message's own calls.
 */
import type { ContentType } from "./protocol";

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
