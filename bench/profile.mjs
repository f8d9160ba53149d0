// `npm run bench -- profile [--workload w1|w1b|w2|w8|w8u] [--count N] [--rate R] [--concurrency C] [--shards N] [--paused] [--observability]`: where
// shardq's CPU goes. Starts the benchmark's shardq stack (driver, service, sink) on
// loopback, runs one workload through the driver while `perf record` samples workerd
// (Debian's linux-perf; skipped with a note when perf is missing), and prints CPU per
// message of the stack's processes and workerd's hottest frames, self and inclusive.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { setUpShardq } from "./stacks.mjs";
import { W8 } from "./ordered.mjs";
import { groupCpuSeconds, groupPids } from "./scaling.mjs";
import { writeDevConfig } from "../cli/wrangler/dev-config.mjs";
import { freePort, ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";

export const PROFILE_HELP = `npm run bench -- profile [--workload w1|w1b|w2|w8|w8u] [--count N] [--rate R] [--concurrency C] [--shards N] [--paused] [--observability]
  Runs one workload against shardq alone under perf and prints CPU per message, send() latency and workerd's hottest frames.
  --workload     w1: send() with 256 in flight (default); w1b: the same through batchingQueue; w2: sendBatch() of 100;
                 w8: w2's sends with orderingKey from 10,000 keys (bench/ordered.mjs); w8u: the same sends and keys without orderingKey
  --count N      messages (default 20000)
  --rate R       send at R messages/s (an open loop, as workload 4) instead of as fast as they go
  --concurrency C calls in flight (default 256 for w1, 8 for w2)
  --shards N     storage shards, fixed (default: the benchmark stack's, which may scale)
  --paused       delivery paused: the cost of sending alone (the messages stay stored)
  --observability keep wrangler's local trace collector on (off by default, as everywhere else)`;

/** Frames worth naming in the inclusive view: what the time is spent on. */
const FRAMES =
  /TailStreamTarget::report|SqlStorage::exec|sqlite3_step|JsRpcTargetBase::callImpl|Heap::CollectGarbage|ValueSerializer|ValueDeserializer|IoContext::runImpl|transactionSync/;

/** @param {string[]} argv */
export async function profile(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      workload: { type: "string", default: "w1" },
      count: { type: "string", default: "20000" },
      rate: { type: "string", default: "0" },
      concurrency: { type: "string" },
      paused: { type: "boolean", default: false },
      shards: { type: "string" },
      observability: { type: "boolean", default: false },
    },
  });
  const count = Number(o.count);
  if (!Number.isInteger(count) || count < 100 || count > 1_000_000)
    throw new Error("--count must be an integer from 100 to 1000000");
  if (!["w1", "w1b", "w2", "w8", "w8u"].includes(o.workload))
    throw new Error('--workload must be "w1", "w1b", "w2", "w8" or "w8u"');
  const rate = Number(o.rate);
  if (!Number.isInteger(rate) || rate < 0 || rate > 100_000)
    throw new Error("--rate must be an integer from 0 (as fast as possible) to 100000");
  const batched = o.workload === "w2" || o.workload.startsWith("w8");
  const batch = batched ? W8.batch : 1;
  const concurrency = Number(o.concurrency ?? (batched ? W8.concurrency : 256));
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1000)
    throw new Error("--concurrency must be an integer from 1 to 1000");
  const work = mkdtempSync(join(tmpdir(), "shardq-profile-"));
  const port = await freePort();
  const shards =
    o.shards === undefined ? {} : { vars: { SHARDS_PER_REGION: o.shards, MAX_SHARDS_PER_REGION: o.shards } };
  const config = writeDevConfig({
    file: join(ROOT, "wrangler.bench.toml"),
    consumers: [{ binding: "CONSUMER_BENCH_SINK", service: "bench-sink" }],
    ...shards,
  });
  const stack = await startWrangler({
    args: [
      "-c",
      "bench/workers/driver/wrangler.shardq.toml",
      "-c",
      config,
      "-c",
      "bench/workers/sink/wrangler.shardq.toml",
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
    env: { WRANGLER_REGISTRY_PATH: join(work, "registry"), X_LOCAL_OBSERVABILITY: o.observability ? "true" : "false" },
  });
  const base = `http://127.0.0.1:${port}`;
  try {
    await setUpShardq(base);
    if (o.paused) {
      const res = await fetch(`${base}/shardq/accounts/local/queues/bench`, {
        method: "PATCH",
        headers: { authorization: "Bearer shardq-local-dev-token", "content-type": "application/json" },
        body: JSON.stringify({ settings: { delivery_paused: true } }),
      });
      if (!res.ok) throw new Error(`pausing delivery: ${res.status} ${await res.text()}`);
    }
    const pgid = /** @type {number} */ (stack.pid);
    const workerds = groupPids(pgid).filter((pid) => readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "workerd");
    const perfData = join(work, "perf.data");
    const havePerf = spawnSync("perf", ["--version"]).status === 0;
    const perf = havePerf
      ? spawn("perf", ["record", "-F", "499", "-g", "-o", perfData, "-p", workerds.join(",")], { stdio: "ignore" })
      : null;
    const cpu0 = groupCpuSeconds(pgid);
    const started = performance.now();
    const producer =
      o.workload === "w1b"
        ? "&producer=batching"
        : o.workload.startsWith("w8")
          ? `&keys=${W8.keys}&ordered=${o.workload === "w8" ? 1 : 0}`
          : "";
    const r = /** @type {any} */ (
      await (
        await fetch(`${base}/run?count=${count}&concurrency=${concurrency}&batch=${batch}&rate=${rate}${producer}`, {
          method: "POST",
        })
      ).json()
    );
    if (r.error) throw new Error(`driver: ${r.error}`);
    if (!o.paused)
      for (let s = await sink(base); s.distinct < count; s = await sink(base))
        await new Promise((res) => setTimeout(res, 50));
    const seconds = (performance.now() - started) / 1000;
    const cpu1 = groupCpuSeconds(pgid);
    if (perf) {
      perf.kill("SIGINT");
      await new Promise((res) => perf.once("exit", res));
    }
    console.log(
      `${o.workload}: ${count} messages sent${o.paused ? " (delivery paused)" : " and delivered"} in ${seconds.toFixed(2)} s (${Math.round(count / seconds)} msg/s)`,
    );
    if (cpu0 !== null && cpu1 !== null)
      console.log(
        `CPU of the stack's processes: ${(cpu1 - cpu0).toFixed(2)} s, ${Math.round(((cpu1 - cpu0) * 1e6) / count)} µs per message`,
      );
    const ms = /** @type {number[]} */ (r.latencies).sort((a, b) => a - b);
    const at = (/** @type {number} */ p) =>
      (ms[Math.min(ms.length - 1, Math.floor((p / 100) * ms.length))] ?? 0).toFixed(1);
    console.log(`${batch === 1 ? "send()" : "sendBatch()"} latency: p50 ${at(50)} ms, p99 ${at(99)} ms`);
    if (!perf) {
      console.log("perf is not installed (apt-get install linux-perf): no frame profile");
      return;
    }
    const report = (/** @type {string[]} */ args) =>
      spawnSync("perf", ["report", "-i", perfData, "--stdio", "-g", "none", ...args], {
        encoding: "utf8",
        maxBuffer: 1 << 28,
      })
        .stdout.split("\n")
        .filter((l) => /^\s+\d/.test(l));
    console.log("\nworkerd, self time (top 20):");
    for (const l of report(["--no-children", "--sort", "symbol"]).slice(0, 20)) console.log(l.slice(0, 160));
    console.log("\nworkerd, inclusive time of the frames that say where it goes:");
    const seen = new Set();
    for (const l of report(["--children", "--sort", "symbol"])) {
      const m = l.match(FRAMES);
      if (m && !seen.has(m[0])) {
        seen.add(m[0]);
        console.log(`${l.trim().split(/\s+/)[0]}  ${m[0]}`);
      }
    }
  } finally {
    await stack.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

/** @param {string} base */
async function sink(base) {
  return /** @type {any} */ (await (await fetch(`${base}/sink/stats`)).json());
}
