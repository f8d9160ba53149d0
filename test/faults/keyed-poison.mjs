// Keyed dead letters in the fault run: poison messages are rare
// (workload.mjs `poisonRate`), and a keyed one rarer, so a short run might redrive none. At
// `rate` a producer's keyed message is made poison too, from a stream of its own, so every
// other decision stays what the seed made it: it is retried out in its key's lane (holding
// the key for its retries), dead-lettered with its key, and the redriver moves it back, in
// its key's order, to a lane of the queue it goes to (order-checker.mjs counts these as
// `keyed_redriven`, and holds every copy to the key it was sent with).
import { prng } from "./prng.mjs";

/**
 * @param {{ seed: number, index: number, rate: number }} o
 * @returns {(messages: Array<{ key: string | null, x: boolean }>) => void}
 */
export function keyedPoison(o) {
  const rng = prng(o.seed, "producer", o.index, "keyed-poison");
  return (messages) => {
    for (const m of messages) if (m.key !== null && !m.x && rng.chance(o.rate)) m.x = true;
  };
}
