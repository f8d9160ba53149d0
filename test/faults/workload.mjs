// The producers of a fault run, which send batches over HTTP, and the operator who redrives
// the dead-letter queue, each logging every operation to the history (the pull consumers
// are pull-consumer.mjs's). Each draws its decisions (batch sizes, which messages are
// poison, pause lengths) from its own seeded stream. Every loop ends at a deadline.
import { idCollisions } from "./id-collisions.mjs";
import { prng } from "./prng.mjs";
import { sleep } from "../../src/kernel/sleep.ts";

/**
 * @typedef {import("./history.mjs").History} History
 * @typedef {ReturnType<typeof import("./client.mjs").apiClient>} Api
 * @typedef {{ stop: boolean }} Control
 */

/** Tries of a batch with an Idempotency-Key whose outcome stays unknown. */
const KEYED_TRIES = 8;

// The harness modules take their waits from here.
export { sleep };

/** Messages still to send, shared by the producers. A send refused for certain gives its messages back. */
export class Budget {
  /** @param {number} total */
  constructor(total) {
    this.remaining = total;
  }
  /** @param {number} want */
  take(want) {
    const n = Math.max(0, Math.min(want, this.remaining));
    this.remaining -= n;
    return n;
  }
  /** @param {number} n */
  refund(n) {
    this.remaining += n;
  }
}

/**
 * Holds the producers together at `perSecond` messages/s (0: as fast as they go), with
 * at most a second's worth of burst after a pause such as a restart.
 * @param {number} perSecond
 */
export function rateLimiter(perSecond) {
  let next = performance.now();
  return {
    /** @param {number} n */
    async take(n) {
      if (!perSecond) return;
      const now = performance.now();
      next = Math.max(next, now - 1000);
      const at = next;
      next += (n * 1000) / perSecond;
      await sleep(at - now);
    },
  };
}

/**
 * One producer. Each step is either a batch of 1 to `maxBatch` messages (POST
 * .../messages/batch, stored all together or not at all) or, at `burstRate`, a burst
 * of 1 to 16 single sends at once (POST .../messages, which the broker coalesces into
 * shared writes). Every body is {h: "<seed>.<producer>.<n>"}, plus {x: 1} for a poison
 * message the consumers always retry, and padding of random size. At `keyRate` a batch
 * carries an Idempotency-Key, and when its outcome is unknown it is sent again, the same
 * messages with the same key, as the README tells users to: it must store them once.
 * At `delayRate` a batch is delayed 2 to 4 s: stored messages nobody holds, which the
 * corrupt fault needs (consumers keep the ready backlog near empty). At `pushRate` a
 * step goes to `pushQueue` instead of `queue` (a draw from a stream of its own, so the
 * other decisions stay what the seed made them).
 * Ordered traffic (`--ordered`): at `orderedRate` a message carries an
 * `ordering_key`, one of `orderingKeys` keys of this producer, drawn from a stream of its
 * own. A step holds at most one message of a key and a producer takes one step at a time,
 * so the next message of a key is invoked only once the previous one's send returned ok or
 * was given up (refused, or unknown after its tries): the service accepted the key's
 * messages in the order sent (order-checker.mjs). Its body also carries the key and the
 * key's sequence number ({k, n}), and its send's invoke value lists [h, key, n]. A delayed
 * batch carries no key: what a send delay does to a key is not part of the contract.
 * At `idRate` a step is one send under an id the producer chose: one the service answered
 * earlier (stolen for a new message, or the same message again) or its own (id-collisions.mjs).
 * @param {{ index: number, seed: number, history: History, api: Api, queue: string, pushQueue?: string, pushRate?: number, control: Control, budget: Budget,
 *   limiter: ReturnType<typeof rateLimiter>, deadline: number, maxBatch: number, burstRate: number, poisonRate: number, padMax: number, keyRate: number, delayRate: number,
 *   orderedRate?: number, orderingKeys?: number, idRate?: number, keyedPoison?: (messages: Message[]) => void, tally: { okMessages: number }, gate?: { pass: (name: string) => Promise<void> } }} o
 *   keyedPoison: makes some keyed messages poison too (keyed-poison.mjs); gate: where a quiet phase stops it (quiet-phases.mjs)
 */
