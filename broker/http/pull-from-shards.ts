/** One pull's look at the queue's storage shards: what it leases from them, and the queue's figures it answers with. */
import { storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { unavailable } from "../../src/kernel/errors";
import type { ShardBacklog } from "../../src/kernel/figures";
import type { LeasedMessage } from "../../src/kernel/protocol";
import type { DeliveryPlan } from "../../src/kernel/shard-map";
import { sumFigures } from "../../src/routing/queue-figures";

/**
 * Visits the queue's shards in random order, leasing what is still wanted from each,
 * and never waits for a batch to fill. The queue's figures are exact for the shards
 * visited and their latest heartbeat for the others, so a pull costs no extra round trips.
 */
export async function leaseFromShards(
  env: Env,
  plan: DeliveryPlan,
  wanted: number,
  leaseMs: number,
  watchUntil?: number,
) {
  const leased: Array<{ shard: string; message: LeasedMessage }> = [];
  const exact: ShardBacklog[] = [];
  let failed = 0;
  for (const shard of shuffled(plan.shards)) {
    const limit = wanted - leased.length;
    if (limit <= 0) continue;
    try {
      const r = await storageShardFor(env, shard.name).lease({
        queueId: plan.queueId,
        limit,
        leaseMs,
        maxWaitMs: 0,
        retentionMs: plan.retentionMs,
        ...(watchUntil !== undefined ? { watchUntil } : {}),
      });
      exact.push(r.backlog);
      for (const message of r.messages) leased.push({ shard: shard.name, message });
    } catch (err) {
      // Another shard may serve the pull; a lease lost with the reply just ends with its timeout.
      console.error(`lease from storage shard ${shard.name} failed:`, err);
      failed++;
    }
  }
  if (failed > 0 && failed === plan.shards.length)
    throw unavailable("no storage shard of this queue answered; retry", null);
  return {
    leased,
    figures: sumFigures(
      plan.shards.map((s) => s.backlog),
      exact,
    ),
  };
}

function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
