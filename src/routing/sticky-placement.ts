/**
 * Where a broker isolate sends fresh messages: to one shard for a while, not to a random
 * shard per batch (Kafka's sticky partitioner, KIP-480, does the same for keyless records).
 * A stream of small sends spread at random over twelve shards gives each a twelfth of it,
 * so each fills a consumer's batch twelve times slower; kept on one shard until it has
 * taken a batch's worth, the stream fills batches there at its own rate, and consumers
 * lease whole batches instead of gathering fragments (consumer-shard/gather.ts). Over
 * time every shard still gets its share: the shard changes, at random, after STICKY_MS,
 * after STICKY_MESSAGES when they came at SPREAD_RATE or faster, and whenever it stops
 * taking sends (not in the map, not active, refused). A slow stream stays on one shard
 * and lets the others sleep.
 */
import type { ShardEntry, ShardMap } from "../kernel/shard-map";
import { pickShard, shardsTakingSends } from "./placement";

/** As many as the largest consumer batch: a shard keeps the stream until it could fill one. */
export const STICKY_MESSAGES = 100;
/**
 * A stream slower than this (messages a second, from one isolate) is no load worth
 * spreading: it stays for STICKY_MS however many it sends. Each move lands on a shard that
 * sleeps, and waking it and letting it sleep again costs reports, an alarm and rows; a
 * stream of 10 a second moving every 100 messages paid that every 10 s.
 */
export const SPREAD_RATE = 100;
/**
 * A slow stream moves on after this. Long, for the same reason (moving every second, a
 * stream of a message a second woke a shard with each message; every two minutes, each
 * move's wake-up, reports and quiet work were still a tenth of a trickle's cost). A shard
 * the autoscaler adds gets its share soon all the same: it adds shards only under load,
 * where STICKY_MESSAGES moves the stream on many times a second.
 */
export const STICKY_MS = 5 * 60_000;

interface Stick {
  shard: string;
  /** Messages sent to it in this stint. */
  taken: number;
  since: number;
}

/** Whether a stint has lasted long enough, or taken a batch's worth of a stream fast enough to spread. */
function stintOver(stick: Stick, now: number): boolean {
  const elapsed = now - stick.since;
  if (elapsed >= STICKY_MS) return true;
  return stick.taken >= STICKY_MESSAGES && stick.taken * 1000 >= SPREAD_RATE * Math.max(elapsed, 1);
}

/** Per queue, in this isolate's memory: a cold isolate starts on a random shard, which is all it needs. */
const sticks = new Map<string, Stick>();

/**
 * The shard `count` fresh messages of queue `queueId` go to. A shard in `exclude` (it
 * refused this send) is never picked, and a new one is drawn at random.
 */
export function stickyShard(
  map: ShardMap,
  region: string,
  exclude: ReadonlySet<string>,
  count: number,
  now: number,
  random: () => number = Math.random,
): ShardEntry | undefined {
  const stick = sticks.get(map.queueId);
  if (stick && !stintOver(stick, now)) {
    const shard = shardsTakingSends(map, region, exclude).find((s) => s.name === stick.shard);
    if (shard) {
      stick.taken += count;
      return shard;
    }
  }
  const shard = pickShard(map, region, exclude, random);
  if (shard) sticks.set(map.queueId, { shard: shard.name, taken: count, since: now });
  else sticks.delete(map.queueId);
  return shard;
}

/** Tests start from no stickiness. */
export function forgetSticks(): void {
  sticks.clear();
}
