import { describe, expect, it } from "vitest";
import {
  BACKLOG_PER_CONSUMER_SHARD,
  deliveringNow,
  scaleConsumers,
  type ConsumerScalingInput,
} from "../../coordinator/consumer-scaler";
import type { ConsumerShardStatus } from "../../coordinator/heartbeats";

const NOW = 1_000_000;
const INTERVAL = 5000;

const input = (over: Partial<ConsumerScalingInput> = {}): ConsumerScalingInput => ({
  backlog: 0,
  maxConcurrency: 10,
  previous: 1,
  wake: "idle",
  reports: [],
  now: NOW,
  heartbeatIntervalMs: INTERVAL,
  random: 0,
  ...over,
});

/** Consumer shard `index`'s report, made `ago` ms before NOW. */
const report = (index: number, running: boolean, ago = 0): ConsumerShardStatus => ({
  index,
  running,
  delivered: 0,
  batches: 0,
  errors: 0,
  received_at: NOW - ago,
});

describe("consumer-shard scaler", () => {
  it("wants one consumer shard per BACKLOG_PER_CONSUMER_SHARD messages, at least one, at most max_concurrency", () => {
    expect(BACKLOG_PER_CONSUMER_SHARD).toBe(200);
    expect(scaleConsumers(input({ backlog: 0 })).wanted).toBe(1);
    expect(scaleConsumers(input({ backlog: 200 })).wanted).toBe(1);
    expect(scaleConsumers(input({ backlog: 201 })).wanted).toBe(2);
    expect(scaleConsumers(input({ backlog: 1000 })).wanted).toBe(5);
    expect(scaleConsumers(input({ backlog: 1_000_000, maxConcurrency: 3 })).wanted).toBe(3);
    expect(scaleConsumers(input({ backlog: 1_000_000, maxConcurrency: 1 })).wanted).toBe(1);
  });

  it("logs a change only when the number wanted moves, and says why", () => {
    expect(scaleConsumers(input({ backlog: 300, previous: 2 })).change).toBeNull();
    const up = scaleConsumers(input({ backlog: 1000, previous: 2, maxConcurrency: 4 }));
    expect(up.change).toEqual({
      kind: "add_consumers",
      reason: "backlog 1000: 4 consumer shard(s) at 200 messages each, max 4",
      figures: { backlog: 1000, consumerShards: 4, previous: 2, maxConcurrency: 4 },
    });
    const down = scaleConsumers(input({ backlog: 10, previous: 4 }));
    expect(down.change).toMatchObject({ kind: "remove_consumers", figures: { consumerShards: 1, previous: 4 } });
    // A queue's first decision: nothing wanted before.
    expect(scaleConsumers(input({ backlog: 0, previous: 0 })).change?.kind).toBe("add_consumers");
  });

  it("on a tick or heartbeat wakes the wanted shards not delivering now, and none past the number wanted", () => {
    const reports = [
      report(0, true),
      report(1, false),
      report(2, true, 3 * INTERVAL + 1),
      report(3, true, 3 * INTERVAL),
      report(7, false),
    ];
    // 1000 messages: shards 0-4. 0 and 3 are delivering (fresh reports); 2's report is stale.
    expect(scaleConsumers(input({ backlog: 1000, reports })).wake).toEqual([1, 2, 4]);
    // Shard 7 is past the number wanted: left to finish its round and stop.
    expect(scaleConsumers(input({ backlog: 1000, reports })).wake).not.toContain(7);
  });

  it("after a change of settings wakes every wanted shard, delivering or not", () => {
    const reports = [report(0, true), report(1, true)];
    expect(scaleConsumers(input({ backlog: 600, reports, wake: "all" })).wake).toEqual([0, 1, 2]);
  });

  it("for a shard's new messages wakes one wanted shard, picked at random, delivering or not", () => {
    const reports = [report(0, true), report(1, true), report(2, true)];
    const pick = (random: number) => scaleConsumers(input({ backlog: 600, reports, wake: "one", random })).wake;
    expect(pick(0)).toEqual([0]);
    expect(pick(0.5)).toEqual([1]);
    expect(pick(0.999)).toEqual([2]);
    expect(scaleConsumers(input({ backlog: 0, wake: "one", random: 0.999 })).wake).toEqual([0]);
  });

  it("counts a shard as delivering only while its report is running and at most three intervals old", () => {
    const reports = [
      report(0, true),
      report(1, false),
      report(2, true, 3 * INTERVAL),
      report(3, true, 3 * INTERVAL + 1),
    ];
    expect(deliveringNow(reports, NOW, INTERVAL).map((r) => r.index)).toEqual([0, 2]);
  });

  it("counts a shard that says until when it runs as delivering until then, however old its report (it reports every ~30 s)", () => {
    const old = 10 * INTERVAL;
    const reports = [
      { ...report(0, true, old), running_until: NOW + 1 },
      { ...report(1, true, old), running_until: NOW - 1 },
      { ...report(2, false, 0), running_until: null },
    ];
    expect(deliveringNow(reports, NOW, INTERVAL).map((r) => r.index)).toEqual([0]);
  });

  it("follows a backlog up and back down, one decision per change", () => {
    let previous = 0;
    const log: string[] = [];
    for (const backlog of [0, 50, 450, 450, 2000, 2000, 100, 0]) {
      const out = scaleConsumers(input({ backlog, previous, maxConcurrency: 8 }));
      if (out.change) log.push(`${out.change.kind} ${out.wanted}`);
      previous = out.wanted;
    }
    expect(log).toEqual(["add_consumers 1", "add_consumers 3", "add_consumers 8", "remove_consumers 1"]);
  });
});
