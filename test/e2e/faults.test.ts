// The fault-injection harness (test/faults) against `wrangler dev` (its checker's own
// tests, on hand-made histories, are in test/node/fault-checker.test.ts): the short run, 3,000
// messages through HTTP producers, pull consumers and a Worker consumer while the service
// is SIGKILLed three times and restarted on the same state, storage and consumer shards
// are reset through the test hooks, the Coordinator is reset mid-autoscale, alarms
// throw, a shard drains under a stale map and stored bodies are corrupted, with a 40 s
// quiet phase (producers stopped, a kill, a shard reset at the wake-up of delayed
// messages), the queues drained and the history checked. The seed is random unless SHARDQ_FAULTS_SEED is set;
// a failure prints the command that replays it. `npm run test:faults` runs the full version.
// Last, the short large-backlog run (`npm run test:faults -- --backlog --short`): 10,000
// messages of up to 128 KB wait with delivery paused while workerd's memory is sampled
// and every read answer is timed and weighed, then drain with nothing lost.
import { describe, expect, it } from "vitest";
import { backlogDefaults, backlogOut, backlogReplay, runBacklog } from "../faults/backlog.mjs";
import { check } from "../faults/checker.mjs";
import { runFaults } from "../faults/harness.mjs";
import { defaultOut, defaults, replayCommand } from "../faults/run-options.mjs";
import { readHistory } from "../faults/history.mjs";

describe("hard kills, storage and consumer shard resets, and control-plane faults under load", () => {
  it(
    "loses no acknowledged message across 3 SIGKILLs and 4 shard resets, quarantines the bodies corrupted at rest, stores nothing twice, delivers nothing unexpected, never after a confirmed ack, with exclusive leases",
    { timeout: 300_000 },
    async () => {
      const d = defaults("short");
      const seed = process.env.SHARDQ_FAULTS_SEED ? Number(process.env.SHARDQ_FAULTS_SEED) : d.seed;
      const o = { ...d, seed, out: defaultOut("short", seed), log: (line: string) => console.log(line) };
      const replay = `replay: ${replayCommand(o)} (history and report in ${o.out})`;
      const { result, meta } = await runFaults(o);
      const f = result.figures;
      // 3 kills under load, and one in the quiet phase (quiet-phases.mjs).
      expect(f.kills.count, replay).toBe(4);
      // Every abort tried fired; one due after the producers were done is skipped (and counted).
      expect(f.aborts.by_kind["abort-ack"]?.fired, replay).toBe(f.aborts.by_kind["abort-ack"]?.count);
      expect(f.aborts.by_kind["abort-append"]?.fired, replay).toBe(f.aborts.by_kind["abort-append"]?.count);
      expect(f.aborts.count + (f.operations.skipped?.ok ?? 0), replay).toBe(5);
      // The quiet phase: traffic stopped, the service killed and a shard reset at the wake-up; what
      // came due meanwhile was delivered within it, and no message stayed ready over 10 s while asked for.
      expect(f.quiet, replay).toMatchObject({
        phases: 1,
        planned: 1,
        delayed: 10,
        delivered_in_phase: 10,
        not_in_phase: 0,
      });
      expect(f.ready.too_long, replay).toBe(0);
      expect(f.stored_twice_same_id, replay).toBe(0);
      // Corrupted at rest: quarantined and reported, never delivered, never garbled, not lost.
      expect(f.quarantine.corrupted, replay).toBeGreaterThan(0);
      expect(f.quarantine, replay).toMatchObject({
        reported: f.quarantine.expected,
        delivered_after_corruption: 0,
        garbled_deliveries: 0,
      });
      expect(f.idempotent_retries.stored_under_two_ids, replay).toBe(0);
      expect(f.sent.ok, replay).toBeGreaterThan(2000);
      expect(f.lost, replay).toBe(0);
      expect(f.unexpected, replay).toBe(0);
      expect(f.wrong_id, replay).toBe(0);
      expect(f.delivered_after_ack, replay).toBe(0);
      expect(f.lease_overlaps, replay).toBe(0);
      expect(f.drained?.drained, replay).toBe(true);
      expect(f.poison.not_dead_lettered, replay).toBe(0);
      // The push path: the Worker consumer got its share, no two of its handlers held one
      // message at once, nothing came again after it acked it with no fault between, nothing
      // it retried or threw was dropped, and every consumer shard abort fired.
      expect(f.push.deliveries, replay).toBeGreaterThan(300);
      expect(f.push, replay).toMatchObject({ overlaps_while_up: 0, after_ack: 0, not_again: 0 });
      expect(f.push.consumer_aborts, replay).toMatchObject({ planned: 2, fired: f.push.consumer_aborts.count });
      expect(f.push.consumer_aborts.count + f.push.consumer_aborts.skipped, replay).toBe(2);
      // The control plane: a Coordinator reset mid-autoscale, alarms thrown, a stale map; each fired (or was skipped, with its reason) and recovered.
      expect(f.control?.count, replay).toBe(3);
      // The outbox and inbox workload: each increment a producer object committed was applied
      // exactly once by the consumer objects, across a kill of their Worker and shardq's faults.
      expect(f.outbox, replay).toMatchObject({ exact: true, producers: 4, kills: 1 });
      expect(f.outbox.committed, replay).toBeGreaterThan(200);
      expect(f.outbox.applied, replay).toBe(f.outbox.committed);
      expect(result.failures, replay).toEqual([]);
      // A bound on the run, not a speed target: a run that hangs fails here rather than at the timeout.
      expect(meta.total_s).toBeLessThan(200);

      // The checker sees a loss in this very history: drop one delivery of a message
      // delivered once, and it is reported lost.
      const ops = await readHistory(`${o.out}/history.jsonl`);
      const sentOk = new Set<string>();
      const sends = new Map<number, string[]>();
      const counts = new Map<string, number>();
      for (const op of ops) {
        if (op.f === "send" && op.type === "invoke") sends.set(op.op, op.value.hs);
        if (op.f === "send" && op.type === "ok") for (const h of sends.get(op.op) ?? []) sentOk.add(h);
        if (op.f === "pull" && op.type === "ok")
          for (const m of op.value.msgs) counts.set(m.h, (counts.get(m.h) ?? 0) + 1);
        if (op.f === "push" && op.type === "invoke")
          for (const m of op.value.msgs) counts.set(m.h, (counts.get(m.h) ?? 0) + 1);
      }
      const once = (m: { h: string; x?: 1 }) => sentOk.has(m.h) && counts.get(m.h) === 1 && !m.x;
      const victim = ops.find((op) => op.f === "pull" && op.type === "ok" && op.value.msgs.some(once));
      expect(victim).toBeDefined();
      const h: string = victim!.value.msgs.find(once).h;
      victim!.value.msgs = victim!.value.msgs.filter((m: { h: string }) => m.h !== h);
      const broken = check(ops);
      expect(broken.valid).toBe(false);
      expect(broken.examples.lost).toEqual([h]);
      // The same with a message a queue() handler was given.
      const pushVictim = ops.find((op) => op.f === "push" && op.type === "invoke" && op.value.msgs.some(once));
      expect(pushVictim).toBeDefined();
      const ph: string = pushVictim!.value.msgs.find(once).h;
      pushVictim!.value.msgs = pushVictim!.value.msgs.filter((m: { h: string }) => m.h !== ph);
      expect(new Set(check(ops).examples.lost)).toEqual(new Set([h, ph]));
      // And an effect the outbox workload lost: one producer's applications one short.
      const final = ops.find((op) => op.p === "outbox" && op.f === "final");
      expect(final?.value.producers[0].balance.distinct).toBeGreaterThan(0);
      final!.value.producers[0].balance.distinct -= 1;
      expect(check(ops).failures).toContain("outbox: 1 committed increments never applied");
    },
  );
});

