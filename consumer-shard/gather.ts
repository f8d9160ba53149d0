/**
 * One batch from several storage shards. A queue spread over many shards gives each one a
 * share of its traffic: waiting for any single shard to fill a batch would make a
 * consumer wait for the batch timeout (or for shard-count times the fill time) although
 * the queue as a whole filled a batch long before. So max_batch_timeout is read as
 * Cloudflare means it, over the queue: a batch goes out when the messages ready on all
 * the shards a consumer shard has looked at fill it, or when the oldest of them has
 * waited max_wait_time_ms, whichever comes first.
 *
 * A storage shard with a partial, young batch answers a lease with how many messages
 * are ready and when its oldest will have waited long enough (LeaseResult.ready,
 * waitUntil), and leases nothing. Once every shard of the round has answered so, this
 * decides: take the ready messages now (the oldest first, each shard asked for what the
 * batch still lacks, so no shard gives more than the batch takes), or wait. A wait ends at the
 * oldest message's deadline, or sooner, when the queue's recent rate says the batch will
 * have filled: a steady stream spread over twelve shards fills a batch as fast as it
 * would on one. docs/architecture.md ("One batch from several shards") argues the choice.
 */

/** A shard holding a partial batch that is not due yet, as its lease answered. */
export interface FillingShard {
  name: string;
  ready: number;
  /** When its oldest ready message will have waited max_wait_time_ms. */
  waitUntil: number;
}

export type GatherDecision = { gather: true } | { gather: false; wakeAt: number };

/**
 * The shortest wait between two looks at a filling batch: bounds the leases a consumer
 * shard spends looking while a slow stream fills a batch.
 */
export const MIN_GATHER_WAIT_MS = 10;

export function decideGather(
  filling: readonly FillingShard[],
  batchSize: number,
  maxWaitMs: number,
  now: number,
): GatherDecision {
  const total = filling.reduce((n, s) => n + s.ready, 0);
  const due = Math.min(...filling.map((s) => s.waitUntil));
  if (total >= batchSize || due <= now) return { gather: true };
  // One shard alone wakes consumers itself when its batch fills (storage-shard fillingFor),
  // as does a shard that had nothing when it was looked at, on its first arrival.
  if (filling.length === 1) return { gather: false, wakeAt: due };
  // The ready messages came in since the oldest of them did: at that rate, the rest of the batch takes this long.
  const age = Math.max(1, now - (due - maxWaitMs));
  const fill = total > 0 ? ((batchSize - total) * age) / total : maxWaitMs;
  return { gather: false, wakeAt: Math.min(due, now + Math.max(MIN_GATHER_WAIT_MS, Math.ceil(fill))) };
}

/**
 * The order to take a batch's remaining messages in: the shards holding the oldest waiting
 * messages first (a remainder left on a shard the stream of sends has moved away from would
 * otherwise wait out the batch timeout while fresh shards fill batch after batch), then the rest.
 */
export function oldestFirst<T extends { name: string }>(
  shards: readonly T[],
  filling: ReadonlyMap<string, FillingShard>,
): T[] {
  const due = (s: T) => filling.get(s.name)?.waitUntil ?? Infinity;
  return [...shards].sort((a, b) => due(a) - due(b));
}

/** How much of a batch leased from shard `from` to leave for the messages waiting on other filling shards: all of it but one message, at most. */
export function reserveFor(filling: ReadonlyMap<string, FillingShard>, batchSize: number, from?: string): number {
  let ready = 0;
  for (const f of filling.values()) if (f.name !== from) ready += f.ready;
  return Math.min(batchSize - 1, ready);
}
