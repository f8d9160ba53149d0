import type { Env } from "./env";

/**
 * Tunables read from vars, with defaults. Parsed once per isolate per env object:
 * vars cannot change without a new deployment, which starts new isolates.
 */
export interface ServiceConfig {
  regions: string[];
  defaultRegion: string;
  /**
   * SHARDS_PER_REGION: storage shards a queue starts with and keeps at least in every region
   * (a pinned layout). 0, its default: a queue starts with one shard, in DEFAULT_REGION, and
   * keeps that one (minShardsIn).
   */
  shardsPerRegion: number;
  heartbeatIntervalMs: number;
  shardMapCacheTtlMs: number;
  /** 0: no per-shard limit. */
  shardCapacityPerSecond: number;
  /** Autoscaler: messages/s one storage shard should take, and the most shards per region. */
  targetPerShard: number;
  maxShardsPerRegion: number;
  /** Autoscaler: how long load must stay low before a shard is drained. */
  scaleInAfterMs: number;
  /** How long a consumer shard's lease on a pushed batch lasts; renewed every third of it while the handler runs. */
  pushLeaseMs: number;
}

const cache = new WeakMap<object, ServiceConfig>();

export function serviceConfig(env: Env): ServiceConfig {
  const cached = cache.get(env);
  if (cached) return cached;
  const regions = (env.REGIONS ?? "local")
    .split(",")
    .map((r) => r.trim())
    .filter((r) => r.length > 0);
  if (regions.length === 0) throw new Error("REGIONS must name at least one region");
  const defaultRegion = env.DEFAULT_REGION?.trim() || regions[0]!;
  if (!regions.includes(defaultRegion)) {
    throw new Error(`DEFAULT_REGION "${defaultRegion}" is not one of REGIONS (${regions.join(",")})`);
  }
  const config: ServiceConfig = {
    regions,
    defaultRegion,
    shardsPerRegion:
      env.SHARDS_PER_REGION && env.SHARDS_PER_REGION.trim() !== "0"
        ? positiveInt("SHARDS_PER_REGION", env.SHARDS_PER_REGION, 0, 64)
        : 0,
    heartbeatIntervalMs: positiveInt("HEARTBEAT_INTERVAL_MS", env.HEARTBEAT_INTERVAL_MS, 5000, 3_600_000),
    shardMapCacheTtlMs: positiveInt("SHARD_MAP_CACHE_TTL_MS", env.SHARD_MAP_CACHE_TTL_MS, 5000, 300_000),
    targetPerShard: positiveInt("TARGET_MESSAGES_PER_SHARD", env.TARGET_MESSAGES_PER_SHARD, 500, 1_000_000),
    maxShardsPerRegion: positiveInt("MAX_SHARDS_PER_REGION", env.MAX_SHARDS_PER_REGION, 32, 1000),
    scaleInAfterMs: positiveInt("SCALE_IN_AFTER_MS", env.SCALE_IN_AFTER_MS, 30_000, 86_400_000),
    pushLeaseMs: positiveInt("PUSH_LEASE_MS", env.PUSH_LEASE_MS, 30_000, 15 * 60_000),
    shardCapacityPerSecond:
      env.SHARD_CAPACITY_PER_SECOND && env.SHARD_CAPACITY_PER_SECOND.trim() !== "0"
        ? positiveInt("SHARD_CAPACITY_PER_SECOND", env.SHARD_CAPACITY_PER_SECOND, 0, 1_000_000)
        : 0,
  };
  cache.set(env, config);
  return config;
}

/**
 * The fewest storage shards a queue keeps in `region`, and starts with: SHARDS_PER_REGION
 * everywhere when it is set, otherwise one in the default region and none elsewhere (a
 * region's sends go to the shards of another until its own load calls for one:
 * docs/cost.md, "Start small").
 */
export function minShardsIn(config: Pick<ServiceConfig, "shardsPerRegion" | "defaultRegion">, region: string): number {
  if (config.shardsPerRegion > 0) return config.shardsPerRegion;
  return region === config.defaultRegion ? 1 : 0;
}

function positiveInt(name: string, raw: string | undefined, fallback: number, max: number): number {
  if (raw === undefined || raw.trim() === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > max) {
    throw new Error(`${name} must be an integer from 1 to ${max}, got "${raw}"`);
  }
  return n;
}
