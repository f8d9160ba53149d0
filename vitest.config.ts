import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import {
  buildBatchingProbe,
  buildExampleConsumer,
  buildOutboxProbe,
  buildOutcomeProbe,
} from "./scripts/build-examples.mjs";
import { buildClient } from "./scripts/build-client.mjs";

// lib/: the client library as `shardq/client` serves it, which the Node examples import, and
// shardq/consumer, which the example consumer imports: built first, so that it bundles the
// current sources.
await buildClient();
// The example consumer runs next to the service in the tests, as built JavaScript.
const exampleConsumer = await buildExampleConsumer();
// So does the probe consumer of test/workers/transport-parity.test.ts.
const outcomeProbe = await buildOutcomeProbe();
// And the batching probe producer of test/workers/batching-queue.test.ts.
const batchingProbe = await buildBatchingProbe();
// And the objects using shardq/outbox and shardq/inbox (test/workers/outbox*.test.ts, inbox.test.ts).
const outboxProbe = await buildOutboxProbe();
/**
 * The Worker under test as the pool names it ("vitest-plugin-runner-<project>"): an auxiliary
 * Worker reaches shardq's QueueProducer through a service binding to it, as a user's Worker binds
 * to "shardq". The name is the pool's own (it offers no public one for the main Worker); should
 * it change, test/workers/outbox-shardq.test.ts fails at its first send, not silently.
 */
const RUNNER = "vitest-plugin-runner-workers";
/** The outbox probe's objects, declared in its Worker and bound in the Worker under test. */
const OUTBOX_PROBE_OBJECTS = {
  OUTBOX_PRODUCER: { className: "OutboxProducer", useSQLite: true },
  INBOX_CONSUMER: { className: "InboxConsumer", useSQLite: true },
};

/**
 * End-to-end files that run for long (a fault run, a benchmark, a queue left to fall asleep,
 * wrangler or npm driven dozens of times): the `e2e-slow` project, which `npm run test:slow` and
 * CI run and `npm test` leaves out, so the default suite stays a few minutes.
 */
const SLOW_E2E = [
  "autoscale",
  "binding-delay",
  "cli",
  "client-consumer",
  "cloudflare-sdk",
  "compare",
  "delivery",
  "faults",
  "load-tester",
  "many-queues-bench",
  "outbox-cloudflare",
  "outbox-example",
  "own-workers",
  "package",
  "persistence",
  "sleep",
  "traffic-bench",
  "wrangler-queues",
].map((name) => `test/e2e/${name}.test.ts`);
/** What both end-to-end projects share: Node driving `wrangler dev` on a free port, one file at a time. */
const e2eProject = { environment: "node", testTimeout: 180_000, hookTimeout: 180_000, fileParallelism: false } as const;

