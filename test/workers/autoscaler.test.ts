import { describe, expect, it } from "vitest";
import {
  decide,
  type ScalingAction,
  type ScalingMemory,
  type ScalingPolicy,
  type ShardView,
} from "../../coordinator/autoscaler";

const policy: ScalingPolicy = {
  targetPerShard: 100,
  capacityPerShard: 0,
  minPerRegion: 2,
  maxPerRegion: 6,
  scaleInBelow: 0.3,
  scaleInAfterMs: 30_000,
  cooldownMs: 10_000,
  heartbeatIntervalMs: 5000,
};
const empty: ScalingMemory = { lowSince: {}, lastChange: {} };

/** Shards of region r, each reporting `rate` msg/s over the last 5 s at time `at`. */
function shards(
  n: number,
  rate: number,
  at: number,
  extra: Partial<NonNullable<ShardView["beat"]>> = {},
  region = "r",
): ShardView[] {
  return Array.from({ length: n }, (_, i) => ({
    name: `${region}${i}`,
    region,
    state: "active" as const,
    createdAt: i,
    beat: {
      state: "active",
      messagesIn: rate * 5,
      periodMs: 5000,
      backlog: 10 * i,
      leasedNow: 0,
      refusals: 0,
      receivedAt: at,
      ...extra,
    },
  }));
}

/** The autoscaler at `t1` and then at `t2` on the shards' next reports (`list(at)`): a load must show in two reports in a row. */
function twice(
  list: (at: number) => ShardView[],
  p: ScalingPolicy,
  memory: ScalingMemory,
  t1: number,
  t2: number,
  regions = ["r"],
) {
  const first = decide(list(t1), regions, p, memory, t1);
  expect(first.actions.filter((a) => a.kind === "add_shards")).toEqual([]);
  return decide(list(t2), regions, p, first.memory, t2);
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
    list = list.map((s) => ({
      ...s,
      beat: {
        state: s.state,
        messagesIn: s.state === "active" ? perShard * 5 : 0,
        periodMs: 5000,
        backlog: 0,
        leasedNow: 0,
        refusals: 0,
        receivedAt: now,
      },
    }));
    const out = decide(list, ["r"], policy, memory, now);
    memory = out.memory;
    for (const a of out.actions) {
      log.push(`${now / 1000}s ${a.kind}`);
      if (a.kind === "add_shards")
        for (let i = 0; i < a.count; i++)
          list.push({ name: `n${now}-${i}`, region: "r", state: "active", createdAt: now, beat: null });
      if (a.kind === "drain_shard") list = list.map((s) => (s.name === a.shard ? { ...s, state: "draining" } : s));
      if (a.kind === "retire_shard") list = list.filter((s) => s.name !== a.shard);
    }
    counts.push(list.filter((s) => s.state === "active").length);
  }
  return { counts, log };
}