export async function runProducer(o) {
  const p = `producer-${o.index}`;
  const rng = prng(o.seed, "producer", o.index);
  const route = prng(o.seed, "producer", o.index, "queue");
  const ordering = orderingKeys(o);
  let k = 0;
  /** @returns {Message} */
  const message = () => {
    const h = `${o.seed}.${o.index}.${k++}`;
    const x = rng.chance(o.poisonRate);
    const pad = rng.int(0, o.padMax);
    return { h, x, pad, key: null, seq: 0 };
  };
  const collisions = idCollisions(o);
  while (!o.control.stop && Date.now() < o.deadline) {
    // A quiet phase (quiet-phases.mjs) holds the producers here.
    await o.gate?.pass(p);
    // Now and then a send under an id chosen to collide, or of its own (id-collisions.mjs).
    const chosen = collisions.due();
    for (let i = 0; i < chosen && !o.control.stop; i++) {
      const r = await collisions.act({
        queue: o.queue,
        fresh: () => (o.budget.take(1) === 0 ? null : message()),
        send: (q, m, id, chose) => sendUnderId(o, p, q, m, id, chose),
      });
      if (r?.outcome === "fail") o.budget.refund(r.n);
    }
    if (chosen > 0) continue;
    const burst = rng.chance(o.burstRate);
    const n = o.budget.take(burst ? rng.int(1, 16) : rng.int(1, o.maxBatch));
    if (n === 0) break;
    const queue = o.pushQueue && route.chance(o.pushRate ?? 0) ? o.pushQueue : o.queue;
    await o.limiter.take(n);
    const messages = Array.from({ length: n }, message);
    /** @type {Array<{ outcome: string, n: number }>} */
    const outcomes = [];
    if (burst) {
      ordering.assign(messages);
      o.keyedPoison?.(messages);
      // Each single send is its own operation.
      await Promise.all(
        messages.map(async (m) => {
          const op = o.history.invoke(p, "send", {
            q: queue,
            hs: [m.h],
            single: true,
            ...(m.x ? { x: [m.h] } : {}),
            ...ordered([m]),
          });
          const r = await o.api.call("POST", `/${queue}/messages`, wire(m));
          const id = r.outcome === "ok" ? r.result?.message_id : undefined;
          const outcome = complete(o, op, r, typeof id === "string" ? [id] : undefined, 1);
          if (outcome === "ok") collisions.note(queue, [m], [id], undefined);
          outcomes.push({ outcome, n: 1 });
        }),
      );
    } else {
      const key = rng.chance(o.keyRate) ? `${o.seed}.${o.index}.${k}` : undefined;
      const delay = rng.chance(o.delayRate) ? { delay_seconds: rng.int(2, 4) } : {};
      if (!("delay_seconds" in delay)) ordering.assign(messages);
      o.keyedPoison?.(messages);
      const poison = messages.filter((m) => m.x).map((m) => m.h);
      let outcome = "unknown";
      // Tries until one is answered ok or refused, through a restart (about 3 s) if need be.
      for (let attempt = 0; attempt < (key ? KEYED_TRIES : 1) && outcome === "unknown" && !o.control.stop; attempt++) {
        if (attempt > 0) await sleep(rng.int(300, 800));
        const op = o.history.invoke(p, "send", {
          q: queue,
          hs: messages.map((m) => m.h),
          ...(poison.length ? { x: poison } : {}),
          ...(key ? { key, try: attempt + 1 } : {}),
          ...ordered(messages),
          ...("delay_seconds" in delay ? { d: delay.delay_seconds } : {}),
        });
        const r = await o.api.call(
          "POST",
          `/${queue}/messages/batch`,
          { messages: messages.map(wire), ...delay },
          key ? { "idempotency-key": key } : undefined,
        );
        const ids = r.outcome === "ok" ? r.result?.message_ids : undefined;
        const x = complete(o, op, r, Array.isArray(ids) ? ids : undefined, n);
        if (x === "ok") collisions.note(queue, messages, ids, key);
        // A refused try after an unknown one is still unknown (the first may have stored): try again.
        outcome = attempt > 0 && x === "fail" ? "unknown" : x;
      }
      outcomes.push({ outcome, n });
    }
    for (const x of outcomes) if (x.outcome === "fail") o.budget.refund(x.n);
    if (outcomes.some((x) => x.outcome !== "ok")) await sleep(rng.int(50, 250));
  }
}

/** @typedef {{ h: string, x: boolean, pad: number, key: string | null, seq: number }} Message  a producer's message; key: its ordering key */

/**
 * One message sent alone under an id the producer chose (id-collisions.mjs: `chose` says
 * why), logged as a send that names the id; returns the outcome logged.
 * @param {any} o @param {string} p @param {string} q @param {Message} m @param {string} id @param {string} chose
 */
async function sendUnderId(o, p, q, m, id, chose) {
  await o.limiter.take(1);
  const op = o.history.invoke(p, "send", { q, hs: [m.h], single: true, id, chose, ...(m.x ? { x: [m.h] } : {}) });
  const r = await o.api.call("POST", `/${q}/messages`, { ...wire(m), id });
  const got = r.outcome === "ok" ? r.result?.message_id : undefined;
  return complete(o, op, r, typeof got === "string" ? [got] : undefined, 1);
}

