// The workloads of `npm run bench -- compare`: each names the systems it runs on (the
// simulator only where it has an equivalent), its counts scaled down for --quick.
import { w8Workloads } from "./ordered.mjs";
import { W6 } from "./scaling.mjs";

/** w7: a steady rate this machine holds with room to spare at any shard count, sent to queues pinned at these shard counts. */
const W7_RATE = 1000;
const W7_SHARDS = [1, 12];

/**
 * @typedef {{ id: string, name: string, count: number, concurrency: number, batch: number, systems: string[], rate?: number, seconds?: number, backlog?: number, producer?: string, pinned?: number, keys?: number, ordered?: boolean, sleepMs?: number, pairedWith?: string }} Workload
 */

/**
 * The workloads a run makes, those `only` names (null: every one). w5, w7 and w8 name their
 * whole family (every backlog size, every shard count, the pair and the hot key).
 * @param {boolean} quick @param {Set<string> | null} only @returns {Workload[]}
 */
export function compareWorkloads(quick, only) {
  for (const id of only ?? [])
    if (!/^(w[1-8]|w1b)$/.test(id)) throw new Error(`--only: unknown workload "${id}" (w1, w1b, w2 to w8)`);
  if (only?.has("w4") && !only.has("w1")) throw new Error("--only: w4 needs w1, which measures the rate w4 sends at");
  const scale = quick ? 0.1 : 1;
  return /** @type {Workload[]} */ (
    [
      {
        id: "w1",
        name: "send() from a Worker, 256 in flight",
        count: Math.round(20_000 * scale),
        concurrency: 256,
        batch: 1,
        systems: ["simulator", "shardq"],
      },
      // w1's sends through shardq/producer's batchingQueue, on both: the helper wraps any Queue binding.
      {
        id: "w1b",
        name: "w1 through batchingQueue (shardq/producer)",
        count: Math.round(20_000 * scale),
        concurrency: 256,
        batch: 1,
        producer: "batching",
        systems: ["simulator", "shardq"],
      },
      {
        id: "w2",
        name: "sendBatch() of 100",
        count: Math.round(50_000 * scale),
        concurrency: 8,
        batch: 100,
        systems: ["simulator", "shardq"],
      },
      {
        id: "w3",
        name: "HTTP POST of single messages (no simulator equivalent)",
        count: Math.round(5_000 * scale),
        concurrency: 32,
        batch: 1,
        systems: ["shardq"],
      },
      // Its rate is set once w1 has measured shardq's maximum: half of it, for 30 s (3 s quick).
      {
        id: "w4",
        name: "send() at half of shardq's w1 maximum",
        count: 0,
        concurrency: 256,
        batch: 1,
        rate: 0,
        seconds: quick ? 3 : 30,
        systems: ["simulator", "shardq"],
      },
      ...(quick ? [1_000, 10_000] : [1_000, 100_000, 1_000_000]).map((backlog) => ({
        id: `w5-${backlog >= 1e6 ? `${backlog / 1e6}M` : `${backlog / 1e3}k`}`,
        name: `consuming a backlog of ${backlog.toLocaleString("en-US")} (no simulator equivalent)`,
        backlog,
        count: backlog,
        concurrency: 8,
        batch: 100,
        systems: ["shardq"],
      })),
      // A load phase long enough to show the rate held within 30 s, then a stop phase until the queue is back at its minimum.
      {
        id: "w6",
        name: `send() at ${W6.rate} msg/s against shards of ${W6.capacity} msg/s from ${W6.minShards}, then none (no simulator equivalent)`,
        count: 0,
        concurrency: 0,
        batch: 1,
        rate: W6.rate,
        seconds: quick ? 12 : 45,
        systems: ["shardq"],
      },
      ...W7_SHARDS.map((shards) => ({
        id: `w7-${shards}`,
        name: `send() at ${W7_RATE} msg/s for ${quick ? 3 : 20} s, shardq pinned at ${shards} storage shard${shards === 1 ? "" : "s"}`,
        count: W7_RATE * (quick ? 3 : 20),
        concurrency: 256,
        batch: 1,
        rate: W7_RATE,
        seconds: quick ? 3 : 20,
        pinned: shards,
        systems: ["simulator", "shardq"],
      })),
      // Ordered lanes: bench/ordered.mjs.
      ...w8Workloads(quick),
    ].filter((w) => !only || only.has(/^w[578]-/.test(w.id) ? w.id.slice(0, 2) : w.id))
  );
}
