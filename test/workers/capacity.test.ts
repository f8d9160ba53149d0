import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import { saveMemory } from "../../coordinator/decisions";
import { coordinatorFor } from "../../src/kernel/addressing";
import { TokenBucket } from "../../storage-shard/capacity";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { forgetShardMap } from "../../src/routing/shard-map-cache";
import { storeMessages } from "../../src/routing/store";
import { crc32 } from "../../src/kernel/checksum";
import { api, backlog, createQueue, producer, queuePath, storedMessages } from "./helpers";

/** Puts every storage shard of a queue under a per-second capacity, as SHARD_CAPACITY_PER_SECOND would. */
async function limitShards(queueId: string, perSecond: number) {
  const map = (await coordinatorFor(env, queueId).shardMap())!;
  const shards = map.shards.map((s) => env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(s.name)));
  for (const shard of shards) {
    await runInDurableObject(shard, (obj: StorageShard) => {
      obj.capacity = new TokenBucket(perSecond, Date.now());
    });
  }
  return shards;
}

describe("per-shard capacity", () => {
  it("refills at its rate, holds one second's worth, and lets a batch through while it holds a token, leaving a debt", () => {
    const bucket = new TokenBucket(10, 0);
    for (let i = 0; i < 10; i++) expect(bucket.take(1, 0)).toBe(true);
    expect(bucket.take(1, 0)).toBe(false);
    expect(bucket.take(1, 100)).toBe(true); // 0.1 s later: one more
    expect(bucket.take(1, 100)).toBe(false);
    expect(bucket.take(1, 60_000)).toBe(true); // never more than 10 saved up
    const big = new TokenBucket(10, 0);
    expect(big.take(100, 0)).toBe(true); // leaves a debt of 90
    expect(big.take(1, 5000)).toBe(false); // 5 s repays 50 of it
    expect(big.take(1, 9100)).toBe(true);
  });

  it("does not starve a batch behind smaller ones: it passes when the bucket holds anything, not all it asks", () => {
    const bucket = new TokenBucket(100, 0);
    expect(bucket.take(60, 0)).toBe(true);
    // 40 left: a coalesced batch of 100 sends goes through and the shard pays it back.
    expect(bucket.take(100, 0)).toBe(true);
    expect(bucket.take(1, 500)).toBe(false); // -60 + 50
    expect(bucket.take(1, 610)).toBe(true);
  });

  it("refuses sends above it as overloaded, and the broker places every message elsewhere or a little later", async () => {
    const q = await createQueue("capped");
    const shards = await limitShards(q.queue_id, 10);
    const statuses: number[] = [];
    for (let i = 0; i < 80; i++)
      statuses.push((await api("POST", `${queuePath("capped")}/messages`, { body: i })).status);
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(await backlog("capped")).toBe(80);
    for (const shard of shards) await runDurableObjectAlarm(shard);
    const refusals = (await coordinatorFor(env, q.queue_id).heartbeats()).reduce((n, b) => n + b.refusals, 0);
    expect(refusals).toBeGreaterThan(0);
  });

  it("answers 503 with Retry-After, storing nothing, when no shard frees up in time", async () => {
    const q = await createQueue("swamped");
    await limitShards(q.queue_id, 1);
    // Keep the autoscaler from adding shards (it would, on these refusals) during this test.
    await runInDurableObject(
      env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id)),
      (_obj: Coordinator, state) => {
        saveMemory(state.storage.sql, { lowSince: {}, lastChange: { local: Date.now() + 3_600_000 } });
      },
    );
    const batch = { messages: Array.from({ length: 100 }, (_, i) => ({ body: i })) };
    // Four full batches put every shard 99 messages (99 s) in debt.
    for (let i = 0; i < 4; i++)
      expect((await api("POST", `${queuePath("swamped")}/messages/batch`, batch)).status).toBe(200);
    const res = await api("POST", `${queuePath("swamped")}/messages/batch`, batch);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(res.json.success).toBe(false);
    expect(await backlog("swamped")).toBe(400);
  }, 15_000);
});

/** A shard with no room for a long while: a debt of 1,000 messages at 1 msg/s. */
async function fill(name: string) {
  await runInDurableObject(env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name)), (obj: StorageShard) => {
    obj.capacity = new TokenBucket(1, Date.now());
    obj.capacity.take(1000, Date.now());
  });
}

/** Keeps the autoscaler from changing the queue's shards during a test. */
async function holdAutoscaler(queueId: string) {
  await runInDurableObject(env.COORDINATOR.get(env.COORDINATOR.idFromName(queueId)), (_obj: Coordinator, state) => {
    saveMemory(state.storage.sql, { lowSince: {}, lastChange: { local: Date.now() + 3_600_000 } });
  });
}

