import type { Env as ShardqEnv } from "../../src/kernel/env";

declare global {
  namespace Cloudflare {
    interface Env extends ShardqEnv {
      /** The example consumer's fetch handler (GET /stats), bound in vitest.config.ts. */
      EXAMPLE_CONSUMER: Fetcher;
      /** Low rate limits, swapped in by test/workers/rate-limits.test.ts (vitest.config.ts). */
      TEST_ACCOUNT_LIMITER: RateLimit;
      TEST_QUEUE_LIMITER: RateLimit;
      /** The outcome probe consumer (test/fixtures/outcome-probe), bound in vitest.config.ts: its queue() handler (transport "queue"). */
      OUTCOME_PROBE_QUEUE: Fetcher;
      /** The same probe's ShardqConsumer entrypoint (transport "rpc"). */
      OUTCOME_PROBE_RPC: Fetcher;
      /** A producer Worker with a module-scope batchingQueue (test/fixtures/batching-probe). */
      BATCHING_PROBE: Fetcher;
    }
  }
}
export {};
