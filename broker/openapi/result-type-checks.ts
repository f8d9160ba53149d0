/**
 * The compiler holds the result schemas to the types the handlers build their answers from,
 * where such types exist: a field added to QueueInfo without a word in its schema fails
 * `npm run typecheck`. Nothing imports this module; the typecheck reads it.
 */
import type { z } from "zod";
import type { ConsumerRecord } from "../../src/kernel/consumer-settings";
import type { QueueInfo, QueueMetrics } from "../../src/kernel/queue-info";
import type { queueMetrics } from "./figure-results";
import type { consumer, queueInfo } from "./queue-results";

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
export type ResultSchemasMatchTypes = [
  Expect<Same<z.infer<typeof queueInfo>, QueueInfo>>,
  Expect<Same<z.infer<typeof consumer>, ConsumerRecord>>,
  Expect<Same<Omit<z.infer<typeof queueMetrics>, "shards">, Omit<QueueMetrics, "shards">>>,
];
type Expect<T extends true> = T;
