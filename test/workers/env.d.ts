import type { Env as ShardqEnv } from "../../src/env";

declare global {
  namespace Cloudflare {
    interface Env extends ShardqEnv {
      /** The example consumer's fetch handler (GET /stats), bound in vitest.config.ts. */
      EXAMPLE_CONSUMER: Fetcher;
    }
  }
}
export {};
