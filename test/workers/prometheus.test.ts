import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import {
  cumulativeBuckets,
  emptyCounts,
  observe,
  SendLatencyBuffer,
  type WaitUntil,
} from "../../broker/metrics/latency-histogram";
import { Exposition, EXPOSITION_CONTENT_TYPE } from "../../broker/metrics/prometheus";
import type { Coordinator } from "../../coordinator/coordinator";
import { carryForgottenShard, queueCounters } from "../../coordinator/counters";
import { recordStorageBeat } from "../../coordinator/heartbeats";
import { MIGRATIONS } from "../../coordinator/schema";
import { readSendLatency, recordSendLatency } from "../../coordinator/send-latency";
import { meteredSql, newMeter, settleReads } from "../../src/kernel/sql-meter";
import { runMigrations } from "../../src/kernel/sqlite-migrations";
import type { Env } from "../../src/kernel/env";
import type { DeliveryTotals, SendLatencyCounts } from "../../src/kernel/figures";
import type { StorageHeartbeat } from "../../src/kernel/heartbeat";
import { parseExposition, valueOf } from "./exposition";

describe("the Prometheus text format writer", () => {
  it("escapes label values and HELP text so a scraper reads back exactly what was written", () => {
    const nasty = 'a "quoted" back\\slash\nnew line, {braces} = 1';
    const text = new Exposition()
      .declare("shardq_test_gauge", "gauge", 'Help with a back\\slash\nand a line feed, "quotes" kept.')
      .gauge("shardq_test_gauge", { queue: nasty }, 1.5)
      .gauge("shardq_test_gauge", { queue: "plain" }, 0)
      .text();
    expect(text).toContain('queue="a \\"quoted\\" back\\\\slash\\nnew line, {braces} = 1"');
    expect(text.split("\n").filter((l) => l.startsWith("shardq_test_gauge"))).toHaveLength(2);
    const families = parseExposition(text);
    expect(families.get("shardq_test_gauge")!.help).toBe('Help with a back\\slash\nand a line feed, "quotes" kept.');
    expect(valueOf(families, "shardq_test_gauge", { queue: nasty })).toBe(1.5);
    expect(valueOf(families, "shardq_test_gauge", { queue: "plain" })).toBe(0);
  });

  it("keeps each family's lines together in declaration order, whatever order samples come in", () => {
    const out = new Exposition()
      .declare("b_total", "counter", "B.")
      .declare("a", "gauge", "A.")
      .declare("empty", "gauge", "No samples.");
    out
      .gauge("a", { q: "1" }, 1)
      .counter("b_total", { q: "1" }, 10)
      .gauge("a", { q: "2" }, 2)
      .counter("b_total", { q: "2" }, 20);
    expect(out.text()).toBe(
      [
        "# HELP b_total B.",
        "# TYPE b_total counter",
        'b_total{q="1"} 10',
        'b_total{q="2"} 20',
        "# HELP a A.",
        "# TYPE a gauge",
        'a{q="1"} 1',
        'a{q="2"} 2',
        "# HELP empty No samples.",
        "# TYPE empty gauge",
        "",
      ].join("\n"),
    );
    expect(EXPOSITION_CONTENT_TYPE).toBe("text/plain; version=0.0.4; charset=utf-8");
  });

  it("writes histograms as cumulative buckets ending at +Inf = _count, with _sum", () => {
    const text = new Exposition()
      .declare("lat_seconds", "histogram", "Latency.")
      .histogram(
        "lat_seconds",
        { queue: "q" },
        {
          buckets: [
            { le: 0.005, count: 1 },
            { le: 1, count: 3 },
            { le: Infinity, count: 4 },
          ],
          sum: 7.25,
          count: 4,
        },
      )
      .text();
    expect(text).toBe(
      [
        "# HELP lat_seconds Latency.",
        "# TYPE lat_seconds histogram",
        'lat_seconds_bucket{queue="q",le="0.005"} 1',
        'lat_seconds_bucket{queue="q",le="1"} 3',
        'lat_seconds_bucket{queue="q",le="+Inf"} 4',
        'lat_seconds_sum{queue="q"} 7.25',
        'lat_seconds_count{queue="q"} 4',
        "",
      ].join("\n"),
    );
    expect(() => parseExposition(text)).not.toThrow();
  });

  it("refuses what would make invalid output", () => {
    const out = new Exposition()
      .declare("ok_total", "counter", "x")
      .declare("g", "gauge", "x")
      .declare("h", "histogram", "x");
    expect(() => out.declare("bad-name", "gauge", "x")).toThrow(/invalid metric name/);
    expect(() => out.declare("g", "counter", "x")).toThrow(/declared as gauge/);
    expect(() => out.gauge("undeclared", {}, 1)).toThrow(/not declared/);
    expect(() => out.gauge("ok_total", {}, 1)).toThrow(/is a counter/);
    expect(() => out.declare("c", "counter", "x").counter("c", {}, 1)).toThrow(/_total/);
    expect(() => out.gauge("g", { "bad-label": "v" }, 1)).toThrow(/invalid label name/);
    expect(() => out.gauge("g", { __reserved: "v" }, 1)).toThrow(/invalid label name/);
    expect(() =>
      out.histogram(
        "h",
        {},
        {
          buckets: [
            { le: 1, count: 3 },
            { le: 2, count: 2 },
          ],
          sum: 1,
          count: 3,
        },
      ),
    ).toThrow(/cumulative/);
    expect(() => out.histogram("h", {}, { buckets: [{ le: 1, count: 5 }], sum: 1, count: 3 })).toThrow(/at most count/);
    expect(() => out.histogram("h", { le: "1" }, { buckets: [], sum: 0, count: 0 })).toThrow(/reserved/);
  });

  it("the test's reader rejects broken text, so the endpoint test can fail", () => {
    expect(() => parseExposition("# HELP a x\n# TYPE a gauge\na 1")).toThrow(/line feed/);
    expect(() => parseExposition("# TYPE a gauge\na 1\n")).toThrow(/without its HELP/);
    expect(() => parseExposition("a 1\n")).toThrow(/before its family/);
    expect(() => parseExposition('# HELP a x\n# TYPE a gauge\na{q="x\\t"} 1\n')).toThrow(/bad escape/);
    expect(() => parseExposition("# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\na 2\n")).toThrow(
      /outside its family/,
    );
    expect(() => parseExposition("# HELP a x\n# TYPE a counter\na 1\n")).toThrow(/_total/);
    const h = (lines: string[]) => `# HELP h x\n# TYPE h histogram\n${lines.join("\n")}\n`;
    expect(() => parseExposition(h(['h_bucket{le="1"} 2', 'h_bucket{le="+Inf"} 1', "h_sum 1", "h_count 1"]))).toThrow(
      /cumulative/,
    );
    expect(() => parseExposition(h(['h_bucket{le="1"} 1', 'h_bucket{le="+Inf"} 2', "h_sum 1", "h_count 3"]))).toThrow(
      /_count/,
    );
    expect(() => parseExposition(h(['h_bucket{le="1"} 1', "h_sum 1", "h_count 1"]))).toThrow(/\+Inf/);
  });
});

