// An alarm handler that throws is retried by the platform 6 times (2 s apart, doubling)
// and then dropped. The fault run's throw-alarm fault (test/faults) found that after 7
// throws in a row a storage shard stopped reporting and a Coordinator's control loop
// stopped for good. Each alarm now catches what fails, re-arms itself and returns: these
// make one fail and check that nothing is thrown and the next alarm is set.
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { consumerShardFor, coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { BACKSTOP_MS } from "../../consumer-shard/round-schedule";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import type { Coordinator } from "../../coordinator/coordinator";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { api, createQueue, queuePath } from "./helpers";

const boom = () => {
  throw new Error("boom: the alarm's work failed");
};

describe("an alarm whose work fails", () => {
  it("keeps a storage shard reporting: nothing thrown, the next heartbeat armed", async () => {
    const q = await createQueue("alarm-fails-storage");
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    const shard = storageShardFor(env, map.shards[0]!.name);
    await runInDurableObject(shard, async (obj: StorageShard, state) => {
      (obj as unknown as { report: () => Promise<boolean> }).report = async () => boom();
      await state.storage.deleteAlarm();
    });
    expect(await runDurableObjectAlarm(shard)).toBe(false); // no alarm was set
    await runInDurableObject(shard, (_obj: StorageShard, state) => state.storage.setAlarm(Date.now() + 60_000));
    expect(await runDurableObjectAlarm(shard)).toBe(true); // ran, and did not throw
    const next = await runInDurableObject(shard, (_obj: StorageShard, state) => state.storage.getAlarm());
    expect(next).not.toBeNull();
  });

  it("keeps a Coordinator's control loop ticking", async () => {
    const q = await createQueue("alarm-fails-coordinator");
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
    await runInDurableObject(coordinator, async (obj: Coordinator, state) => {
      (obj as unknown as { loop: { autoscale: () => Promise<void> } }).loop.autoscale = async () => boom();
      await state.storage.setAlarm(Date.now() + 60_000);
    });
    expect(await runDurableObjectAlarm(coordinator)).toBe(true);
    const next = await runInDurableObject(coordinator, (_obj: Coordinator, state) => state.storage.getAlarm());
    expect(next).not.toBeNull();
    // The queue still answers.
    expect((await api("GET", queuePath("alarm-fails-coordinator"))).status).toBe(200);
  });

  it("has a consumer shard try its round again 2 s later and report the error", async () => {
    const q = await createQueue("alarm-fails-consumer");
    const shard = consumerShardFor(env, q.queue_id, 0);
    const timers: number[] = [];
    await runInDurableObject(shard, (obj: ConsumerShard) => {
      obj.deliverRound = async () => boom();
      // The round again in 2 s waits on a timer (round-schedule.ts), recorded here, not run.
      obj.timers = { set: (_fn, ms) => timers.push(ms), clear: () => {} };
    });
    // As wake() leaves it, with the round on the alarm.
    await runInDurableObject(shard, async (_obj: ConsumerShard, state) => {
      await state.storage.put({ queueId: q.queue_id, index: 0 });
      await state.storage.setAlarm(Date.now());
    });
    const before = Date.now();
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(timers.at(-1)).toBeGreaterThan(1000);
    expect(timers.at(-1)).toBeLessThanOrEqual(2000);
    // Behind the timer, the backstop alarm: a lost timer delays the round, never loses it.
    const next = await runInDurableObject(shard, (_obj: ConsumerShard, state) => state.storage.getAlarm());
    expect(next).toBeGreaterThanOrEqual(before + 2000 + BACKSTOP_MS);
    expect(next).toBeLessThan(Date.now() + 2000 + BACKSTOP_MS + 1000);
    const reports = await coordinatorFor(env, q.queue_id).consumerShards();
    expect(reports.shards.find((s) => s.index === 0)).toMatchObject({ errors: 1 });
  });
});