describe("storage-shard autoscaler", () => {
  it("adds shards when the load per shard is above target: as many as keep each at the target", () => {
    const { actions } = twice((at) => shards(2, 250, at), policy, empty, 1000, 6000);
    // 500 msg/s over 2 shards: 250 each > 100; 500 / 100 -> 5 shards.
    expect(actions).toEqual([expect.objectContaining({ kind: "add_shards", region: "r", count: 3 })]);
    expect(actions[0]!.reason).toContain("250 msg/s per shard > target 100");
    expect(actions[0]!.figures).toMatchObject({ activeShards: 2, messagesPerSecond: 500, perShard: 250, target: 100 });
  });

  it("adds nothing for a load within 10% above the target: one report reads a steady load a few percent high", () => {
    expect(twice((at) => shards(5, 108, at), policy, empty, 1000, 6000).actions).toEqual([]);
    expect(twice((at) => shards(5, 111, at), policy, empty, 1000, 6000).actions).toEqual([
      expect.objectContaining({ kind: "add_shards", count: 1 }),
    ]);
  });

  it("counts a shard that refused sends for want of room at its capacity, and none above it: a full shard's own count swings", () => {
    const capped = { ...policy, capacityPerShard: 120 };
    // 60 msg/s each, but refusing: full, 120 each; 600 / 100 -> 6.
    expect(twice((at) => shards(5, 60, at, { refusals: 4 }), capped, empty, 1000, 6000).actions).toEqual([
      expect.objectContaining({ kind: "add_shards", count: 1 }),
    ]);
    expect(twice((at) => shards(5, 60, at), capped, empty, 1000, 6000).actions).toEqual([]);
    // 150 msg/s each, over a capacity of 120: a burst on their reserve or into debt, counted at 120.
    expect(
      twice((at) => shards(5, 150, at, { refusals: 4 }), { ...capped, maxPerRegion: 20 }, empty, 1000, 6000).actions,
    ).toEqual([expect.objectContaining({ kind: "add_shards", count: 1 })]);
  });

  it("adds nothing for a burst in one report: the next shows the load it follows", () => {
    const first = decide(shards(5, 150, 1000), ["r"], policy, empty, 1000);
    expect(first.actions).toEqual([]);
    expect(decide(shards(5, 90, 6000), ["r"], policy, first.memory, 6000).actions).toEqual([]);
    // Two high reports in a row: sized by the lower of the two (5 x 120 / 100 -> 6).
    const again = decide(shards(5, 150, 11_000), ["r"], policy, empty, 11_000);
    expect(decide(shards(5, 120, 11_000), ["r"], policy, again.memory, 11_000).actions).toEqual([]); // the same reports read again
    expect(decide(shards(5, 120, 16_000), ["r"], policy, again.memory, 16_000).actions).toEqual([
      expect.objectContaining({ kind: "add_shards", count: 1 }),
    ]);
  });

  it("adds nothing for refusals while the shards take less than the target: the broker placed those sends elsewhere", () => {
    expect(decide(shards(2, 10, 1000, { refusals: 3 }), ["r"], policy, empty, 1000).actions).toEqual([]);
  });

  it("never goes above the maximum or below the minimum", () => {
    expect(decide(shards(6, 1000, 1000), ["r"], policy, empty, 1000).actions).toEqual([]);
    const below = decide(shards(1, 0, 1000), ["r"], policy, empty, 1000).actions;
    expect(below).toEqual([
      expect.objectContaining({ kind: "add_shards", count: 1, reason: "below the minimum of 2" }),
    ]);
    const quiet = simulate(() => 0, 40);
    expect(Math.min(...quiet.counts)).toBe(2);
  });

  it("waits a cooldown after a change, and then two reports, before the next", () => {
    const wide = { ...policy, maxPerRegion: 20 };
    const first = twice((at) => shards(2, 250, at), wide, empty, 1000, 6000);
    expect(first.actions[0]?.kind).toBe("add_shards");
    const again = decide(shards(5, 250, 11_000), ["r"], wide, first.memory, 11_000);
    expect(again.actions).toEqual([]);
    const later = twice((at) => shards(5, 250, at), wide, again.memory, 16_000, 21_000);
    expect(later.actions[0]?.kind).toBe("add_shards");
  });

  it("scales in after load has stayed low for scaleInAfterMs, counted from the first report that shows it, to what the load needs", () => {
    let memory = empty;
    // The first low report covers 0-5 s: low since 0 s.
    for (let t = 5000; t < 30_000; t += 5000) {
      const out = decide(shards(5, 10, t), ["r"], policy, memory, t);
      expect(out.actions).toEqual([]);
      memory = out.memory;
    }
    const out = decide(shards(5, 10, 30_000), ["r"], policy, memory, 30_000);
    // 50 msg/s at half the target (50) a shard: one shard, but never below the minimum of 2.
    // The emptiest shards (backlog 0, 10, 20) drain first.
    expect(out.actions.map((a) => [a.kind, a.kind === "drain_shard" && a.shard])).toEqual([
      ["drain_shard", "r0"],
      ["drain_shard", "r1"],
      ["drain_shard", "r2"],
    ]);
    expect(out.actions[0]!.reason).toMatch(/10 msg\/s per shard < 30 for 30 s: 5 -> 2 shards/);
  });

  it("does not flap: load between the scale-in and scale-out thresholds changes nothing", () => {
    const steady = simulate(() => 300, 60, 4); // 75 msg/s per shard on 4: below 100, above 30
    expect(new Set(steady.counts)).toEqual(new Set([4]));
    expect(steady.log).toEqual([]);
  });

  it("follows a burst up and back down within the bounds", () => {
    const burst = (t: number) => (t >= 20_000 && t < 80_000 ? 500 : 0);
    const { counts, log } = simulate(burst, 60);
    // 500 msg/s at a target of 100: five shards, then back to the minimum in one step.
    expect(Math.max(...counts)).toBe(5);
    expect(counts.at(-1)).toBe(2);
    expect(log.filter((l) => l.endsWith("add_shards")).length).toBeGreaterThan(0);
    expect(new Set(log.filter((l) => l.endsWith("drain_shard")))).toEqual(new Set(["105s drain_shard"]));
  });

  it("retires a draining shard only when it reports itself draining and empty", () => {
    const base = shards(3, 50, 1000);
    const draining = (beat: Partial<NonNullable<ShardView["beat"]>>): ShardView[] => [
      ...base.slice(0, 2),
      { ...base[2]!, state: "draining", beat: { ...base[2]!.beat!, ...beat } },
    ];
    const retire = (list: ShardView[]) =>
      decide(list, ["r"], policy, empty, 1000).actions.filter((a) => a.kind === "retire_shard");
    expect(retire(draining({ state: "draining", backlog: 0, leasedNow: 0 }))).toEqual([
      expect.objectContaining({ shard: "r2" }),
    ]);
    expect(retire(draining({ state: "draining", backlog: 3, leasedNow: 0 }))).toEqual([]);
    expect(retire(draining({ state: "draining", backlog: 0, leasedNow: 2 }))).toEqual([]);
    // A report from before the drain says nothing about what arrived since.
    expect(retire(draining({ state: "active", backlog: 0, leasedNow: 0 }))).toEqual([]);
    // An old report of a draining shard that said it was empty stays true: a draining shard takes no
    // new messages, and anything that changes it wakes it to report (it sleeps, storage-shard/shard-alarm.ts).
    // The fault run at seed 20261204 caught a drained shard that reported empty while the
    // Coordinator's alarm threw, then slept: it was never retired.
    expect(retire(draining({ state: "draining", backlog: 0, leasedNow: 0, receivedAt: -20_000 }))).toEqual([
      expect.objectContaining({ shard: "r2" }),
    ]);
    expect(retire(draining({ state: "draining", backlog: 1, leasedNow: 0, receivedAt: -20_000 }))).toEqual([]);
  });

  it("decides per region", () => {
    const list = (at: number) => [...shards(2, 250, at, {}, "a"), ...shards(2, 50, at, {}, "b")];
    const { actions } = twice(list, policy, empty, 1000, 6000, ["a", "b"]);
    expect(actions.map((a) => [a.kind, a.region])).toEqual([["add_shards", "a"]]);
  });
});

