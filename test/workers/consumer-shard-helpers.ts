/**
 * The consumer shard's suites (consumer-plan, consumer-rounds and consumer-pushed-batches.test.ts):
 * a queue whose sends land on one storage shard, with a stand-in handler that acks.
 */
import { env, runInDurableObject } from "cloudflare:test";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import { consumerShardFor, coordinatorFor } from "../../src/kernel/addressing";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { addConsumer, createQueue, fakeConsumer } from "./helpers";

/**
 * A queue that takes sends on one storage shard, with a stand-in handler that acks. The others
 * are retired at once (they are empty): left draining, the Coordinator's loop would retire them
 * later, in the middle of a test, and each such map change is one more plan fetch and round.
 */
export async function oneShardQueue(name: string, settings: Record<string, unknown>) {
  const q = await createQueue(name);
  const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
  for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "retired");
  const deliveries = await fakeConsumer(q.queue_id, () => {});
  const consumer = await addConsumer(name, { settings });
  const shard = consumerShardFor(env, q.queue_id, 0);
  const fetches = () => runInDurableObject(shard, (obj: ConsumerShard) => obj.planFetches);
  const delivered = () => deliveries.reduce((n, d) => n + d.ids.length, 0);
  return { q, consumer, shard, deliveries, fetches, delivered, active: map.shards[0]!.name };
}

/** A storage shard that wakes its consumer shard for its own round instead of pushing batches to it: the tests of rounds. */
export async function noPushes(...names: string[]) {
  for (const name of names)
    await runInDurableObject(env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name)), (obj: StorageShard) => {
      obj.pushBatches = false;
    });
}

export async function storageShardStats(name: string) {
  return env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name)).stats();
}
