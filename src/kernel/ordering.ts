/**
 * Which shard owns an ordering key (docs/ordered-lanes.md): rendezvous hashing (highest
 * random weight) of the key over the names of the queue's active shards. The broker places
 * keyed messages with it, and a storage shard checks with it, against the epoch the
 * Coordinator told it, that a keyed message sent to it is its own.
 */

/** The owner of `key` among `names`; undefined when there is none. Ties go to the smaller name. */
export function ownerOfKey(key: string, names: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestWeight = -1;
  for (const name of names) {
    const weight = mix32(fnv1a(`${key}\u0000${name}`));
    if (weight > bestWeight || (weight === bestWeight && best !== undefined && name < best)) {
      best = name;
      bestWeight = weight;
    }
  }
  return best;
}

function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Murmur3's finaliser: FNV-1a alone leaves the weights of similar names correlated. */
function mix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