/**
 * The autoscaler against a model of the queue, in steps of 100 ms: a producer offers `load`
 * msg/s, each shard takes at most `capacity` msg/s, and brokers learn of a new shard
 * `mapLagMs` after it is added (their cached maps), so until then it takes nothing. Each
 * shard reports every second at its own phase, a new one first a second after it starts;
 * the Coordinator decides every second, as the control loop does with a 1 s interval, and
 * when the autoscaler says a scale-in comes due.
 */
function plant(opts: {
  load: (t: number) => number;
  capacity: number;
  mapLagMs: number;
  untilMs: number;
  policy: ScalingPolicy;
}) {
  const hb = opts.policy.heartbeatIntervalMs;
  type Shard = ShardView & { nextBeat: number; lastBeat: number; taken: number; refused: number };
  const make = (name: string, t: number, phase: number): Shard => ({
    name,
    region: "r",
    state: "active",
    createdAt: t,
    beat: null,
    nextBeat: t + phase,
    lastBeat: t,
    taken: 0,
    refused: 0,
  });
  let list: Shard[] = Array.from({ length: opts.policy.minPerRegion as number }, (_, i) => ({
    ...make(`s${i}`, -1e9, 0),
    nextBeat: 300 + 170 * i,
    lastBeat: 0,
  }));
  let memory = empty;
  let wake = Infinity;
  const samples: Array<{ t: number; active: number; accepted: number }> = [];
  const log: Array<{ t: number; kind: ScalingAction["kind"] }> = [];
  let accepted = 0;
  for (let t = 0; t <= opts.untilMs; t += 100) {
    const reachable = list.filter((s) => s.state === "active" && t - s.createdAt >= opts.mapLagMs);
    const offered = (opts.load(t) * 100) / 1000;
    const took = Math.min(offered, (opts.capacity * reachable.length * 100) / 1000);
    // Sends beyond the capacity are refused; so are some below it, above 85% of it, that
    // found their first shard's second used up and went to another shard of the region.
    const used = took / ((opts.capacity * Math.max(1, reachable.length) * 100) / 1000);
    for (const s of reachable) {
      s.taken += took / reachable.length;
      s.refused += (offered - took + took * Math.max(0, used - 0.85)) / reachable.length;
    }
    accepted += took;
    for (const s of list) {
      if (s.nextBeat > t) continue;
      s.beat = {
        state: s.state,
        messagesIn: s.taken,
        periodMs: t - s.lastBeat,
        backlog: 0,
        leasedNow: 0,
        refusals: Math.round(s.refused),
        receivedAt: t,
      };
      Object.assign(s, { taken: 0, refused: 0, lastBeat: t, nextBeat: t + hb });
    }
    if (t % hb === 0 || t >= wake) {
      const out = decide(list, ["r"], opts.policy, memory, t);
      memory = out.memory;
      wake = out.wakeAt ?? Infinity;
      for (const a of out.actions) {
        log.push({ t, kind: a.kind });
        if (a.kind === "add_shards") for (let i = 0; i < a.count; i++) list.push(make(`n${t}-${i}`, t, hb + 50));
        if (a.kind === "drain_shard") list.find((s) => s.name === a.shard)!.state = "draining";
        if (a.kind === "retire_shard") list = list.filter((s) => s.name !== a.shard);
      }
      if (t % hb !== 0) continue;
      samples.push({ t, active: list.filter((s) => s.state === "active").length, accepted: Math.round(accepted) });
      accepted = 0;
    }
  }
  return { samples, log, left: list };
}

