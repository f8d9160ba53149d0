/**
 * Cloudflare Queues' documented limits (https://developers.cloudflare.com/queues/platform/limits/).
 * 1 KB = 1000 bytes, as Cloudflare counts.
 */
export const LIMITS = {
  maxMessageBytes: 128_000,
  maxBatchMessages: 100,
  maxBatchBytes: 256_000,
  maxDelaySeconds: 86_400,
  minRetentionSeconds: 60,
  maxRetentionSeconds: 1_209_600,
  defaultRetentionSeconds: 345_600,
  maxQueueNameLength: 63,
  /**
   * Largest HTTP request body we read. A full batch of JSON bodies escaped as JSON
   * strings can exceed 256 KB on the wire; anything past this is refused before parsing.
   */
  maxRequestBytes: 1_048_576,
} as const;

/**
 * Rows one purge call deletes at most. A single DELETE over a large backlog would hold
 * the object (and its output gate) for as long as it runs; bounded calls let sends,
 * leases and heartbeats in between.
 */
export const PURGE_PER_CALL = 5000;
/** A redrive batch: the most a filtered lease takes at once. */
export const MAX_MATCHING_LEASE = 100;
/** The longest a pull waits for messages (`wait_time_ms`), as SQS's long polling: 20 s. */
export const MAX_PULL_WAIT_MS = 20_000;
/**
 * Long-polling pulls waiting at once on one queue, and per token on one queue. shardq/client's
 * loop keeps one pull open per consumer process, so a token reaches its cap only with more
 * consumer processes than Cloudflare lets a queue push to at once (max_concurrency, 250),
 * and the queue only with four such fleets.
 */
export const MAX_WAITING_PULLS_PER_QUEUE = 1000;
export const MAX_WAITING_PULLS_PER_TOKEN = 250;
