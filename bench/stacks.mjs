// The shardq stacks the benchmark runs against: a `wrangler dev` of the driver Worker, the
// service (wrangler.toml with the variables a workload sets) and the sink, on a free loopback
// port, with the benchmark's queue and its consumer created.
import { join } from "node:path";
import { writeDevConfig } from "../cli/wrangler/dev-config.mjs";
import { ROOT, startWranglerOnFreePort } from "../cli/wrangler/dev-server.mjs";

const HEADERS = { authorization: "Bearer shardq-local-dev-token", "content-type": "application/json" };

/** @typedef {{ base: string, pid: number, queueId: string | null, stop: () => Promise<void> }} Stack */

/**
 * Starts a shardq whose service config is written to `file` (gitignored) with `vars`, its state
 * under `work`/`name`. `outside`: `file` is an absolute path outside shardq's root, where
 * wrangler finds no .dev.vars beside it (the caller's `vars` are then all the service gets).
 * @param {{ work: string, env: Record<string, string>, file: string, name: string, vars?: Record<string, string>, outside?: boolean }} o
 * @returns {Promise<Stack>}
 */
export async function startShardq({ work, env, file, name, vars, outside = false }) {
  const config = writeDevConfig({
    file: outside ? file : join(ROOT, file),
    consumers: [{ binding: "CONSUMER_BENCH_SINK", service: "bench-sink" }],
    ...(vars ? { vars } : {}),
    ...(outside ? { outsideRoot: true } : {}),
  });
  const stack = await startWranglerOnFreePort((port) => ({
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
      join(work, name),
      "--inspector-port",
      "0",
    ],
    readyUrl: `http://127.0.0.1:${port}/ready`,
    env,
  }));
  const base = `http://127.0.0.1:${stack.port}`;
  const queueId = await setUpShardq(base);
  return { base, pid: /** @type {number} */ (stack.pid), queueId, stop: () => stack.stop() };
}

/**
 * Creates the benchmark's queue and its consumer on a shardq (as the simulator's: same batch
 * size, wait and retries). Returns the queue's id.
 * @param {string} base @returns {Promise<string>}
 */
export async function setUpShardq(base) {
  const call = async (/** @type {string} */ path, /** @type {unknown} */ body) => {
    const res = await fetch(`${base}/shardq/accounts/local${path}`, {
      method: "POST",
      headers: HEADERS,
      body: JSON.stringify(body),
    });
    if (!res.ok && res.status !== 409) throw new Error(`shardq set-up ${path}: ${res.status} ${await res.text()}`);
  };
  await call("/queues", { queue_name: "bench" });
  // As the simulator's consumer: batches of 100, at most 1 s to fill, 3 retries.
  await call("/queues/bench/consumers", {
    type: "worker",
    script_name: "bench-sink",
    settings: { batch_size: 100, max_wait_time_ms: 1000, max_retries: 3, transport: "queue" },
  });
  const res = await fetch(`${base}/shardq/accounts/local/queues/bench`, { headers: HEADERS });
  if (!res.ok) throw new Error(`shardq set-up: GET /queues/bench: ${res.status} ${await res.text()}`);
  return /** @type {any} */ (await res.json()).result.queue_id;
}
