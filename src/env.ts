import type { Coordinator } from "../coordinator/coordinator";
import type { AccountCatalog } from "../coordinator/account-catalog";
import type { StorageShard } from "../storage-shard/storage-shard";
import type { ConsumerShard } from "../consumer-shard/consumer-shard";
import type { IdempotencyKeys } from "../coordinator/idempotency-keys";

/** Bindings and vars of the shardq service (wrangler.toml, .dev.vars, secrets). */
export interface Env {
  COORDINATOR: DurableObjectNamespace<Coordinator>;
  ACCOUNT_CATALOG: DurableObjectNamespace<AccountCatalog>;
  STORAGE_SHARD: DurableObjectNamespace<StorageShard>;
  /** Consumer shards. Never CONSUMER_<anything>: that prefix is consumer Workers' (below). */
  SHARD_CONSUMERS: DurableObjectNamespace<ConsumerShard>;
  SHARD_MAPS: KVNamespace;
  /** The dashboard's files (wrangler.toml [site]); absent where no bucket is bound. */
  __STATIC_CONTENT?: KVNamespace;

  /** JSON object: token -> { account }. A secret in production, `.dev.vars` locally. */
  AUTH_TOKENS?: string;
  /** Comma-separated regions storage shards are created in, e.g. "wnam,weur,apac". */
  REGIONS?: string;
  /** Region used when the caller's region is unknown or not in REGIONS. */
  DEFAULT_REGION?: string;
  /** Storage shards created per region for a new queue. */
  SHARDS_PER_REGION?: string;
  /** How often shards report to their Coordinator. */
  HEARTBEAT_INTERVAL_MS?: string;
  /** Messages per second one storage shard accepts before refusing as overloaded; unset or 0: no limit. */
  SHARD_CAPACITY_PER_SECOND?: string;
  /** Autoscaler: target messages/s per storage shard, most shards per region, and how long load must stay low to scale in. */
  TARGET_MESSAGES_PER_SHARD?: string;
  MAX_SHARDS_PER_REGION?: string;
  SCALE_IN_AFTER_MS?: string;
  /** How long a broker isolate trusts its in-memory copy of a shard map. */
  SHARD_MAP_CACHE_TTL_MS?: string;
  /** How long a consumer shard's lease on a pushed batch lasts (ms, default 30,000; renewed while the handler runs). */
  PUSH_LEASE_MS?: string;
  /** How a Worker consumer is reached unless its settings say otherwise: "rpc" (deploys) or "queue" (local dev). */
  DEFAULT_CONSUMER_TRANSPORT?: string;
  /** Idempotency-Key records of HTTP sends (coordinator/idempotency-keys.ts). */
  IDEMPOTENCY_KEYS: DurableObjectNamespace<IdempotencyKeys>;
  /** Rate Limiting bindings ([[ratelimits]]): requests per account and per queue. */
  ACCOUNT_RATE_LIMITER?: RateLimit;
  QUEUE_RATE_LIMITER?: RateLimit;
  /** "on" enforces ACCOUNT_RATE_LIMITER and QUEUE_RATE_LIMITER (broker/rate-limit.ts); anything else: no limits. */
  RATE_LIMITS?: string;
  /** "on" opens the fault harness's hooks (src/test-hooks.ts). Only test/faults sets it; never wrangler.toml. */
  SHARDQ_TEST_HOOKS?: string;
  /** Secret that signs pull consumers' lease ids. */
  LEASE_SIGNING_KEY?: string;
  /**
   * Service bindings to consumer Workers, named CONSUMER_<SCRIPT_NAME> (src/consumer-settings.ts
   * consumerBindingName). Typed as Fetcher so a binding of shardq's own named CONSUMER_...
   * (anything but a service binding) fails to compile; look them up with consumerBinding().
   */
  [binding: `CONSUMER_${string}`]: Fetcher | undefined;
}
