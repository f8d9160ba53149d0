// `npm start`: the shardq service on :8787 (state in .wrangler/state) with the example
// consumer in the same process (its queue() handler is reached through a service
// binding, which must stay in-process), and the example producer on :8788, bound to
// the service's QueueProducer entrypoint. Then applies shardq.config.json (queues and
// their consumers). Ctrl-C stops everything.
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { applyConfig } from "../cli/workers/apply-config.mjs";
import { writeDevConfig } from "../cli/wrangler/dev-config.mjs";
import { ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";

const port = Number(process.env.SHARDQ_PORT ?? 8787);
const producerPort = Number(process.env.SHARDQ_PRODUCER_PORT ?? 8788);
const token = process.env.SHARDQ_TOKEN ?? "shardq-local-dev-token";
const base = `http://localhost:${port}`;

/** @param {string} name */
const prefix = (name) => (/** @type {string} */ line) => console.log(`[${name}] ${line}`);

// The producer finds the service through wrangler's dev registry. A project-local
// registry keeps other wrangler sessions out of it, and an entry left by a wrangler
// that was killed (not stopped) would shadow the new service, so it is cleared.
const registry = join(ROOT, ".wrangler", "registry");
mkdirSync(registry, { recursive: true });
for (const worker of ["shardq", "shardq-example-producer", "shardq-example-consumer"])
  rmSync(join(registry, worker), { force: true });
const env = { WRANGLER_REGISTRY_PATH: registry };

// Tunables from the environment, e.g. `SHARD_CAPACITY_PER_SECOND=50 npm start` to watch the autoscaler.
const TUNABLES = [
  "SHARD_CAPACITY_PER_SECOND",
  "TARGET_MESSAGES_PER_SHARD",
  "MAX_SHARDS_PER_REGION",
  "SHARDS_PER_REGION",
  "HEARTBEAT_INTERVAL_MS",
  "SCALE_IN_AFTER_MS",
];
const vars = TUNABLES.filter((name) => process.env[name]).flatMap((name) => ["--var", `${name}:${process.env[name]}`]);

const service = await startWrangler({
  args: [
    "-c",
    writeDevConfig(),
    "-c",
    "examples/consumer/wrangler.toml",
    "--port",
    String(port),
    "--persist-to",
    ".wrangler/state",
    ...vars,
  ],
  readyUrl: `${base}/`,
  log: prefix("shardq"),
  env,
});
const producer = await startWrangler({
  args: [
    "-c",
    "examples/producer/wrangler.toml",
    "--port",
    String(producerPort),
    "--persist-to",
    ".wrangler/producer-state",
    "--inspector-port",
    "0",
  ],
  readyUrl: `http://localhost:${producerPort}/`,
  log: prefix("producer"),
  env,
}).catch(async (err) => {
  await service.stop();
  throw err;
});

const shutdown = async () => {
  await Promise.all([producer.stop(), service.stop()]);
  process.exit(0);
};
process.on("SIGINT", shutdown);
process.on("SIGTERM", shutdown);

try {
  await applyConfig(base, token);
} catch (err) {
  console.error(`[start] could not apply shardq.config.json: ${/** @type {Error} */ (err).message}`);
}

console.log(`
shardq is running.
  service:   ${base}   (account "local", token "${token}")
  producer:  http://localhost:${producerPort}   (POST /send?count=1000&batch=100, GET /metrics)
  consumer:  examples/consumer, consuming "example" (what it received: http://localhost:${producerPort}/consumer/stats)
  dashboard: ${base}/dashboard/   (sign in with the token above)
  CLI:       npx shardq queues info example   (npx shardq --help)
  metrics:   ${base}/metrics   (Prometheus, same token)
  state:     .wrangler/state
Press Ctrl-C to stop.
`);
