/** What the routes on queues and their consumers answer (./envelope-schemas.ts says why these are schemas). */
import { z } from "zod";
import { QUEUE_ID_PATTERN } from "../../src/kernel/ids";
import { jurisdictionSchema } from "../../src/kernel/settings";
import { count, described, isoTime, named } from "./schema-kit";

export const queueSettings = named(
  "QueueSettings",
  z.strictObject({ delivery_delay: count(), delivery_paused: z.boolean(), message_retention_period: count() }),
);

export const consumerSettings = named(
  "ConsumerSettings",
  z.strictObject({
    batch_size: count(),
    max_wait_time_ms: count(),
    max_retries: count(),
    retry_delay: count(),
    max_concurrency: described(count().nullable(), "null: consumer shards scale with the backlog, up to 250."),
    visibility_timeout_ms: count(),
    transport: z.enum(["queue", "rpc"]),
  }),
);

export const consumer = named(
  "Consumer",
  z.strictObject({
    consumer_id: z.string(),
    type: z.enum(["worker", "http_pull"]),
    script_name: z.string().nullable(),
    queue_name: z.string(),
    settings: consumerSettings,
    dead_letter_queue: z.string().nullable(),
    created_on: isoTime(),
    modified_on: isoTime(),
  }),
);

export const queueInfo = named(
  "Queue",
  z.strictObject({
    queue_id: z.string().regex(QUEUE_ID_PATTERN),
    queue_name: z.string(),
    created_on: isoTime(),
    modified_on: isoTime(),
    producers_total_count: count(),
    producers: z.array(z.strictObject({ type: z.literal("worker"), script: z.string() })),
    consumers_total_count: count(),
    consumers: z.array(
      consumer.extend({
        script: described(
          z.string().optional(),
          "A worker consumer's Worker (its script_name), under the name wrangler reads.",
        ),
      }),
    ),
    settings: queueSettings,
    jurisdiction: described(
      jurisdictionSchema.optional(),
      "Where the queue stores and processes its messages, chosen at creation; absent for a queue in no jurisdiction.",
    ),
  }),
);

export const queueList = z.array(queueInfo);

export const consumerList = z.array(consumer);

/** DELETE of a queue or a consumer. */
export const nullResult = z.null();
