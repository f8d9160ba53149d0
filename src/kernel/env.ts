/**
 * The service's bindings and vars. Most come from `wrangler types` (worker-configuration.d.ts,
 * generated from wrangler.toml and .dev.vars by `npm run types`; CI fails when it is stale),
 * which types the Durable Object namespaces by the entry's exports without this file importing
 * any object: that is what keeps the kernel below the objects. Only bindings no config file
 * declares are written here.
 *
 * The vars, documented where they are set (wrangler.toml, .dev.vars): REGIONS, DEFAULT_REGION,
 * HEARTBEAT_INTERVAL_MS, SHARD_CAPACITY_PER_SECOND (0: no limit),
 * TARGET_MESSAGES_PER_SHARD, MAX_SHARDS_PER_REGION, SCALE_IN_AFTER_MS, SHARD_MAP_CACHE_TTL_MS,
 * DEFAULT_CONSUMER_TRANSPORT, RATE_LIMITS; the secrets AUTH_TOKENS (token -> { account }) and
 * LEASE_SIGNING_KEY (signs pull consumers' lease ids).
 */
export type Env = Cloudflare.Env;

declare global {
  namespace Cloudflare {
    interface Env {
      /** The dashboard's files (wrangler.toml [site]); absent where no bucket is bound. */
      __STATIC_CONTENT?: KVNamespace;
      /** How long a consumer shard's lease on a pushed batch lasts (ms, default 30,000; renewed while the handler runs). */
      PUSH_LEASE_MS?: string;
      /** Set: N storage shards in every region, kept at least (a pinned layout). Unset: a queue starts with one (src/kernel/config.ts minShardsIn). */
      SHARDS_PER_REGION?: string;
      /**
       * JSON `{ "<script name>": ["<account id>", ...] }`: the accounts whose queues may use each
       * consumer Worker, named exactly (src/kernel/consumer-settings.ts workerServesAccount).
       * Unset: every CONSUMER_<NAME> binding serves the account "local" only.
       */
      WORKER_CONSUMER_ACCOUNTS?: string;
      /** "on" opens the fault harness's hooks (src/kernel/test-hooks.ts). Only test/faults sets it; never wrangler.toml. */
      SHARDQ_TEST_HOOKS?: string;
      /**
       * Service bindings to consumer Workers, named CONSUMER_<SCRIPT_NAME> (src/kernel/consumer-settings.ts
       * consumerBindingName). Typed as Fetcher so a binding of shardq's own named CONSUMER_...
       * (anything but a service binding) fails to compile; look them up with consumerBinding().
       */
      [binding: `CONSUMER_${string}`]: Fetcher | undefined;
    }
  }
}