export default defineConfig({
  test: {
    // Every rejected RPC call leaks a second, unhandled copy of its error in the workers
    // pool even when the test awaits and asserts the rejection (cloudflare/workers-sdk#14736).
    // Those copies are marked `remote: true`; the tests still see and check the original.
    // Anything else still fails the run.
    onUnhandledError: (error) => ((error as { remote?: boolean }).remote === true ? false : undefined),
    projects: [
      {
        // Runs inside workerd with the service's own wrangler.toml and .dev.vars.
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            // A second account, to prove one account never reaches another's queues.
            miniflare: {
              // Consumer shards call the example consumer's queue() handler, which needs this flag (local only).
              compatibilityFlags: ["service_binding_extra_handlers", "enable_request_signal"],
              serviceBindings: {
                // The two transports: its queue() handler, and its ShardqConsumer entrypoint.
                CONSUMER_SHARDQ_EXAMPLE_CONSUMER: "shardq-example-consumer",
                CONSUMER_EXAMPLE_RPC: { name: "shardq-example-consumer", entrypoint: "ShardqConsumer" },
                // Tests read what the consumer received (GET /stats).
                EXAMPLE_CONSUMER: "shardq-example-consumer",
                // The probe consumer through both transports (test/workers/transport-parity.test.ts).
                OUTCOME_PROBE_QUEUE: "shardq-outcome-probe",
                OUTCOME_PROBE_RPC: { name: "shardq-outcome-probe", entrypoint: "ShardqConsumer" },
                // A producer Worker with a module-scope batchingQueue (test/workers/batching-queue.test.ts).
                BATCHING_PROBE: "shardq-batching-probe",
              },
              durableObjects: Object.fromEntries(
                Object.entries(OUTBOX_PROBE_OBJECTS).map(([name, o]) => [
                  name,
                  { ...o, scriptName: "shardq-outbox-probe" },
                ]),
              ),
              workers: [
                {
                  name: "shardq-example-consumer",
                  modules: true,
                  scriptPath: exampleConsumer,
                  compatibilityDate: "2026-11-01",
                  durableObjects: { TALLY: { className: "Tally", useSQLite: true } },
                },
                {
                  name: "shardq-outcome-probe",
                  modules: true,
                  scriptPath: outcomeProbe,
                  compatibilityDate: "2026-11-01",
                },
                {
                  name: "shardq-batching-probe",
                  modules: true,
                  scriptPath: batchingProbe,
                  compatibilityDate: "2026-11-01",
                },
                {
                  name: "shardq-outbox-probe",
                  modules: true,
                  scriptPath: outboxProbe,
                  compatibilityDate: "2026-11-01",
                  durableObjects: OUTBOX_PROBE_OBJECTS,
                  serviceBindings: {
                    SHARDQ_QUEUE: {
                      name: RUNNER,
                      entrypoint: "QueueProducer",
                      props: { account: "local", queue: "outbox-e2e" },
                    },
                  },
                },
              ],
              bindings: {
                // A pinned layout of four shards: the tests of sharding, moves and ordering need several.
                // A queue of the deployed defaults starts with one (test/e2e/sleep.test.ts).
                SHARDS_PER_REGION: "4",
                AUTH_TOKENS: JSON.stringify({
                  "shardq-local-dev-token": { account: "local" },
                  "other-account-token": { account: "other" },
                  // Narrower tokens of the same account, and a revoked one (test/workers/scopes.test.ts).
                  "send-only-token": { account: "local", scopes: ["send"] },
                  "consume-only-token": { account: "local", scopes: ["consume"] },
                  "admin-only-token": { account: "local", scopes: ["admin"] },
                  "send-consume-token": { account: "local", scopes: ["send", "consume"] },
                  "revoked-token": { account: "local", revoked: true },
                }),
              },
              // Low limits the rate-limit tests swap in for the service's own (test/workers/rate-limits.test.ts).
              ratelimits: {
                TEST_ACCOUNT_LIMITER: { namespace_id: "9001", simple: { limit: 10, period: 60 } },
                TEST_QUEUE_LIMITER: { namespace_id: "9002", simple: { limit: 3, period: 60 } },
              },
            },
          }),
        ],
        test: {
          name: "workers",
          include: ["test/workers/**/*.test.ts"],
          // Two files at a time: each file's own workerd spends most of its start-up waiting, and
          // storage is per file, so two side by side halve the project's wall time on two cores.
          maxWorkers: 2,
        },
      },
      {
        // Plain Node, no service started: the client library against a fetch the test answers,
        // the fault checker on hand-made histories, the import graph, the OpenAPI document, and
        // the benchmark's figures from made-up runs. Files run side by side.
        test: {
          name: "node",
          include: ["test/node/**/*.test.ts"],
          environment: "node",
          // Each takes about a second at most; the margin is for a machine busy with the other projects.
          testTimeout: 30_000,
        },
      },
      {
        // Starts `wrangler dev` on a free port and drives it over HTTP from Node.
        test: { name: "e2e", include: ["test/e2e/**/*.test.ts"], exclude: SLOW_E2E, ...e2eProject },
      },
      {
        test: { name: "e2e-slow", include: SLOW_E2E, ...e2eProject },
      },
    ],
  },
});
