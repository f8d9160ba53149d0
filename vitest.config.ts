import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

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
              bindings: {
                AUTH_TOKENS: JSON.stringify({
                  "shardq-local-dev-token": { account: "local" },
                  "other-account-token": { account: "other" },
                }),
              },
            },
          }),
        ],
        test: {
          name: "workers",
          include: ["test/workers/**/*.test.ts"],
        },
      },
      {
        // Starts `wrangler dev` on a free port and drives it over HTTP from Node.
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          environment: "node",
          testTimeout: 180_000,
          hookTimeout: 180_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
