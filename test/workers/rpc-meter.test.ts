/**
 * How the objects count the RPCs they serve (src/kernel/rpc-meter.ts): a call from outside is one,
 * whatever the method calls inside its object, and what the runtime or the object itself calls is
 * none. Through workerd as the workers pool runs it: RPC, alarms, runInDurableObject (a fetch to
 * the object) and instanceof on what the constructor returned.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { Coordinator } from "../../coordinator/coordinator";
import { coordinatorFor, consumerShardFor } from "../../src/kernel/addressing";
import { crc32 } from "../../src/kernel/checksum";
import type { StorageHeartbeat } from "../../src/kernel/heartbeat";
import { meteredRpcs } from "../../src/kernel/rpc-meter";
import { newMeter, requestsCounted } from "../../src/kernel/sql-meter";
import type { BatchPushDeps } from "../../storage-shard/batch-push";
import { StorageShard } from "../../storage-shard/storage-shard";
import { createQueue } from "./helpers";

class Calls {
  readonly fromField = () => this.inner();
  outer(): number {
    return this.inner() + this.inner();
  }
  inner(): number {
    return 1;
  }
  async afterAwait(): Promise<number> {
    await null;
    return this.outer();
  }
  get twice(): number {
    return this.inner() * 2;
  }
  figures(): number {
    return this.outer();
  }
  alarm(): void {
    this.outer();
  }
  fetch(): Response {
    return new Response(String(this.outer()));
  }
}

describe("meteredRpcs", () => {
  it("counts each call from outside once, and none of the calls the object makes itself", async () => {
    const meter = newMeter();
    const object = new Calls();
    const metered = meteredRpcs(object, meter, ["figures"]);
    const isolate = requestsCounted();
    expect(metered.outer()).toBe(2);
    expect(meter.rpcs).toBe(1);
    expect(await metered.afterAwait()).toBe(2);
    expect(meter.rpcs).toBe(2);
    // A field's closure, a getter, a method named uncounted and the runtime's handlers: none.
    expect(metered.fromField()).toBe(1);
    expect(metered.twice).toBe(2);
    expect(metered.figures()).toBe(2);
    metered.alarm();
    expect(await metered.fetch().text()).toBe("2");
    expect(meter.rpcs).toBe(2);
    expect(requestsCounted() - isolate).toBe(2);
  });

  it("is the object to whoever holds it: its class, its fields, Object.prototype's methods", () => {
    const object = new Calls();
    const metered = meteredRpcs(object, newMeter(), []);
    expect(metered).toBeInstanceOf(Calls);
    expect(metered.constructor).toBe(Calls);
    expect(metered.fromField).toBe(object.fromField);
    expect(metered.outer).toBe(metered.outer);
    // What workerd refuses over RPC, by identity with Object.prototype's.
    expect(metered.toString).toBe(Object.prototype.toString);
    (metered as unknown as { extra: number }).extra = 5;
    expect(Object.hasOwn(object, "extra")).toBe(true);
  });
});

const utf8 = new TextEncoder();

describe("the objects' RPCs through workerd", () => {
  it("a Coordinator RPC that calls its other RPC methods is one request, and its alarm none", async () => {
    const q = await createQueue("rpc-meter-coordinator");
    const coordinator = coordinatorFor(env, q.queue_id);
    const shard = (await coordinator.shardMap())!.shards[0]!.name;
    const beat: StorageHeartbeat = {
      shard,
      state: "active",
      backlogCount: 0,
      backlogBytes: 0,
      oldestEnqueuedAt: null,
      messagesIn: 0,
      messagesOut: 0,
      refusals: 0,
      leasedNow: 0,
      periodMs: 5000,
      sentAt: Date.now(),
      totals: {
        stored: 0,
        leased: 0,
        acked: 0,
        retried: 0,
        deadLettered: 0,
        dropped: 0,
        expired: 0,
        quarantined: 0,
        purged: 0,
        cancelled: 0,
      },
      cost: { rpcs: 0, rowsWritten: 0 },
    };
    const before = await coordinator.costFigures();
    // heartbeat() reads consumers() and backlogByShard(), which reads heartbeats(); info() reads consumers().
    expect((await coordinator.heartbeat(beat)).known).toBe(true);
    await coordinator.info();
    const after = await coordinator.costFigures();
    expect(after.rpcs - before.rpcs).toBe(2);
    // The control loop reads heartbeats() and consumerShards() on its tick: an alarm, no RPC.
    expect(await runDurableObjectAlarm(coordinator)).toBe(true);
    const ticked = await coordinator.costFigures();
    expect(ticked.alarms - after.alarms).toBe(1);
    expect(ticked.rpcs).toBe(after.rpcs);
  });

  it("runInDurableObject holds the Coordinator itself: its class, fields set through it, its calls counted as RPCs", async () => {
    const q = await createQueue("rpc-meter-run-in");
    const coordinator = coordinatorFor(env, q.queue_id);
    const before = await coordinator.costFigures();
    await runInDurableObject(coordinator, async (instance: Coordinator) => {
      expect(instance).toBeInstanceOf(Coordinator);
      const clock = { now: () => 1234 };
      instance.clock = clock;
      expect(instance.clock).toBe(clock);
      expect(instance.info()?.queue_id).toBe(q.queue_id);
      instance.costFigures();
      await instance.testHook().catch(() => undefined);
    });
    const after = await coordinator.costFigures();
    expect(after.rpcs - before.rpcs).toBe(1);
  });

  it("a storage shard's pushed batch leases and settles through its RPC methods without counting requests", async () => {
    const name = "rpc-meter-push";
    const queueId = "r".padEnd(32, "0");
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name));
    await shard.activate({ name, queueId, accountId: "local", region: "local" });
    const body = utf8.encode("pushed");
    await shard.append({ queueId, messages: [{ body, contentType: "text", delayMs: 0, checksum: crc32(body) }] });
    const before = (await shard.stats()).cost.rpcs;
    await runInDurableObject(shard, (instance: StorageShard) => {
      expect(instance).toBeInstanceOf(StorageShard);
      // The parts BatchPush is given (storage-shard.ts): lease() and settle() called by the shard itself.
      const deps = (instance.pushes as unknown as { deps: BatchPushDeps }).deps;
      const target = { shard: 0, limit: 10, maxWaitMs: 0, leaseMs: 30_000 };
      const leased = deps.lease(target);
      expect(leased.messages).toHaveLength(1);
      deps.settle(
        target,
        {
          acks: leased.messages.map((m) => ({ id: m.id, leaseId: m.leaseId })),
          retries: [],
          deadLettered: [],
          dropped: [],
        },
        false,
      );
    });
    const stats = await shard.stats();
    expect(stats.backlogCount).toBe(0);
    // The second stats() itself.
    expect(stats.cost.rpcs - before).toBe(1);
  });

  it("a consumer shard counts its wake-ups, not the rounds a test drives or the read of its figures", async () => {
    const consumer = consumerShardFor(env, "s".padEnd(32, "0"), 0);
    const before = (await consumer.costFigures()).rpcs;
    // A queue with no Coordinator: the round asks it for the plan (an RPC there), finds none and ends.
    await runInDurableObject(consumer, async (instance) => {
      expect(await instance.deliverRound("s".padEnd(32, "0"))).toBeNull();
      await instance.wake("s".padEnd(32, "0"), 0);
    });
    // wake() called through runInDurableObject, from outside: one.
    expect((await consumer.costFigures()).rpcs).toBe(before + 1);
  });
});
