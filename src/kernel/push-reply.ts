/**
 * What crosses RPC for a pushed batch (storage-shard/batch-push.ts): one of the modules
 * beside protocol.ts that each hold one conversation of what crosses RPC between the parts.
 */
import type { SettleRequest } from "./protocol";

/**
 * A consumer shard's answer to a batch a storage shard pushed to it (storage-shard/batch-push.ts):
 * the outcome to settle there (dead-letter writes already done), or not taken (busy, paused,
 * no Worker bound): the leases are given back.
 */
export type PushReply =
  | {
      taken: true;
      settle: Omit<SettleRequest, "queueId" | "consumer">;
      /** False: the consumer shard's rounds should take the next batches (consumer-shard/push-choice.ts); absent means push on. */
      pushes?: boolean;
      /** The consumer's batch settings now: the next batches are pushed by them (a settings change reaches the storage shard here). */
      batch?: { limit: number; maxWaitMs: number };
    }
  | { taken: false };
