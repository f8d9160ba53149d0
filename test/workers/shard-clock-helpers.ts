import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { expect } from "vitest";
import { ManualClock } from "../../src/kernel/clock";
import { coordinatorFor } from "../../src/kernel/addressing";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { createQueue } from "./helpers";

/**
 * A new queue `name` whose traffic all goes to its first storage shard (the others draining),
 * that shard on a manual clock at `start`. `start` far ahead of real time keeps the alarms the
 * shard sets for fake times in the real future: they wait for runDurableObjectAlarm.
 */
export async function onlyShard(name: string, start: number, settings?: Record<string, unknown>) {
  const q = await createQueue(name, settings);
  const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
  for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
  const shardName = map.shards[0]!.name;
  const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(shardName));
  const clock = new ManualClock(start);
  await runInDurableObject(shard, (obj: StorageShard) => {
    obj.clock = clock;
  });
  // The first report closes the period that began on the real clock.
  expect(await runDurableObjectAlarm(shard)).toBe(true);
  const alarm = () => runInDurableObject(shard, async (_obj: StorageShard, state) => state.storage.getAlarm());
  return { q, shard, shardName, clock, alarm };
}
