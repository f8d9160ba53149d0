/**
 * Which storage shard of a queue takes a message. A fresh message (an id drawn at the
 * send) goes to a random active shard of the caller's region: random choice spreads load
 * without coordination between broker isolates. A message whose id is fixed before it is
 * stored (an idempotent send, a move to another queue) goes to the shard its own id picks
 * (the shard that drew it, if one did and it takes sends), whatever batch it travels in:
 * writing it again after a lost reply or a crash, alone or in other company, lands on the
 * shard that has it, which recognises it (by remembered id, by move key, or holding it
 * still) and stores nothing new. If the map changed in between,
 * a move written again may land elsewhere and store a copy: at least once, never lost
 * (docs/guarantees.md, "Moves"). An idempotent send tried again asks every shard first
 * (idempotent-send.ts), so it does not count on this.
 */
import type { ShardEntry, ShardMap } from "../kernel/shard-map";
import { locate, shardNumber } from "../kernel/ids";
import { ownerOfKey } from "../kernel/ordering";

const NONE: ReadonlySet<string> = new Set();

/**
 * A random active shard in the caller's region; any active shard when the region has
 * none. `random` fixed by an id makes the choice the id's own (shardForId).
 */
export function pickShard(
  map: ShardMap,
  region: string,
  exclude: ReadonlySet<string>,
  random: () => number = Math.random,
): ShardEntry | undefined {
  const pool = shardsTakingSends(map, region, exclude);
  return pool.length ? pool[Math.floor(random() * pool.length)] : undefined;
}

/** The shards pickShard chooses among: the active ones of the caller's region, or any active one when the region has none. */
export function shardsTakingSends(map: ShardMap, region: string, exclude: ReadonlySet<string>): ShardEntry[] {
  const usable = map.shards.filter((s) => s.state === "active" && !exclude.has(s.name));
  const local = usable.filter((s) => s.region === region);
  return local.length ? local : usable;
}

/** The shard a message whose id is fixed is stored on; undefined when no shard (outside `exclude`) takes sends. */
export function shardForId(
  map: ShardMap,
  region: string,
  id: string,
  exclude: ReadonlySet<string> = NONE,
): ShardEntry | undefined {
  // An id a shard drew names that shard: a message moved back to its queue goes where it
  // lived, which skips it if its first copy is still there (a move cut off before its
  // source let go), instead of a second shard storing it beside that copy.
  const named = locate(id)?.shard;
  const drew =
    named === undefined
      ? undefined
      : shardsTakingSends(map, region, exclude).find((s) => shardNumber(s.name) === named);
  return drew ?? pickShard(map, region, exclude, seededRandom(id));
}

/**
 * The shard of an ordering key (docs/ordered-lanes.md): its owner among every active shard of
 * the queue, whatever its region (src/kernel/ordering.ts), so a key has one home wherever its
 * producers send from. None when the owner is in `exclude`: a keyed message never goes to
 * another shard than its key's, which would refuse it (a fresh map may name another owner).
 */
export function shardForKey(map: ShardMap, key: string, exclude: ReadonlySet<string> = NONE): ShardEntry | undefined {
  const active = map.shards.filter((s) => s.state === "active");
  const owner = ownerOfKey(
    key,
    active.map((s) => s.name),
  );
  return owner === undefined || exclude.has(owner) ? undefined : active.find((s) => s.name === owner);
}

/** A number in [0, 1) fixed by `key` (FNV-1a). */
export function seededRandom(key: string): () => number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  const value = (h >>> 0) / 2 ** 32;
  return () => value;
}