describe("storage-shard autoscaler on a model of the queue (capacity 100 msg/s a shard, 400 offered: 4 shards needed)", () => {
  // As the benchmark's w6 runs it: TARGET_MESSAGES_PER_SHARD unset (500), SHARD_CAPACITY_PER_SECOND=100.
  const w6: ScalingPolicy = {
    targetPerShard: 500,
    capacityPerShard: 100,
    minPerRegion: 1,
    maxPerRegion: 16,
    scaleInBelow: 0.3,
    scaleInAfterMs: 10_000,
    cooldownMs: 2000,
    heartbeatIntervalMs: 1000,
  };
  const load = (t: number) => (t < 60_000 ? 400 : 0);

  it("lands at the shards the load needs and holds the offered rate, never past 1.5x, with brokers' maps behind", () => {
    const { samples } = plant({ load, capacity: 100, mapLagMs: 2000, untilMs: 60_000, policy: w6 });
    expect(Math.max(...samples.map((s) => s.active))).toBeLessThanOrEqual(6);
    // 400 / (100 * 0.85): five shards, and nothing changes once there.
    const late = samples.filter((s) => s.t >= 30_000);
    expect(late.map((s) => s.active)).toEqual(late.map(() => 5));
    // Within 30 s every second takes at least 0.9 of what is offered.
    expect(late.every((s) => s.accepted >= 360)).toBe(true);
  });

  it("does not overshoot when shards at capacity report it: the benchmark's earlier target of 0.75 of the capacity", () => {
    const { samples } = plant({
      load,
      capacity: 100,
      mapLagMs: 2000,
      untilMs: 60_000,
      policy: { ...w6, targetPerShard: 75 },
    });
    // 400 / 75: six shards, which is 1.5x the four needed.
    expect(Math.max(...samples.map((s) => s.active))).toBe(6);
    expect(samples.at(-1)!.active).toBe(6);
  });

  it("follows a target set below the capacity and scales on the rate the shards took", () => {
    const { samples } = plant({
      load,
      capacity: 100,
      mapLagMs: 2000,
      untilMs: 60_000,
      policy: { ...w6, targetPerShard: 60 },
    });
    // 400 / 60: seven shards.
    expect(Math.max(...samples.map((s) => s.active))).toBe(7);
    expect(samples.at(-1)!.active).toBe(7);
  });

  it("drains back to the minimum within scaleInAfterMs and a heartbeat of the load stopping, and retires the drained shards", () => {
    const { samples, log, left } = plant({ load, capacity: 100, mapLagMs: 2000, untilMs: 90_000, policy: w6 });
    const drains = log.filter((a) => a.kind === "drain_shard");
    // Every shard above the minimum at once, when due (not at the next tick).
    expect(new Set(drains.map((a) => a.t)).size).toBe(1);
    expect(drains[0]!.t - 60_000).toBeLessThanOrEqual(w6.scaleInAfterMs + w6.heartbeatIntervalMs);
    expect(drains[0]!.t - 60_000).toBeGreaterThanOrEqual(w6.scaleInAfterMs);
    expect(samples.filter((s) => s.t > drains[0]!.t).every((s) => s.active === 1)).toBe(true);
    expect(left.map((s) => s.state)).toEqual(["active"]);
  });

  it("waits for reports from a full interval after its last change before it scales again", () => {
    // Five shards, just added at 0 s, report 120 msg/s each: sends held back go through at once.
    const beats = (receivedAt: number) => shards(5, 0, 0, { messagesIn: 120, periodMs: 1000, receivedAt });
    const changed: ScalingMemory = { lowSince: {}, lastChange: { r: 0 } };
    const policy75 = { ...w6, targetPerShard: 75 };
    // The period 0.9-1.9 s began within the first interval after the change: nothing yet.
    expect(decide(beats(1900), ["r"], policy75, changed, 2000).actions).toEqual([]);
    // 1.1-2.1 s and 2.1-3.1 s: 600 msg/s read, 500 counted (none above its capacity of 100), at 75 a shard: 7.
    const seen = decide(beats(2100), ["r"], policy75, changed, 2200);
    expect(decide(beats(3100), ["r"], policy75, seen.memory, 3200).actions).toEqual([
      expect.objectContaining({ kind: "add_shards", count: 2 }),
    ]);
  });

  it("says when a scale-in comes due, so the Coordinator decides then and not at its next tick", () => {
    const quiet = (at: number) => shards(4, 0, 0, { messagesIn: 0, periodMs: 1000, receivedAt: at });
    const first = decide(quiet(1000), ["r"], w6, empty, 1300);
    // Low since the report's period began (0 s): due at 10 s.
    expect(first).toMatchObject({ actions: [], wakeAt: 10_000 });
    expect(decide(quiet(10_000), ["r"], w6, first.memory, 10_000).actions.map((a) => a.kind)).toEqual([
      "drain_shard",
      "drain_shard",
      "drain_shard",
    ]);
  });

  describe("a region without a shard of its own (docs/cost.md, Regions)", () => {
    const home: ScalingPolicy = { ...policy, minPerRegion: { home: 1 } };
    // One home shard taking `away` msg/s of its load from region "far".
    const homeShard = (at: number, total: number, away: number): ShardView[] =>
      shards(1, total, at, { inFrom: { far: away * 5 } }, "home");

    it("gets one once its sends exceed 0.3 of the target in two readings in a row, and not on one reading or below", () => {
      const below = twice((at) => homeShard(at, 50, 29), home, empty, 1000, 6000, ["home", "far"]);
      expect(below.actions).toEqual([]);
      const one = decide(homeShard(1000, 50, 40), ["home", "far"], home, empty, 1000);
      expect(one.actions).toEqual([]);
      const { actions } = twice((at) => homeShard(at, 50, 40), home, empty, 1000, 6000, ["home", "far"]);
      expect(actions).toEqual([
        expect.objectContaining({
          kind: "add_shards",
          region: "far",
          count: 1,
          reason: expect.stringContaining("40 msg/s sent from far"),
        }),
      ]);
    });

    it("keeps its last shard while its own load stays above a tenth of that, drains it below, and never drains the home region's", () => {
      const farShard = (at: number, rate: number) => [
        ...shards(1, 0, at, {}, "home"),
        ...shards(1, rate, at, {}, "far"),
      ];
      let memory = empty;
      for (let t = 5000; t <= 60_000; t += 5000)
        memory = decide(farShard(t, 5), ["home", "far"], home, memory, t).memory;
      expect(decide(farShard(65_000, 5), ["home", "far"], home, memory, 65_000).actions).toEqual([]);
      memory = empty;
      let drained: ScalingAction[] = [];
      for (let t = 5000; t <= 60_000 && drained.length === 0; t += 5000) {
        const out = decide(farShard(t, 1), ["home", "far"], home, memory, t);
        memory = out.memory;
        drained = out.actions;
      }
      expect(drained).toEqual([expect.objectContaining({ kind: "drain_shard", region: "far", shard: "far0" })]);
    });
  });
});
