// `npm run bench -- ceiling`: what one storage shard can take on this machine with nothing
// else running. A `wrangler dev` of its own runs shardq (idle: no queue, no consumer) and
// the ceiling Worker (bench/workers/ceiling), which binds shardq's StorageShard class by
// script_name, activates one shard under a queue nothing else uses, and keeps append()
// calls in flight for a fixed time: batches of 100 messages of 128 bytes, then single
// messages. Every figure of `compare` can be read as a fraction of these.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { writeDevConfig } from "../cli/wrangler/dev-config.mjs";
import { freePort, ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";
import { groupCpuSeconds } from "./scaling.mjs";

export const CEILING_HELP = `npm run bench -- ceiling [--seconds N] [--inflight K] [--bytes B]
  One storage shard alone: append() batches of 100 messages, then single messages, as fast as
  the object takes them, for N seconds each (default 10; single messages N/2), K calls in flight
  (default 8), B-byte bodies (default 128). Prints messages/s, CPU µs per message (every process
  of its wrangler dev) and rows written per message (the shard's stats()).`;

/**
 * @typedef {{ batch: number, inflight: number, bytes: number, seconds: number, calls: number, appended: number,
 *   msgs_per_s: number, cpu_us_per_msg: number | null, rows_written_per_msg: number, rows_read_per_msg: number,
 *   append_p50_ms: number | null, append_p99_ms: number | null, refused?: string }} CeilingRun
 */

/** @param {string[]} argv */
export async function ceilingCommand(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: { seconds: { type: "string" }, inflight: { type: "string" }, bytes: { type: "string" } },
  });
  const result = await ceiling({
    seconds: Number(o.seconds ?? 10),
    inflight: Number(o.inflight ?? 8),
    bytes: Number(o.bytes ?? 128),
  });
  console.log(JSON.stringify(result, null, 2));
  console.log(`\n${ceilingMarkdown(result)}`);
  return result;
}

/**
 * Starts its own `wrangler dev`, measures a batch-of-100 run and a single-message run on a fresh
 * shard each, and stops it.
 * @param {{ seconds?: number, inflight?: number, bytes?: number }} [opts]
 * @returns {Promise<{ batch: CeilingRun, single: CeilingRun }>}
 */
export async function ceiling({ seconds = 10, inflight = 8, bytes = 128 } = {}) {
  if (!(seconds > 0 && seconds <= 600)) throw new Error("--seconds must be from 1 to 600");
  if (!(Number.isInteger(inflight) && inflight >= 1 && inflight <= 256))
    throw new Error("--inflight must be an integer from 1 to 256");
  if (!(Number.isInteger(bytes) && bytes >= 1 && bytes <= 128_000))
    throw new Error("--bytes must be an integer from 1 to 128000");
  const work = mkdtempSync(join(tmpdir(), "shardq-ceiling-"));
  const port = await freePort();
  // shardq as local dev runs it, with no consumer Worker bound: nothing but the shard works.
  const config = writeDevConfig({ file: join(ROOT, "wrangler.bench-ceiling.toml"), consumers: [] });
  const stack = await startWrangler({
    args: [
      "-c",
      "bench/workers/ceiling/wrangler.toml",
      "-c",
      config,
      "--port",
      String(port),
      "--ip",
      "127.0.0.1",
      "--persist-to",
      join(work, "state"),
      "--inspector-port",
      "0",
    ],
    readyUrl: `http://127.0.0.1:${port}/ready`,
    env: { WRANGLER_REGISTRY_PATH: join(work, "registry") },
  });
  try {
    const base = `http://127.0.0.1:${port}`;
    const pid = /** @type {number} */ (stack.pid);
    // A short warm-up, so that compiling and the first object's start-up are not measured.
    await run(base, pid, { seconds: Math.min(1, seconds), batch: 100, inflight, bytes });
    const batch = await run(base, pid, { seconds, batch: 100, inflight, bytes });
    const single = await run(base, pid, { seconds: Math.max(1, seconds / 2), batch: 1, inflight, bytes });
    return { batch, single };
  } finally {
    await stack.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * One run on a fresh shard, with the CPU of every process of the `wrangler dev` (workerd runs the
 * shard and the driver both, on one thread) over it.
 * @param {string} base @param {number} pid @param {{ seconds: number, batch: number, inflight: number, bytes: number }} p
 * @returns {Promise<CeilingRun>}
 */
async function run(base, pid, p) {
  const cpu0 = groupCpuSeconds(pid);
  const res = await fetch(`${base}/run?seconds=${p.seconds}&batch=${p.batch}&inflight=${p.inflight}&bytes=${p.bytes}`, {
    method: "POST",
  });
  const r = /** @type {any} */ (await res.json());
  const cpu1 = groupCpuSeconds(pid);
  if (!res.ok || r.error) throw new Error(`ceiling driver: ${res.status} ${JSON.stringify(r)}`);
  const n = Math.max(1, r.appended);
  return {
    batch: p.batch,
    inflight: p.inflight,
    bytes: p.bytes,
    seconds: round(r.seconds, 2),
    calls: r.calls,
    appended: r.appended,
    msgs_per_s: Math.round(r.appended / r.seconds),
    cpu_us_per_msg: cpu0 !== null && cpu1 !== null ? round(((cpu1 - cpu0) * 1e6) / n, 1) : null,
    // The shard's own counters; its stats() read after the run is one RPC and no row written.
    rows_written_per_msg: round((r.after.rowsWritten - r.before.rowsWritten) / n, 3),
    rows_read_per_msg: round(((r.after.rowsRead ?? 0) - (r.before.rowsRead ?? 0)) / n, 3),
    append_p50_ms: r.append_ms.p50,
    append_p99_ms: r.append_ms.p99,
    ...(r.refused ? { refused: r.refused } : {}),
  };
}

/** The ceiling as the report shows it. @param {{ batch: CeilingRun, single: CeilingRun }} c */
export function ceilingMarkdown(c) {
  const line = (/** @type {string} */ what, /** @type {CeilingRun} */ r) =>
    `| ${what} | ${r.msgs_per_s.toLocaleString("en-US")} | ${r.cpu_us_per_msg ?? "–"} | ${r.rows_written_per_msg} | ${r.rows_read_per_msg} | ${r.append_p50_ms} / ${r.append_p99_ms} | ${r.inflight} | ${r.seconds} |`;
  return [
    "### Ceiling: one storage shard alone",
    "",
    '`npm run bench -- ceiling`: one StorageShard object taking append() calls as fast as it can, nothing else running (bench/README.md, "Ceiling").',
    "",
    "| append | msg/s | CPU µs per message | rows written per message | rows read per message | append p50 / p99 ms | calls in flight | seconds |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    line(`batches of ${c.batch.batch}, ${c.batch.bytes}-byte bodies`, c.batch),
    line(`single messages, ${c.single.bytes}-byte bodies`, c.single),
  ].join("\n");
}

/** @param {number} x @param {number} digits */
const round = (x, digits) => Math.round(x * 10 ** digits) / 10 ** digits;
