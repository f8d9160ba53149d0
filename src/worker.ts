/**
 * The shardq service entry: the broker's HTTP API, the QueueProducer RPC entrypoint
 * producer Workers bind to, and the Durable Object classes.
 */
import { isDashboardPath, serveDashboard } from "../broker/http/dashboard";
import { router } from "../broker/http/router";
import type { Env } from "./kernel/env";

export { QueueProducer } from "../broker/producer/queue-producer";
export { Coordinator } from "../coordinator/coordinator";
export { AccountCatalog } from "../coordinator/account-catalog";
export { IdempotencyKeys } from "../coordinator/idempotency-keys";
export { StorageShard } from "../storage-shard/storage-shard";
export { ConsumerShard } from "../consumer-shard/consumer-shard";

export default {
  fetch: (request, env, ctx) =>
    isDashboardPath(new URL(request.url).pathname)
      ? serveDashboard(request, env, ctx)
      : router.fetch(request, env, ctx),
} satisfies ExportedHandler<Env>;
