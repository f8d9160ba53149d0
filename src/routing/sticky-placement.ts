/**
 * Where a broker isolate sends fresh messages: to one shard for a while, not to a random
 * shard per batch (Kafka's sticky partitioner, KIP-480, does the same for keyless records).
 * A stream of small sends spread at random over twelve shards gives each a twelfth of it,
 * so each fills a consumer's batch twelve times slower; kept on one shard until it has
 * taken a batch's worth, the stream fills batches there at its own rate, and consumers
 * lease whole batches instead of gathering fragments (consumer-shard/gather.ts). Over
 * time every shard still gets its share: the shard changes, at random, after
 * STICKY_MESSAGES or STICKY_MS, whichever comes first, and whenever it stops taking
 * sends (not in the map, not active, refused). A slow stream stays on one shard and lets
 * the others sleep.
 */
import type { ShardEntry, ShardMap } from "../kernel/protocol";
import { pickShard, shardsTakingSends } from "./placement";

/** As many as the largest consumer batch: a shard keeps the stream until it could fill one. */
export const STICKY_MESSAGES = 100;
/**
 * A slow stream moves on after this. Long: each move at a low rate lands on a shard that
 * sleeps, and waking it costs its first report and a consumer's wake-up (moving every
 * second, a stream of a message a second woke a shard with each message). A shard the
 * autoscaler adds gets its share soon all the same: it adds shards only under load, where
 * STICKY_MESSAGES moves the stream on many times a second.
 */
export const STICKY_MS = 30_000;

interface Stick {
  shard: string;
  left: number;
  until: number;
}

/** Per queue, in this isolate's memory: a cold isolate starts on a random shard, which is all it needs. */
const sticks = new Map<string, Stick>();

/**
 * The shard `count` fresh messages of queue `queueId` go to. A shard in `exclude` (it
 * refused this send) is never picked, and a new one is drawn at random.
 */
export function stickyShard(map: ShardMap, region: string, exclude: ReadonlySet<string>, count: number, now: number, random: () => number = Math.random): ShardEntry | undefined {
  const stick = sticks.get(map.queueId);
  if (stick && stick.left > 0 && now < stick.until) {
    const shard = shardsTakingSends(map, region, exclude).find((s) => s.name === stick.shard);
    if (shard) {
      stick.left -= count;
      return shard;
    }
  }
  const shard = pickShard(map, region, exclude, random);
  if (shard) sticks.set(map.queueId, { shard: shard.name, left: STICKY_MESSAGES - count, until: now + STICKY_MS });
  else sticks.delete(map.queueId);
  return shard;
}

/** Tests start from no stickiness. */
export function forgetSticks(): void {
  sticks.clear();
}
