/**
 * An idle queue's control loop sleeps (docs/cost.md): the Coordinator ticks while its shards
 * report, and stops two intervals after the last report. What it shows meanwhile stays true:
 * the backlog as the shards last reported it, and no traffic.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import { fillQuiet, SERIES_STEP_MS, type SeriesPoint } from "../../coordinator/time-series";
import { coordinatorFor } from "../../src/kernel/addressing";
import { ManualClock } from "../../src/kernel/clock";
import type { StorageHeartbeat } from "../../src/kernel/heartbeat";
import { api, createQueue, queuePath } from "./helpers";

const FUTURE = Date.now() + 300_000_000_000;
const TOTALS = {
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
};

function beat(shard: string, messagesIn: number, backlogCount: number): StorageHeartbeat {
  return {
    shard,
    state: "active",
    backlogCount,
    backlogBytes: backlogCount * 10,
    oldestEnqueuedAt: backlogCount ? FUTURE : null,
    messagesIn,
    messagesOut: 0,
    refusals: 0,
    leasedNow: 0,
    periodMs: 5000,
    sentAt: 0,
    totals: TOTALS,
    cost: { rpcs: 0, rowsWritten: 0 },
    readyNow: backlogCount > 0,
  };
}

async function alarmAt(queueId: string): Promise<number | null> {
  return runInDurableObject(env.COORDINATOR.get(env.COORDINATOR.idFromName(queueId)), (_obj: Coordinator, state) =>
    state.storage.getAlarm(),
  );
}

describe("an idle queue's control loop", () => {
  it("ticks while shards report, and sleeps once none has for two intervals: no alarm left, a point written before it", async () => {
    const q = await createQueue("sleep-loop");
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
    const clock = new ManualClock(FUTURE);
    await runInDurableObject(coordinator, (obj: Coordinator) => {
      obj.clock = clock;
    });
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    // Let the tick the create armed run, on fake time: nothing has reported, so it sleeps.
    await runDurableObjectAlarm(coordinator);
    expect(await alarmAt(q.queue_id)).toBeNull();

    // A report (traffic) wakes it: a tick an interval on.
    await coordinatorFor(env, q.queue_id).heartbeat(beat(shards[0]!.name, 50, 7));
    expect(await alarmAt(q.queue_id)).toBe(clock.now() + 5000);
    clock.advance(5000);
    expect(await runDurableObjectAlarm(coordinator)).toBe(true);
    expect(await alarmAt(q.queue_id)).toBe(clock.now() + 5000);
    // The shard's last report: nothing happened in its period.
    await coordinatorFor(env, q.queue_id).heartbeat(beat(shards[0]!.name, 0, 7));
    for (let i = 0; i < 2; i++) {
      clock.advance(5000);
      await runDurableObjectAlarm(coordinator);
    }
    clock.advance(5001);
    expect(await runDurableObjectAlarm(coordinator)).toBe(true);
    expect(await alarmAt(q.queue_id)).toBeNull();
    const asleepAt = clock.now();

    // A minute later, the series shows the backlog as it was and no traffic, a point every step.
    clock.advance(60_000);
    const series = await api("GET", `${queuePath("sleep-loop")}/series`);
    const points = series.json.result.points as SeriesPoint[];
    const quiet = points.filter((p) => p.at_ms > asleepAt);
    expect(quiet.length).toBe(6);
    expect(
      quiet.every((p) => p.backlog_count === 7 && p.messages_in_per_second === 0 && p.messages_out_per_second === 0),
    ).toBe(true);
    expect(points.find((p) => p.at_ms === asleepAt)).toMatchObject({ backlog_count: 7, messages_in_per_second: 0 });
  });

  it("keeps a tick for a scale-in or a retired shard coming due, one alarm each, not a loop", async () => {
    const q = await createQueue("sleep-retired");
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
    const clock = new ManualClock(FUTURE);
    await runInDurableObject(coordinator, (obj: Coordinator) => {
      obj.clock = clock;
    });
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    await coordinatorFor(env, q.queue_id).setShardState(shards.at(-1)!.name, "retired");
    const retiredAt = clock.now();
    // The map's publish a second on (KV takes a write a second), and the tick that finds nothing reporting.
    clock.advance(1000);
    await runDurableObjectAlarm(coordinator);
    // Forgotten ten minutes after it was retired: the one alarm left is that.
    expect(await alarmAt(q.queue_id)).toBe(retiredAt + 10 * 60_000);
  });

  it("a forced drain of a queue's last active shard adds its replacement first: the queue keeps taking sends", async () => {
    const q = await createQueue("sleep-last-shard");
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    for (const s of shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    const last = shards[0]!.name;
    await runInDurableObject(env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id)), async (obj: Coordinator) => {
      await (
        obj as unknown as { loop: { force(kind: "drain", now: number, shard: string): Promise<string> } }
      ).loop.force("drain", Date.now(), last);
    });
    const after = (await coordinatorFor(env, q.queue_id).shardMap())!.shards;
    expect(after.find((s) => s.name === last)?.state).toBe("draining");
    expect(after.filter((s) => s.state === "active").map((s) => s.name)).toEqual([
      expect.not.stringMatching(new RegExp(`^${last}$`)),
    ]);
  });

  it("asks a shard with nothing to report to keep reporting while the autoscaler waits for reports after its last change", async () => {
    const q = await createQueue("sleep-settling");
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
    const clock = new ManualClock(FUTURE);
    await runInDurableObject(coordinator, (obj: Coordinator, state) => {
      obj.clock = clock;
      // The autoscaler changed region "local" just now (as a scale-out records it).
      state.storage.sql.exec(
        "INSERT OR REPLACE INTO autoscale (one, memory) VALUES (1, ?)",
        JSON.stringify({ lowSince: {}, lastChange: { local: FUTURE }, high: {} }),
      );
    });
    const shard = (await coordinatorFor(env, q.queue_id).shardMap())!.shards[0]!.name;
    expect((await coordinatorFor(env, q.queue_id).heartbeat(beat(shard, 0, 0))).stayAwake).toBe(true);
    clock.advance(6 * 5000);
    expect((await coordinatorFor(env, q.queue_id).heartbeat(beat(shard, 0, 0))).stayAwake).toBe(false);
  });

  it("fills the quiet time between two points, and after the last up to now, with the backlog kept and no traffic", () => {
    const p = (at: number, backlog: number, rate: number): SeriesPoint => ({
      at_ms: at,
      backlog_count: backlog,
      backlog_bytes: backlog,
      messages_in_per_second: rate,
      messages_out_per_second: rate,
      active_shards: 1,
      consumer_shards_running: 1,
    });
    const step = SERIES_STEP_MS;
    const filled = fillQuiet([p(0, 5, 3), p(step, 4, 0), p(4 * step, 9, 2)], 6 * step + 1);
    expect(
      filled.map((x) => [x.at_ms / step, x.backlog_count, x.messages_in_per_second, x.consumer_shards_running]),
    ).toEqual([
      [0, 5, 3, 1],
      [1, 4, 0, 1],
      [2, 4, 0, 0],
      [3, 4, 0, 0],
      [4, 9, 2, 1],
      [5, 9, 0, 0],
      [6, 9, 0, 0],
    ]);
  });
});