describe("a large backlog", () => {
  it(
    "keeps workerd's memory bounded and every read answer paged while 10,000 messages of up to 128 KB wait, then drains them with nothing lost",
    { timeout: 300_000 },
    async () => {
      const d = backlogDefaults("short");
      const seed = process.env.SHARDQ_FAULTS_SEED ? Number(process.env.SHARDQ_FAULTS_SEED) : d.seed;
      const o = { ...d, seed, out: backlogOut("short", seed), log: (line: string) => console.log(line) };
      const replay = `replay: ${backlogReplay(o)} (history and report in ${o.out})`;
      const { ok, result, backlog, meta } = await runBacklog(o);
      expect(result.failures, replay).toEqual([]);
      expect(backlog.memory.failures, replay).toEqual([]);
      expect(backlog.paging.failures, replay).toEqual([]);
      expect(result.figures.sent.ok, replay).toBe(o.messages);
      expect(backlog.backlog.messages, replay).toBe(o.messages);
      // Some bodies near the 128 KB limit: the batches ran into the 256 KB one.
      expect(backlog.paging.pulls.all.max_bytes, replay).toBeGreaterThan(256_000);
      expect(result.figures.lost, replay).toBe(0);
      expect(result.figures.unexpected, replay).toBe(0);
      expect(result.figures.delivered_after_ack, replay).toBe(0);
      expect(result.figures.quarantine.garbled_deliveries, replay).toBe(0);
      expect(backlog.memory.samples, replay).toBeGreaterThan(5);
      expect(backlog.paging.pulls.at_full.pulls, replay).toBeGreaterThan(0);
      expect(backlog.drain.resume_to_empty_ms, replay).not.toBeNull();
      expect(ok, replay).toBe(true);
      expect(meta.total_s).toBeLessThan(120);
    },
  );
});