/**
 * A producer's ordering keys: each step, `assign` gives some of its messages a key (at
 * most one message a key, so a key's messages go one send after another) and the key's
 * next sequence number. Its draws come from a stream of their own, so a run without
 * `--ordered` sends what the seed made it send before ordering keys existed.
 * @param {{ seed: number, index: number, orderedRate?: number, orderingKeys?: number }} o
 */
function orderingKeys(o) {
  const rng = prng(o.seed, "producer", o.index, "order");
  const keys = o.orderingKeys ?? 20;
  /** The next sequence number of each key. */
  const next = /** @type {number[]} */ (Array(keys).fill(0));
  return {
    /** @param {Message[]} messages */
    assign(messages) {
      if (!o.orderedRate) return;
      const used = new Set();
      for (const m of messages) {
        if (used.size === keys || !rng.chance(o.orderedRate)) continue;
        let j = rng.int(0, keys - 1);
        while (used.has(j)) j = (j + 1) % keys;
        used.add(j);
        m.key = `p${o.index}-k${j}`;
        m.seq = next[j] = (next[j] ?? 0) + 1;
      }
    },
  };
}

/**
 * A message as sent: its body is {h, x?, k?, n?, pad?} in that order, every byte fixed by
 * them (harnessId in pull-consumer.mjs and the push consumer check it).
 * @param {Message} m
 */
function wire(m) {
  const body = {
    h: m.h,
    ...(m.x ? { x: 1 } : {}),
    ...(m.key ? { k: m.key, n: m.seq } : {}),
    ...(m.pad ? { pad: "x".repeat(m.pad) } : {}),
  };
  return { body, content_type: "json", ...(m.key ? { ordering_key: m.key } : {}) };
}

/** A send's ordered messages for its invoke value: [harness id, ordering key, sequence number]. @param {Message[]} messages */
function ordered(messages) {
  const ord = messages.filter((m) => m.key !== null).map((m) => [m.h, m.key, m.seq]);
  return ord.length ? { ord } : {};
}

/**
 * Logs a send's completion; returns the outcome logged.
 * @param {{ history: History, tally: { okMessages: number } }} o @param {number} op
 * @param {import("./client.mjs").Outcome} r @param {unknown[] | undefined} ids @param {number} n
 */
function complete(o, op, r, ids, n) {
  if (r.outcome === "ok") {
    if (ids?.length === n && ids.every((id) => typeof id === "string")) {
      o.history.complete(op, "ok", { ids });
      o.tally.okMessages += n;
      return "ok";
    }
    // A yes without the ids is not a yes the checker can use.
    o.history.complete(op, "unknown", {
      status: r.status,
      error: `ok without ${n} message ids: ${JSON.stringify(r.result).slice(0, 200)}`,
    });
    return "unknown";
  }
  o.history.complete(op, r.outcome, { status: r.status, error: r.error });
  return r.outcome;
}

/**
 * The operator who redrives the dead-letter queue while faults run: pauses
 * its consumer so dead-lettered messages gather, moves up to a seeded limit of them back
 * to the pull queue or the push queue, and lets the consumer run again. A poison message
 * moved back is retried out and dead-lettered again, so moves repeat: the checker must
 * see every message that was moved end in an ack, never lost between two queues.
 * Runs until the producers are done, so the drain can empty the dead-letter queue.
 * @param {{ seed: number, history: History, api: Api, dlq: string, targets: [string, string], control: Control, deadline: number,
 *   loadDone: () => boolean, held: { paused: boolean }, tally: { redrives: number, moved: number }, purger?: { during: () => Promise<void> }, gate?: { pass: (name: string) => Promise<void> } }} o
 *   purger: an operator who may purge the dead-letter queue while the redrive runs (dlq-purger.mjs)
 */
export async function runRedriver(o) {
  const rng = prng(o.seed, "redriver");
  try {
    while (!o.control.stop && Date.now() < o.deadline && !o.loadDone()) {
      await o.gate?.pass("redriver");
      o.held.paused = true;
      await sleep(rng.int(1500, 4000));
      const to = rng.chance(0.3) ? o.targets[1] : o.targets[0];
      const limit = rng.int(5, 200);
      const op = o.history.invoke("redriver", "redrive", { q: o.dlq, to, limit });
      const purging = o.purger?.during();
      const r = await o.api.call("POST", `/${o.dlq}/redrive`, { target_queue: to, limit, messages_per_second: 5000 });
      await purging;
      if (r.outcome === "ok") {
        o.history.complete(op, "ok", {
          moved: r.result?.moved ?? null,
          remaining: r.result?.remaining_matching ?? null,
        });
        o.tally.redrives++;
        o.tally.moved += Number(r.result?.moved ?? 0);
      } else o.history.complete(op, r.outcome, { status: r.status, error: r.error });
      o.held.paused = false;
      await sleep(rng.int(1500, 4000));
    }
  } finally {
    o.held.paused = false;
  }
}
