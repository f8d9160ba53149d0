import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import { coordinatorFor, shardMapKeyById } from "../../src/kernel/addressing";
import { ManualClock } from "../../src/kernel/clock";
import { forgetSticks } from "../../src/routing/sticky-placement";
import type { ShardMap } from "../../src/kernel/shard-map";
import type { StorageHeartbeat } from "../../src/kernel/heartbeat";
import { api, backlog, createQueue, producer, queuePath, storedMessages } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

/** Fake time ahead of real time: the Coordinator's own alarms then wait for runDurableObjectAlarm. */
const FUTURE = Date.now() + 200_000_000_000;
const TOTALS = {
  leased: 0,
  acked: 0,
  retried: 0,
  deadLettered: 0,
  dropped: 0,
  expired: 0,
  quarantined: 0,
  purged: 0,
  cancelled: 0,
};

async function coordinatorOnClock(queueId: string) {
  const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(queueId));
  const clock = new ManualClock(FUTURE);
  await runInDurableObject(coordinator, (obj: Coordinator) => {
    obj.clock = clock;
  });
  return { coordinator, clock };
}

/** Every listed shard reports `perSecond` messages/s over the last 5 s. */
async function report(
  queueId: string,
  shards: Array<{ name: string; state?: string }>,
  perSecond: number,
  extra: Partial<StorageHeartbeat> = {},
) {
  for (const s of shards) {
    await coordinatorFor(env, queueId).heartbeat({
      shard: s.name,
      state: (s.state ?? "active") as StorageHeartbeat["state"],
      backlogCount: 0,
      backlogBytes: 0,
      oldestEnqueuedAt: null,
      messagesIn: perSecond * 5,
      messagesOut: 0,
      refusals: 0,
      leasedNow: 0,
      periodMs: 5000,
      sentAt: 0,
      totals: TOTALS,
      cost: { rpcs: 0, rowsWritten: 0 },
      ...extra,
    });
  }
}

const active = (m: ShardMap) => m.shards.filter((s) => s.state === "active");