describe("send latency counts", () => {
  it("go to the first bucket whose bound is at least the latency, and read back cumulative", () => {
    const c = emptyCounts();
    for (const s of [0, 0.0004, 0.001, 0.0011, 0.003, 0.7, 20]) observe(c, s);
    expect(c.buckets).toEqual({ "0.001": 3, "0.0025": 1, "0.005": 1, "1": 1, "+Inf": 1 });
    expect(c.count).toBe(7);
    expect(c.sumSeconds).toBeCloseTo(20.7055, 6);
    const h = cumulativeBuckets(c);
    expect(h.count).toBe(7);
    expect(h.buckets[0]).toEqual({ le: 0.001, count: 3 });
    expect(h.buckets.find((b) => b.le === 0.5)).toEqual({ le: 0.5, count: 5 });
    expect(h.buckets.find((b) => b.le === 10)).toEqual({ le: 10, count: 6 });
    expect(h.buckets.at(-1)).toEqual({ le: Infinity, count: 7 });
  });

  it("are flushed by an isolate at most once per interval, in waitUntil, and kept when a flush fails", async () => {
    const writes: SendLatencyCounts[] = [];
    let fail = false;
    const buffer = new SendLatencyBuffer({
      intervalMs: 20,
      quietMs: 10,
      write: async (_env, _account, _queue, counts) => {
        if (fail) throw new Error("coordinator unavailable");
        writes.push(counts);
      },
    });
    const waited: Array<Promise<unknown>> = [];
    const ctx: WaitUntil = { waitUntil: (p) => void waited.push(p) };
    const target = { accountId: "acct", queueRef: "q" };
    const fakeEnv = {} as Env;

    // Three sends in a row: one flush scheduled, carrying all three.
    buffer.observe(fakeEnv, ctx, target, 0.002);
    buffer.observe(fakeEnv, ctx, target, 0.002);
    buffer.observe(fakeEnv, ctx, target, 3);
    expect(waited).toHaveLength(1);
    expect(writes).toHaveLength(0); // nothing on the send's path
    await waited[0];
    expect(writes).toHaveLength(1);
    expect(writes[0]).toMatchObject({ buckets: { "0.0025": 2, "5": 1 }, count: 3 });
    expect(writes[0]!.sumSeconds).toBeCloseTo(3.004, 9);

    // A failed flush keeps its counts for the next one.
    fail = true;
    buffer.observe(fakeEnv, ctx, target, 0.5);
    expect(waited).toHaveLength(2);
    await waited[1];
    expect(buffer.pending("acct", "q")?.count).toBe(1);
    fail = false;
    buffer.observe(fakeEnv, ctx, target, 0.5);
    await buffer.flush("acct"); // what a scrape does: write now, from its own request
    expect(writes[1]).toEqual({ buckets: { "0.5": 2 }, sumSeconds: 1, count: 2 });
    expect(buffer.pending("acct", "q")?.count).toBe(0);
    await Promise.all(waited);
    expect(writes).toHaveLength(2);
  });

  it("are written once an interval while sends go on and once when they stop, not every few sends", async () => {
    const writes: SendLatencyCounts[] = [];
    let t = 0;
    const buffer = new SendLatencyBuffer({
      intervalMs: 60_000,
      quietMs: 20,
      now: () => t,
      write: async (_env, _account, _queue, counts) => void writes.push(counts),
    });
    const waited: Array<Promise<unknown>> = [];
    const ctx: WaitUntil = { waitUntil: (p) => void waited.push(p) };
    const target = { accountId: "acct", queueRef: "q" };
    // The first send is written at once; then a send every 2 ms (of this clock) for 50 ms.
    buffer.observe({} as Env, ctx, target, 0.01);
    await waited[0];
    expect(writes).toHaveLength(1);
    for (t = 2; t <= 50; t += 2) buffer.observe({} as Env, ctx, target, 0.01);
    // A quiet timer every half quiet period, of which only the newest writes once it fires.
    expect(waited.length).toBeLessThanOrEqual(1 + 50 / 10 + 1);
    await Promise.all(waited);
    expect(writes).toHaveLength(2);
    expect(writes[1]!.count).toBe(25);
    // An interval on, the next send is written at once.
    t = 60_050;
    buffer.observe({} as Env, ctx, target, 0.01);
    await Promise.all(waited);
    expect(writes).toHaveLength(3);
    expect(writes[2]!.count).toBe(1);
  });

  it("wait for a trickle's interval, or its count of sends, before writing while sends go on", async () => {
    const writes: SendLatencyCounts[] = [];
    let t = 0;
    const buffer = new SendLatencyBuffer({
      intervalMs: 60_000,
      quietMs: 10_000,
      trickle: { sends: 600, intervalMs: 300_000 },
      now: () => t,
      write: async (_env, _account, _queue, counts) => void writes.push(counts),
    });
    const waited: Array<Promise<unknown>> = [];
    const ctx: WaitUntil = { waitUntil: (p) => void waited.push(p) };
    const target = { accountId: "acct", queueRef: "q" };
    const fakeEnv = {} as Env;
    buffer.observe(fakeEnv, ctx, target, 0.01);
    await Promise.all(waited);
    expect(writes).toHaveLength(1);
    // A send a second: none written at one minute, nor at four; the five minutes' at five.
    for (t = 1000; t < 300_000; t += 1000) buffer.observe(fakeEnv, ctx, target, 0.01);
    expect(writes).toHaveLength(1);
    t = 300_000;
    buffer.observe(fakeEnv, ctx, target, 0.01);
    await new Promise((r) => setTimeout(r, 0));
    expect(writes).toHaveLength(2);
    expect(writes[1]!.count).toBe(300);
    // 600 sends within the next minute: written once the minute is over, not the five.
    for (let i = 0; i < 600; i++) buffer.observe(fakeEnv, ctx, target, 0.01);
    t = 360_000;
    buffer.observe(fakeEnv, ctx, target, 0.01);
    await new Promise((r) => setTimeout(r, 0));
    expect(writes).toHaveLength(3);
    expect(writes[2]!.count).toBe(601);
  });
});

