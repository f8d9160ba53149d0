// Producer-chosen ids over the same id space as the ids the service draws: ids
// are unique per queue, whoever chose them. A producer remembers the ids its sends were
// answered with (drawn by a storage shard for plain and keyed messages, by the broker for
// Idempotency-Key sends, or its own) and, now and then, instead of a batch:
//
//   steal  sends a new message under one of those ids: the answer must be a refusal (409),
//          never a yes, and the new message must never be delivered;
//   same   sends a message it was answered for again, same body, under its id: 200 with
//          that id and nothing stored, or 409 once its shard keeps nothing of it;
//   own    sends a new message under an id of its own choosing: 200 with that very id.
//
// Logged as sends (`id`: the id chosen, `chose`: which of the three), so the checker
// (id-checker.mjs) fails a run where an id is answered for two messages, a chosen id is
// answered with another, or an acknowledged id is delivered with another message's body.
// Draws come from a stream of their own: a run at idRate 0 sends what it sent before.
import { prng } from "./prng.mjs";

/** Ids a producer remembers, newest kept. */
const POOL = 500;

/**
 * @typedef {import("./workload.mjs").Message} Message
 * @typedef {{ q: string, id: string, m: Message, again: boolean }} Answered  again: may be sent again as it was (no Idempotency-Key, ordering key or poison)
 */

/** @param {{ seed: number, index: number, idRate?: number }} o */
export function idCollisions(o) {
  const rng = prng(o.seed, "producer", o.index, "ids");
  /** @type {Answered[]} */
  const pool = [];
  const remember = (/** @type {Answered} */ a) => {
    pool.push(a);
    if (pool.length > POOL) pool.splice(0, pool.length - POOL);
  };
  return {
    /** How many of these sends this step of the producer is (0: none). */
    due: () => ((o.idRate ?? 0) > 0 && rng.chance(/** @type {number} */ (o.idRate)) ? rng.int(1, 4) : 0),

    /**
     * A send answered ok: its messages and the ids it got.
     * @param {string} q @param {Message[]} messages @param {unknown} ids @param {string | undefined} key its Idempotency-Key
     */
    note(q, messages, ids, key) {
      if (!Array.isArray(ids) || ids.length !== messages.length) return;
      messages.forEach((m, i) =>
        remember({ q, id: String(ids[i]), m, again: key === undefined && m.key === null && !m.x }),
      );
    },

    /**
     * One such send. `fresh` makes a new message (null when the budget is spent); `send`
     * posts a body to a queue and logs it, answering the outcome logged.
     * @param {{ queue: string, fresh: () => Message | null,
     *   send: (q: string, m: Message, id: string, chose: string) => Promise<string> }} c
     * @returns {Promise<{ outcome: string, n: number } | null>} n: new messages it took from the budget
     */
    async act(c) {
      const kind = pool.length === 0 ? "own" : rng.pick(["steal", "steal", "same", "own", "own"]);
      if (kind === "same") {
        const again = pool.filter((a) => a.again);
        if (again.length === 0) return null;
        const a = rng.pick(again);
        return { outcome: await c.send(a.q, a.m, a.id, "same"), n: 0 };
      }
      const m = c.fresh();
      if (!m) return null;
      if (kind === "steal") {
        const a = rng.pick(pool);
        return { outcome: await c.send(a.q, m, a.id, "steal"), n: 1 };
      }
      const id = Array.from({ length: 8 }, () => rng.int(0, 0xffff).toString(16).padStart(4, "0")).join("");
      const outcome = await c.send(c.queue, m, id, "own");
      if (outcome === "ok") remember({ q: c.queue, id, m, again: !m.x });
      return { outcome, n: 1 };
    },
  };
}
