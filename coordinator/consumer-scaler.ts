/**
 * The consumer-shard scaler, as a pure function of the backlog, the consumer's
 * max_concurrency, what the consumer shards last reported and the time, like the
 * storage autoscaler (autoscaler.ts): the Coordinator's control loop records what it
 * returns and wakes the shards it names.
 *
 * One consumer shard per BACKLOG_PER_CONSUMER_SHARD messages of backlog, at least one,
 * at most max_concurrency. Shards past the number wanted are not woken again: they
 * finish their round and stop.
 */
import type { ConsumerShardStatus } from "./heartbeats";

/** Messages per consumer shard before another is woken (up to max_concurrency). */
export const BACKLOG_PER_CONSUMER_SHARD = 200;

/**
 * Which of the wanted consumer shards a wake-up reaches.
 * - `idle`: those not delivering now (a tick, a heartbeat): a round still running is left to it.
 * - `one`: a single one at random, running or not (a shard's new messages: one is enough
 *   to take them; waking every wanted one on each of these made a storm of rounds once a
 *   large backlog had asked for many, and heartbeats scale up instead).
 * - `all`: every one, after a change of settings (a resume, a new consumer): a shard's last
 *   report says nothing about what it will do next, and its next round may be many seconds away.
 */
export type ConsumerWake = "idle" | "one" | "all";

export interface ConsumerScalingInput {
  /** Messages stored across the queue's storage shards, by their latest heartbeats. */
  backlog: number;
  /** The consumer's max_concurrency, or the service's maximum when it has none. */
  maxConcurrency: number;
  /** The number wanted at the last decision. */
  previous: number;
  wake: ConsumerWake;
  /** Each consumer shard's latest report; only an `idle` wake-up reads them. */
  reports: readonly ConsumerShardStatus[];
  now: number;
  heartbeatIntervalMs: number;
  /** A number in [0, 1): the shard `one` picks. */
  random: number;
}

export interface ConsumerScaling {
  wanted: number;
  /** The decision to log when `wanted` differs from `previous`; null when it does not. */
  change: { kind: "add_consumers" | "remove_consumers"; reason: string; figures: Record<string, number> } | null;
  /** The indexes of the consumer shards to wake. */
  wake: number[];
}

/**
 * Consumer shards delivering now: running at their last report, until the time it said
 * (runningUntil), or, from a shard older than that, made within three heartbeat intervals.
 */
export function deliveringNow<T extends ConsumerShardStatus>(
  reports: readonly T[],
  now: number,
  heartbeatIntervalMs: number,
): T[] {
  const fresh = now - 3 * heartbeatIntervalMs;
  return reports.filter(
    (c) => c.running && (c.running_until != null ? c.running_until >= now : c.received_at >= fresh),
  );
}

export function scaleConsumers(input: ConsumerScalingInput): ConsumerScaling {
  const { backlog, maxConcurrency: max, previous } = input;
  const wanted = Math.max(1, Math.min(max, Math.ceil(backlog / BACKLOG_PER_CONSUMER_SHARD)));
  const change: ConsumerScaling["change"] =
    wanted === previous
      ? null
      : {
          kind: wanted > previous ? "add_consumers" : "remove_consumers",
          reason: `backlog ${backlog}: ${wanted} consumer shard(s) at ${BACKLOG_PER_CONSUMER_SHARD} messages each, max ${max}`,
          figures: { backlog, consumerShards: wanted, previous, maxConcurrency: max },
        };
  let wake = Array.from({ length: wanted }, (_, i) => i);
  if (input.wake === "one") wake = [Math.floor(input.random * wanted)];
  else if (input.wake === "idle") {
    const busy = new Set(deliveringNow(input.reports, input.now, input.heartbeatIntervalMs).map((c) => c.index));
    wake = wake.filter((i) => !busy.has(i));
  }
  return { wanted, change, wake };
}