describe("a queue's cumulative figures in its Coordinator", () => {
  const totals = (t: Partial<DeliveryTotals>): DeliveryTotals => ({
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
    ...t,
  });
  const beat = (shard: string, sentAt: number, t: Partial<DeliveryTotals>): StorageHeartbeat => ({
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
    sentAt,
    totals: totals(t),
    cost: { rpcs: 0, rowsWritten: 0 },
  });

  it("counters never go down: not when a shard restarts with fewer counts, nor when a retired shard is forgotten", async () => {
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName("counters-unit"));
    await runInDurableObject(coordinator, (_obj: Coordinator, state) => {
      const sql = state.storage.sql;
      recordStorageBeat(sql, beat("s1", 1, { stored: 100, acked: 90 }), 1);
      recordStorageBeat(sql, beat("s2", 1, { stored: 50, acked: 10 }), 1);
      expect(queueCounters(sql)).toMatchObject({ stored: 150, acked: 100, retried: 0 });
      // s1 restarts: its last second of counts was never written; it reports less.
      recordStorageBeat(sql, beat("s1", 2, { stored: 97, acked: 88 }), 2);
      expect(queueCounters(sql)).toMatchObject({ stored: 150, acked: 100 });
      recordStorageBeat(sql, beat("s1", 3, { stored: 105, acked: 95 }), 3);
      expect(queueCounters(sql)).toMatchObject({ stored: 158, acked: 107 });
      // A report older than the one on file is no restart: nothing is carried for it.
      recordStorageBeat(sql, beat("s2", 0, { stored: 40, acked: 5 }), 4);
      recordStorageBeat(sql, beat("s2", 5, { stored: 50, acked: 10 }), 5);
      expect(queueCounters(sql)).toMatchObject({ stored: 158, acked: 107 });
      // s1 is retired and forgotten (control-loop.ts pruneRetired): its counts stay.
      carryForgottenShard(sql, "s1");
      sql.exec("DELETE FROM heartbeats WHERE name = 's1'");
      expect(queueCounters(sql)).toMatchObject({ stored: 158, acked: 107 });
    });
  });

  it("the send latency histogram adds up flushes and refuses a malformed one whole", async () => {
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName("latency-unit"));
    await runInDurableObject(coordinator, (_obj: Coordinator, state) => {
      const sql = state.storage.sql;
      recordSendLatency(sql, { buckets: { "0.005": 2, "+Inf": 1 }, sumSeconds: 12.5, count: 3 });
      recordSendLatency(sql, { buckets: { "0.005": 1 }, sumSeconds: 0.004, count: 1 });
      expect(() => recordSendLatency(sql, { buckets: { "0.005": 1 }, sumSeconds: 0.004, count: 2 })).toThrow(
        /not the sum/,
      );
      expect(() => recordSendLatency(sql, { buckets: { _sum: 1 }, sumSeconds: 0, count: 1 })).toThrow(/bad bucket/);
      expect(() => recordSendLatency(sql, { buckets: { "1": -1 }, sumSeconds: 0, count: -1 })).toThrow(/bad bucket/);
      expect(() => recordSendLatency(sql, { buckets: { "1": 1 }, sumSeconds: NaN, count: 1 })).toThrow(/bad sum/);
      const read = readSendLatency(sql);
      expect(read).toMatchObject({ buckets: { "0.005": 3, "+Inf": 1 }, count: 4 });
      expect(Object.keys(read.buckets)).toHaveLength(2);
      expect(read.sumSeconds).toBeCloseTo(12.504, 9);
      // A report of many buckets is one row written, not one a bucket.
      const meter = newMeter();
      recordSendLatency(meteredSql(sql, meter), {
        buckets: { "0.001": 1, "0.005": 1, "0.01": 1, "0.05": 1, "+Inf": 1 },
        sumSeconds: 0.1,
        count: 5,
      });
      settleReads(meter);
      expect(meter.rowsWritten).toBe(1);
      expect(readSendLatency(sql).count).toBe(9);
    });
  });

  it("keeps the send latency a Coordinator recorded a row per bucket, across the step that makes it one row", async () => {
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName("latency-upgrade"));
    await runInDurableObject(coordinator, (_obj: Coordinator, state) => {
      const sql = state.storage.sql;
      // The Coordinator as the step before left it: the table of a row per bucket.
      sql.exec("DROP TABLE send_latency_histogram");
      sql.exec("CREATE TABLE send_latency (le TEXT PRIMARY KEY, n REAL NOT NULL)");
      sql.exec("INSERT INTO send_latency (le, n) VALUES ('0.005', 3), ('+Inf', 1), ('_sum', 12.5)");
      sql.exec("UPDATE schema_version SET version = ?", MIGRATIONS.length - 1);
      runMigrations(sql, MIGRATIONS);
      expect(readSendLatency(sql)).toEqual({ buckets: { "0.005": 3, "+Inf": 1 }, sumSeconds: 12.5, count: 4 });
      expect(sql.exec("SELECT name FROM sqlite_master WHERE name = 'send_latency'").toArray()).toEqual([]);
    });
  });
});
