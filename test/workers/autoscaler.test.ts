import { describe, expect, it } from "vitest";
import { decide, type ScalingMemory, type ScalingPolicy, type ShardView } from "../../coordinator/autoscaler";

const policy: ScalingPolicy = {
  targetPerShard: 100,
  minPerRegion: 2,
  maxPerRegion: 6,
  scaleInBelow: 0.3,
  scaleInAfterMs: 30_000,
  cooldownMs: 10_000,
  heartbeatIntervalMs: 5000,
};
const empty: ScalingMemory = { lowSince: {}, lastChange: {} };

/** Shards of region r, each reporting `rate` msg/s over the last 5 s at time `at`. */
function shards(n: number, rate: number, at: number, extra: Partial<NonNullable<ShardView["beat"]>> = {}, region = "r"): ShardView[] {
  return Array.from({ length: n }, (_, i) => ({
    name: `${region}${i}`,
    region,
    state: "active" as const,
    createdAt: i,
    beat: { state: "active", messagesIn: rate * 5, periodMs: 5000, backlog: 10 * i, leasedNow: 0, refusals: 0, receivedAt: at, ...extra },
  }));
}

/** Runs the autoscaler on synthetic heartbeats over fake time, applying its actions to the shard list. */
function simulate(load: (t: number) => number, steps: number, start = 2) {
  let list = shards(start, 0, 0);
  let memory = empty;
  const counts: number[] = [];
  const log: string[] = [];
  for (let step = 1; step <= steps; step++) {
    const now = step * 5000;
    const active = list.filter((s) => s.state === "active");
    const perShard = load(now) / Math.max(1, active.length);
    list = list.map((s) => ({ ...s, beat: { state: s.state, messagesIn: s.state === "active" ? perShard * 5 : 0, periodMs: 5000, backlog: 0, leasedNow: 0, refusals: 0, receivedAt: now } }));
    const out = decide(list, ["r"], policy, memory, now);
    memory = out.memory;
    for (const a of out.actions) {
      log.push(`${now / 1000}s ${a.kind}`);
      if (a.kind === "add_shards") for (let i = 0; i < a.count; i++) list.push({ name: `n${now}-${i}`, region: "r", state: "active", createdAt: now, beat: null });
      if (a.kind === "drain_shard") list = list.map((s) => (s.name === a.shard ? { ...s, state: "draining" } : s));
      if (a.kind === "retire_shard") list = list.filter((s) => s.name !== a.shard);
    }
    counts.push(list.filter((s) => s.state === "active").length);
  }
  return { counts, log };
}

describe("storage-shard autoscaler", () => {
  it("adds shards when the load per shard is above target, enough for 30% headroom", () => {
    const { actions } = decide(shards(2, 250, 1000), ["r"], policy, empty, 1000);
    // 500 msg/s over 2 shards: 250 each > 100; 500 / 70 -> 8, capped at the maximum of 6.
    expect(actions).toEqual([expect.objectContaining({ kind: "add_shards", region: "r", count: 4 })]);
    expect(actions[0]!.reason).toContain("250 msg/s per shard > target 100");
    expect(actions[0]!.figures).toMatchObject({ activeShards: 2, messagesPerSecond: 500, perShard: 250, target: 100 });
  });

  it("adds a shard when sends were refused as overloaded, whatever the rate", () => {
    const { actions } = decide(shards(2, 10, 1000, { refusals: 3 }), ["r"], policy, empty, 1000);
    expect(actions).toEqual([expect.objectContaining({ kind: "add_shards", count: 1, reason: "6 send(s) refused as overloaded" })]);
  });

  it("never goes above the maximum or below the minimum", () => {
    expect(decide(shards(6, 1000, 1000), ["r"], policy, empty, 1000).actions).toEqual([]);
    const below = decide(shards(1, 0, 1000), ["r"], policy, empty, 1000).actions;
    expect(below).toEqual([expect.objectContaining({ kind: "add_shards", count: 1, reason: "below the minimum of 2" })]);
    const quiet = simulate(() => 0, 40);
    expect(Math.min(...quiet.counts)).toBe(2);
  });

  it("waits a cooldown after a change before the next", () => {
    const first = decide(shards(2, 250, 1000), ["r"], policy, empty, 1000);
    const again = decide(shards(6, 250, 6000), ["r"], { ...policy, maxPerRegion: 20 }, first.memory, 6000);
    expect(again.actions).toEqual([]);
    const later = decide(shards(6, 250, 11_000), ["r"], { ...policy, maxPerRegion: 20 }, first.memory, 11_000);
    expect(later.actions[0]?.kind).toBe("add_shards");
  });

  it("scales in one shard at a time, only after load has stayed low for scaleInAfterMs", () => {
    let memory = empty;
    for (let t = 5000; t < 35_000; t += 5000) {
      const out = decide(shards(4, 10, t), ["r"], policy, memory, t);
      expect(out.actions).toEqual([]);
      memory = out.memory;
    }
    const out = decide(shards(4, 10, 35_000), ["r"], policy, memory, 35_000);
    expect(out.actions).toHaveLength(1);
    // The emptiest shard (backlog 0) drains first.
    expect(out.actions[0]).toMatchObject({ kind: "drain_shard", shard: "r0" });
    expect(out.actions[0]!.reason).toMatch(/10 msg\/s per shard < 30 for 30 s/);
  });

  it("does not flap: load between the scale-in and scale-out thresholds changes nothing", () => {
    const steady = simulate(() => 300, 60, 4); // 75 msg/s per shard on 4: below 100, above 30
    expect(new Set(steady.counts)).toEqual(new Set([4]));
    expect(steady.log).toEqual([]);
  });

  it("follows a burst up and back down within the bounds", () => {
    const burst = (t: number) => (t >= 20_000 && t < 80_000 ? 500 : 0);
    const { counts, log } = simulate(burst, 60);
    expect(Math.max(...counts)).toBe(6);
    expect(counts.at(-1)).toBe(2);
    expect(log.filter((l) => l.endsWith("add_shards")).length).toBeGreaterThan(0);
    expect(log.filter((l) => l.endsWith("drain_shard")).length).toBe(4);
  });

  it("retires a draining shard only when it reports itself draining and empty", () => {
    const base = shards(3, 50, 1000);
    const draining = (beat: Partial<NonNullable<ShardView["beat"]>>): ShardView[] => [
      ...base.slice(0, 2),
      { ...base[2]!, state: "draining", beat: { ...base[2]!.beat!, ...beat } },
    ];
    const retire = (list: ShardView[]) => decide(list, ["r"], policy, empty, 1000).actions.filter((a) => a.kind === "retire_shard");
    expect(retire(draining({ state: "draining", backlog: 0, leasedNow: 0 }))).toEqual([expect.objectContaining({ shard: "r2" })]);
    expect(retire(draining({ state: "draining", backlog: 3, leasedNow: 0 }))).toEqual([]);
    expect(retire(draining({ state: "draining", backlog: 0, leasedNow: 2 }))).toEqual([]);
    // A report from before the drain says nothing about what arrived since.
    expect(retire(draining({ state: "active", backlog: 0, leasedNow: 0 }))).toEqual([]);
    expect(retire(draining({ state: "draining", backlog: 0, leasedNow: 0, receivedAt: -20_000 }))).toEqual([]);
  });

  it("decides per region", () => {
    const list = [...shards(2, 250, 1000, {}, "a"), ...shards(2, 50, 1000, {}, "b")];
    const { actions } = decide(list, ["a", "b"], policy, empty, 1000);
    expect(actions.map((a) => [a.kind, a.region])).toEqual([["add_shards", "a"]]);
  });
});
