import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import { saveMemory } from "../../coordinator/decisions";
import { coordinatorFor } from "../../src/kernel/addressing";
import { TokenBucket } from "../../storage-shard/capacity";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { api, backlog, createQueue, queuePath } from "./helpers";

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
  it("refills at its rate, holds one second's worth, and lets an oversized batch through only when full", () => {
    const bucket = new TokenBucket(10, 0);
    for (let i = 0; i < 10; i++) expect(bucket.take(1, 0)).toBe(true);
    expect(bucket.take(1, 0)).toBe(false);
    expect(bucket.take(1, 100)).toBe(true); // 0.1 s later: one more
    expect(bucket.take(1, 100)).toBe(false);
    expect(bucket.take(1, 60_000)).toBe(true); // never more than 10 saved up
    const big = new TokenBucket(10, 0);
    expect(big.take(100, 0)).toBe(true); // full: passes, leaves a debt of 90
    expect(big.take(1, 5000)).toBe(false); // 5 s repays 50 of it
    expect(big.take(1, 9100)).toBe(true);
  });

  it("refuses sends above it as overloaded, and the broker places every message elsewhere or a little later", async () => {
    const q = await createQueue("capped");
    const shards = await limitShards(q.queue_id, 10);
    const statuses: number[] = [];
    for (let i = 0; i < 80; i++) statuses.push((await api("POST", `${queuePath("capped")}/messages`, { body: i })).status);
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
    await runInDurableObject(env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id)), (_obj: Coordinator, state) => {
      saveMemory(state.storage.sql, { lowSince: {}, lastChange: { local: Date.now() + 3_600_000 } });
    });
    const batch = { messages: Array.from({ length: 100 }, (_, i) => ({ body: i })) };
    // Four full batches put every shard 99 messages (99 s) in debt.
    for (let i = 0; i < 4; i++) expect((await api("POST", `${queuePath("swamped")}/messages/batch`, batch)).status).toBe(200);
    const res = await api("POST", `${queuePath("swamped")}/messages/batch`, batch);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(res.json.success).toBe(false);
    expect(await backlog("swamped")).toBe(400);
  }, 15_000);
});