describe("the Coordinator's control loop", () => {
  it("adds storage shards when heartbeats show load above target, activates them, publishes them and logs why", async () => {
    const q = await createQueue("cp-out");
    const { coordinator, clock } = await coordinatorOnClock(q.queue_id);
    const before = (await coordinatorFor(env, q.queue_id).shardMap())!;
    // 4 x 1000 msg/s, target 500, in two readings in a row (every shard reported again).
    await report(q.queue_id, before.shards, 1000);
    expect(await runDurableObjectAlarm(coordinator)).toBe(true);
    expect(active((await coordinatorFor(env, q.queue_id).shardMap())!)).toHaveLength(4);
    clock.advance(5000);
    await report(q.queue_id, before.shards, 1000);
    expect(await runDurableObjectAlarm(coordinator)).toBe(true);

    const after = (await coordinatorFor(env, q.queue_id).shardMap())!;
    // 4,000 msg/s at a target of 500 a shard: ceil(4000 / 500) = 8 shards.
    expect(active(after)).toHaveLength(8);
    expect(after.version).toBeGreaterThan(before.version);
    const decision = (await coordinatorFor(env, q.queue_id).decisions())[0]!;
    expect(decision).toMatchObject({
      kind: "add_shards",
      region: "local",
      reason: "1000 msg/s per shard > target 500 in two readings in a row",
    });
    expect(decision.figures).toMatchObject({ activeShards: 4, messagesPerSecond: 4000 });
    // The new shards take sends: each was activated before it entered the map. Each send placed at random, as by isolates of their own.
    for (let i = 0; i < 60; i++) {
      forgetSticks();
      expect((await api("POST", `${queuePath("cp-out")}/messages`, { body: i })).status).toBe(200);
    }
    const { messages } = await storedMessages("cp-out");
    expect(new Set(messages.map((m) => m.shard)).size).toBeGreaterThan(4);
    const published = await env.SHARD_MAPS.get<ShardMap>(shardMapKeyById("local", q.queue_id), "json");
    expect(active(published!)).toHaveLength(8);
  });

  it("drains shards after load stays low, refuses sends there, and retires them once they report themselves empty", async () => {
    const q = await createQueue("cp-in");
    const { coordinator, clock } = await coordinatorOnClock(q.queue_id);
    let map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    await report(q.queue_id, map.shards, 1000);
    await runDurableObjectAlarm(coordinator);
    clock.advance(5000);
    await report(q.queue_id, map.shards, 1000);
    await runDurableObjectAlarm(coordinator); // out to 8
    map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    // A cooldown after the scale-out (10 s), low load reported from 5 s on, 30 s of it: the seventh tick drains.
    for (let t = 0; t < 7; t++) {
      clock.advance(5000);
      await report(q.queue_id, active(map), 1);
      await runDurableObjectAlarm(coordinator);
      map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    }
    // 8 msg/s needs one shard: back to the minimum of 4 in one step.
    const draining = map.shards.filter((s) => s.state === "draining");
    expect(draining).toHaveLength(4);
    expect(active(map)).toHaveLength(4);
    const decisions = await coordinatorFor(env, q.queue_id).decisions();
    expect(decisions.slice(0, 4).map((d) => d.kind)).toEqual([
      "drain_shard",
      "drain_shard",
      "drain_shard",
      "drain_shard",
    ]);
    expect(new Set(decisions.slice(0, 4).map((d) => d.target))).toEqual(new Set(draining.map((s) => s.name)));
    // The shards themselves refuse sends now.
    const refused = await env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(draining[0]!.name)).append({
      queueId: q.queue_id,
      messages: [],
    });
    expect(refused).toEqual({ ok: false, refused: "draining" });

    // Their own reports say draining and empty: the next tick retires them.
    clock.advance(5000);
    await report(q.queue_id, draining, 0, { state: "draining" });
    await report(q.queue_id, active(map), 1);
    await runDurableObjectAlarm(coordinator);
    map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    expect(draining.map((d) => map.shards.find((s) => s.name === d.name)!.state)).toEqual([
      "retired",
      "retired",
      "retired",
      "retired",
    ]);
    expect((await coordinatorFor(env, q.queue_id).decisions()).filter((d) => d.kind === "retire_shard")).toHaveLength(
      4,
    );
  });

  it("finishes a scale-out a reset interrupted: a pending shard is activated and published by the next tick", async () => {
    const q = await createQueue("cp-reset");
    const { coordinator } = await coordinatorOnClock(q.queue_id);
    const name = `${q.queue_id}:local:99`;
    // The state a reset leaves between recording the decision and activating the shard.
    await runInDurableObject(coordinator, (_obj: Coordinator, state) => {
      state.storage.sql.exec(
        "INSERT INTO shards (name, region, state, created_at) VALUES (?, 'local', 'pending', ?)",
        name,
        FUTURE,
      );
    });
    expect((await coordinatorFor(env, q.queue_id).shardMap())!.shards.map((s) => s.name)).not.toContain(name);
    await runInDurableObject(coordinator, (_obj: Coordinator, state) => state.abort("reset mid-decision")).catch(
      () => {},
    );
    const fresh = await coordinatorOnClock(q.queue_id);
    expect(await runDurableObjectAlarm(fresh.coordinator)).toBe(true);
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    expect(map.shards.find((s) => s.name === name)?.state).toBe("active");
    const appended = await env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name)).append({
      queueId: q.queue_id,
      messages: [],
    });
    expect(appended.ok).toBe(true);
  });

  it("undoes a drain a reset kept from being recorded: the shard is told the map's state again", async () => {
    const q = await createQueue("cp-reconcile");
    const { coordinator } = await coordinatorOnClock(q.queue_id);
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(map.shards[0]!.name));
    await shard.setState("draining"); // told, never recorded
    await report(q.queue_id, [{ name: map.shards[0]!.name, state: "draining" }], 1);
    await runDurableObjectAlarm(coordinator);
    expect((await shard.append({ queueId: q.queue_id, messages: [] })).ok).toBe(true);
  });

  it("delivers every message once (or counts the duplicate) while shards drain under load", async () => {
    const q = await createQueue("cp-drain-load");
    await api("POST", `${queuePath("cp-drain-load")}/consumers`, {
      type: "worker",
      script_name: "shardq-example-consumer",
      settings: { max_wait_time_ms: 0, batch_size: 20 },
    });
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      ids.push(
        ...(await producer("cp-drain-load").sendBatch(Array.from({ length: 25 }, (_, j) => ({ body: { i, j } }))))
          .messageIds,
      );
      if (i === 8)
        for (const s of map.shards.slice(2)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    }
    const deadline = Date.now() + 20_000;
    let stats = { received: 0, distinct: 0, duplicates: 0 };
    while (Date.now() < deadline) {
      stats = (await (
        await env.EXAMPLE_CONSUMER.fetch("http://consumer/stats?queue=cp-drain-load")
      ).json()) as typeof stats;
      if (stats.distinct === ids.length) break;
      await sleep(100);
    }
    expect(stats.distinct).toBe(500);
    expect(stats.received).toBe(500 + stats.duplicates);
    expect(await backlog("cp-drain-load")).toBe(0);
    const missing = (await (
      await env.EXAMPLE_CONSUMER.fetch("http://consumer/missing", {
        method: "POST",
        body: JSON.stringify({ queue: "cp-drain-load", ids }),
      })
    ).json()) as { missing: string[] };
    expect(missing.missing).toEqual([]);
  });
});
