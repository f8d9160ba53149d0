/**
 * Cloudflare Queues' documented limits (shared/reference/cloudflare-queues-api.md).
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