describe("the broker's store path when shards are at capacity", () => {
  it("two active shards, one full: every send lands on the other", async () => {
    const q = await createQueue("one-full");
    const [full, free, ...rest] = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    for (const s of rest) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    forgetShardMap("local", "one-full");
    await fill(full!.name);
    for (let i = 0; i < 20; i++) await producer("one-full").send({ i });
    const { messages } = await storedMessages("one-full");
    expect(messages.map((m) => m.shard)).toEqual(messages.map(() => free!.name));
    expect(messages).toHaveLength(20);
  });

  it("asks every active shard, however many are full, before waiting: the one with room takes the send", async () => {
    const q = await createQueue("nine-full");
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
    // Six more shards (ten in all), as a scale-out leaves them: written pending, then activated by the tick.
    await runInDurableObject(coordinator, (_obj: Coordinator, state) => {
      for (let i = 10; i < 16; i++)
        state.storage.sql.exec(
          "INSERT INTO shards (name, region, state, created_at) VALUES (?, 'local', 'pending', ?)",
          `${q.queue_id}:local:${i}`,
          Date.now(),
        );
    });
    await runDurableObjectAlarm(coordinator);
    await holdAutoscaler(q.queue_id);
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    expect(shards.filter((s) => s.state === "active")).toHaveLength(10);
    for (const s of shards.slice(0, -1)) await fill(s.name);
    forgetShardMap("local", "nine-full");
    // Every pick the first shard not yet asked, in the map's order: the one with room comes last.
    const random = vi.spyOn(Math, "random").mockReturnValue(0);
    try {
      await producer("nine-full").send({ last: true });
    } finally {
      random.mockRestore();
    }
    const { messages } = await storedMessages("nine-full");
    expect(messages.map((m) => m.shard)).toEqual([shards.at(-1)!.name]);
  });

  it("waits for room when the other shards of its map are draining, rather than answering at once", async () => {
    const q = await createQueue("full-and-draining");
    await holdAutoscaler(q.queue_id);
    await producer("full-and-draining").send({ first: true }); // the broker now holds the map with every shard active
    const [draining, ...others] = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    await coordinatorFor(env, q.queue_id).setShardState(draining!.name, "draining");
    // The others have no room now, and room for one message every 100 ms.
    for (const s of others) {
      await runInDurableObject(env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(s.name)), (obj: StorageShard) => {
        obj.capacity = new TokenBucket(10, Date.now());
        obj.capacity.take(10, Date.now());
      });
    }
    await producer("full-and-draining").send({ second: true });
    expect(await backlog("full-and-draining")).toBe(2);
  });

  it("every shard full: the producer's send fails with the overloaded error, and HTTP answers 503 with Retry-After", async () => {
    const q = await createQueue("all-full");
    await holdAutoscaler(q.queue_id);
    for (const s of (await coordinatorFor(env, q.queue_id).shardMap())!.shards) await fill(s.name);
    const [binding, http] = await Promise.allSettled([
      producer("all-full").send({ binding: true }),
      api("POST", `${queuePath("all-full")}/messages`, { body: { http: true } }),
    ]);
    expect(binding.status === "rejected" && String(binding.reason)).toMatch(
      /no storage shard of this queue accepted the messages; retry later/,
    );
    expect(http.status === "fulfilled" && http.value.status).toBe(503);
    expect(http.status === "fulfilled" && http.value.headers.get("retry-after")).toBe("1");
    expect(await backlog("all-full")).toBe(0);
  }, 15_000);

  it("gives up for want of room only after rounds of asking, however far the clock ran while its isolate was starved", async () => {
    const q = await createQueue("starved");
    await holdAutoscaler(q.queue_id);
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    for (const s of shards) await fill(s.name);
    const refusals = async () => {
      let n = 0;
      for (const s of shards) {
        n += await runInDurableObject(
          env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(s.name)),
          (obj: StorageShard) => (obj as unknown as { activity: { refusals: number } }).activity.refusals,
        );
      }
      return n;
    };
    const before = await refusals();
    // Each reading of the clock a second after the last, as in an isolate starved of CPU: its patience runs out within a round or two.
    const real = Date.now.bind(Date);
    let reads = 0;
    const clock = vi.spyOn(Date, "now").mockImplementation(() => real() + 1000 * reads++);
    const body = new TextEncoder().encode(JSON.stringify({ starved: true }));
    let result: PromiseSettledResult<unknown>;
    try {
      [result] = await Promise.allSettled([
        storeMessages(env, { accountId: "local", queueRef: "starved", region: undefined }, [
          { body, contentType: "json", delaySeconds: undefined, checksum: crc32(body) },
        ]),
      ]);
    } finally {
      clock.mockRestore();
    }
    expect(result.status === "rejected" && String(result.reason)).toMatch(
      /no storage shard of this queue accepted the messages; retry later/,
    );
    // Every shard asked in each of at least eight rounds.
    expect((await refusals()) - before).toBeGreaterThanOrEqual(8 * shards.length);
    expect(await backlog("starved")).toBe(0);
  }, 15_000);
});
