import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env";

/**
 * A consumer shard of one queue. Declared now so its SQLite class and migration
 * exist from the first deployment; it gains its delivery loop (lease a batch from a
 * storage shard, dispatch it to the consumer, apply the outcome) with the delivery
 * work. Until then nothing creates or calls one.
 */
export class ConsumerShard extends DurableObject<Env> {}
