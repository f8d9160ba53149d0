/**
 * A queue as the REST API describes it (Cloudflare's field names), from the Coordinator's
 * queue row and consumers, and the record of its last purge that Cloudflare's purge status reads.
 */
import type { ConsumerRecord } from "../src/kernel/consumer-settings";
import { jurisdictionField } from "../src/kernel/jurisdiction";
import type { QueueInfo } from "../src/kernel/queue-info";
import type { QueueRecord } from "./queue-store";

export function describeQueue(queue: QueueRecord, consumers: ConsumerRecord[]): QueueInfo {
  return {
    queue_id: queue.queue_id,
    queue_name: queue.queue_name,
    created_on: new Date(queue.created_at).toISOString(),
    modified_on: new Date(queue.modified_at).toISOString(),
    producers_total_count: 0,
    producers: [],
    consumers_total_count: consumers.length,
    // Whole, as Cloudflare lists them (wrangler's `queues consumer list` shows their settings),
    // and with `script`, the Worker's name as wrangler reads it.
    consumers: consumers.map((c) => ({ ...c, ...(c.script_name ? { script: c.script_name } : {}) })),
    settings: queue.settings,
    ...jurisdictionField(queue.queue_id),
  };
}

/** The last purge of the queue: when it started, and whether it emptied the queue (false while it runs). */
export interface PurgeRecord {
  startedAt: number;
  completed: boolean;
}

/** The key it is kept under (ctx.storage, beside the SQL tables; deleted with the queue). */
export const LAST_PURGE = "last_purge";
