// The clients of a fault run: producers that send batches over HTTP and pull consumers
// that pull, ack, retry, drop and ack late, each logging every operation to the history.
// Each draws its decisions (batch sizes, which messages are poison, what to do with a
// delivery, pause lengths) from its own seeded stream. Every loop ends at a deadline.
import { createHash } from "node:crypto";
import { idCollisions } from "./id-collisions.mjs";
import { prng } from "./prng.mjs";
import { sleep } from "../../src/kernel/sleep.ts";

/**
 * @typedef {import("./history.mjs").History} History
 * @typedef {ReturnType<typeof import("./client.mjs").apiClient>} Api
 * @typedef {{ stop: boolean }} Control
 */

/**
 * A delivery in the history: harness id, message id, attempts, lease fingerprint, and
 * where the message is stored: its storage shard and copy (where it was first written there), read from the lease id.
 */
/** @typedef {{ h: string | null, id: string, a: number, l: string, s?: string, r?: string, k?: string, x?: 1, g?: 1 }} LoggedDelivery  k: the ordering key the pull answered with */

/** Tries of a batch with an Idempotency-Key whose outcome stays unknown. */
const KEYED_TRIES = 8;

// The harness modules take their waits from here.
export { sleep };

/** Lease ids are long signed tokens: the history keeps a 64-bit fingerprint of each. */
export const fingerprint = (/** @type {string} */ token) =>
  createHash("sha256").update(token).digest("hex").slice(0, 16);

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
 * them (harnessId and the push consumer check it).
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
 * One pull consumer. For each delivery it acks (most), retries with no delay (a
 * poison message always, others at `retryRate`), drops it, never settling (`dropRate`,
 * a consumer that crashed), or acks it after its visibility timeout has passed
 * (`lateRate`). Acks and retries of one pull go in one request.
 * With `waitMs` each pull long-polls for one of those waits (its lease is granted at the end of
 * the wait: the checker's lease windows, from the pull's invoke, stay lower bounds). At
 * `abandonRate` a long poll is abandoned part way, as a client that stops does: the request
 * is aborted and the pull cancelled by its wait id (POST .../messages/pull/cancel), its
 * outcome unknown; whatever it may have leased comes back when its lease ends.
 * While `held.paused` it pulls nothing (the dead-letter queue's consumer, while the
 * redriver lets messages gather there to move them back).
 * @param {{ name: string, seed: number, history: History, api: Api, queue: string, control: Control, deadline: number,
 *   minBatch: number, maxBatch: number, visibilityMs: number[], retryRate: number, dropRate: number, lateRate: number,
 *   retryPoison: boolean, late: Set<Promise<void>>, tally: { delivered: number, abandoned?: number, cancelled?: number }, held?: { paused: boolean }, waitMs?: number[], abandonRate?: number, retryDelays?: number[] }} o
 */
export async function runConsumer(o) {
  const rng = prng(o.seed, o.name);
  while (!o.control.stop && Date.now() < o.deadline) {
    if (o.held?.paused) {
      await sleep(100);
      continue;
    }
    const batch = rng.int(o.minBatch, o.maxBatch);
    const vt = rng.pick(o.visibilityMs);
    // Long polling: a pull that finds nothing waits this long for messages (0: answers at once).
    const wait = o.waitMs ? rng.pick(o.waitMs) : 0;
    const op = o.history.invoke(o.name, "pull", { q: o.queue, n: batch, vt, ...(wait ? { w: wait } : {}) });
    const waitId = `${o.name}-${op}-${rng.int(0, 1e9)}`
      .replace(/[^A-Za-z0-9_-]/g, "_")
      .padEnd(16, "0")
      .slice(0, 64);
    const gone = wait >= 1000 && rng.next() < (o.abandonRate ?? 0) ? new AbortController() : null;
    const abandonAt = gone ? setTimeout(() => gone.abort(), rng.int(50, wait - 50)) : undefined;
    const r = await o.api.call(
      "POST",
      `/${o.queue}/messages/pull`,
      { batch_size: batch, visibility_timeout_ms: vt, ...(wait ? { wait_time_ms: wait, wait_id: waitId } : {}) },
      undefined,
      gone?.signal,
    );
    clearTimeout(abandonAt);
    if (gone?.signal.aborted && r.outcome !== "ok") {
      o.history.complete(op, "unknown", { status: null, error: "abandoned by the client" });
      o.tally.abandoned = (o.tally.abandoned ?? 0) + 1;
      const c = await o.api.call("POST", `/${o.queue}/messages/pull/cancel`, { wait_id: waitId });
      if (c.outcome === "ok" && c.result?.cancelled === true) o.tally.cancelled = (o.tally.cancelled ?? 0) + 1;
      continue;
    }
    if (r.outcome !== "ok") {
      o.history.complete(op, r.outcome, { status: r.status, error: r.error });
      await sleep(rng.int(100, 300));
      continue;
    }
    const raw = /** @type {any[]} */ (Array.isArray(r.result?.messages) ? r.result.messages : []);
    /** @type {LoggedDelivery[]} */
    const msgs = [];
    /** @type {Array<{ token: string, l: string }>} */
    const acks = [];
    /** @type {Array<{ token: string, l: string }>} */
    const retries = [];
    for (const m of raw) {
      const token = String(m.lease_id);
      const l = fingerprint(token);
      const { h, poison, garbled } = harnessId(m);
      // The ordering key the service says the message has: the order checker compares it with the one sent.
      const key = typeof m.ordering_key === "string" ? { k: m.ordering_key } : {};
      msgs.push({
        h,
        id: String(m.id),
        a: Number(m.attempts),
        l,
        ...storedAt(token),
        ...key,
        ...(poison ? { x: /** @type {1} */ (1) } : {}),
        ...(garbled ? { g: /** @type {1} */ (1) } : {}),
      });
      const roll = rng.next();
      if (o.retryPoison && poison) retries.push({ token, l });
      else if (roll < o.dropRate) continue;
      else if (roll < o.dropRate + o.lateRate) {
        const later = sleep(vt + 500).then(() => settle(o, [{ token, l }], []));
        o.late.add(later);
        void later.finally(() => o.late.delete(later));
      } else if (roll < o.dropRate + o.lateRate + o.retryRate) retries.push({ token, l });
      else acks.push({ token, l });
    }
    o.history.complete(op, "ok", { msgs, backlog: r.result?.message_backlog_count ?? null });
    o.tally.delivered += msgs.length;
    if (acks.length || retries.length) await settle(o, acks, retries, o.retryDelays ? rng.pick(o.retryDelays) : 0);
    if (msgs.length === 0 && !wait) await sleep(rng.int(50, 150));
  }
}

/**
 * One ack request. The answer's warnings name the lease ids that did not count; the
 * rest are confirmed.
 * @param {{ name: string, history: History, api: Api, queue: string }} o
 * @param {Array<{ token: string, l: string }>} acks
 * @param {Array<{ token: string, l: string }>} retries
 * @param {number} [delay] the retries' delay_seconds
 */
async function settle(o, acks, retries, delay = 0) {
  // rd: the retries' delay, for the checker's "not before its retry delay" (pause-delay.mjs).
  const op = o.history.invoke(o.name, "ack", {
    q: o.queue,
    acks: acks.map((a) => a.l),
    retries: retries.map((a) => a.l),
    ...(delay && retries.length ? { rd: delay } : {}),
  });
  const r = await o.api.call("POST", `/${o.queue}/messages/ack`, {
    ...(acks.length ? { acks: acks.map((a) => ({ lease_id: a.token })) } : {}),
    ...(retries.length ? { retries: retries.map((a) => ({ lease_id: a.token, delay_seconds: delay })) } : {}),
  });
  if (r.outcome !== "ok") {
    o.history.complete(op, r.outcome, { status: r.status, error: r.error });
    return;
  }
  const warnings = /** @type {Record<string, string>} */ (r.result?.warnings ?? {});
  const counted = (/** @type {{ token: string }} */ a) => !(a.token in warnings);
  // A shard that did not answer may have applied it (pull-api.ts UNREACHABLE): unknown, not stale.
  const unsure = (/** @type {{ token: string }} */ a) => warnings[a.token]?.includes("did not answer") === true;
  o.history.complete(op, "ok", {
    acked: acks.filter(counted).map((a) => a.l),
    retried: retries.filter(counted).map((a) => a.l),
    stale: [...acks, ...retries].filter((a) => !counted(a) && !unsure(a)).map((a) => a.l),
    unknown: [...acks, ...retries].filter(unsure).map((a) => a.l),
    ackCount: r.result?.ackCount ?? null,
    retryCount: r.result?.retryCount ?? null,
  });
}

/**
 * The storage shard and stored copy a lease id names. A lease id is `<payload>.<signature>`,
 * the payload base64url JSON [account, queue, shard, message id, "<copy>-<seg>.<slot>-<lease>",
 * attempts] (broker/http/lease-tokens.ts, storage-shard/segments/segment.ts): the checker uses the
 * shard to tell which leases a storage shard's reset ended, and the copy (where the message
 * was first written on that shard, kept when a retry rewrites it) to see a message id stored twice.
 * @param {string} token
 * @returns {{ s?: string, r?: string }}
 */
function storedAt(token) {
  try {
    const v = JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString("utf8"));
    const copy = String(v[4]).split("-")[0];
    return typeof v[2] === "string" && copy ? { s: v[2], r: copy } : {};
  } catch {
    return {};
  }
}

/**
 * The harness id in a pulled message's body (JSON bodies come base64-encoded, text as it
 * is), and whether the body is garbled: not exactly the bytes runProducer sent, which
 * its id, poison flag, ordering key and sequence number, and padding of "x" fix (a
 * corrupted body must never be delivered).
 * @param {any} m
 * @returns {{ h: string | null, poison: boolean, garbled: boolean }}
 */
function harnessId(m) {
  try {
    const type = m?.metadata?.["CF-Content-Type"];
    const text = type === "text" ? String(m.body) : Buffer.from(String(m.body), "base64").toString("utf8");
    const body = JSON.parse(text);
    const h = typeof body?.h === "string" ? body.h : null;
    const pad = typeof body?.pad === "string" && /^x+$/.test(body.pad) ? body.pad : undefined;
    const order = typeof body?.k === "string" && Number.isInteger(body?.n) ? { k: body.k, n: body.n } : {};
    const sent = JSON.stringify({ h, ...(body?.x === 1 ? { x: 1 } : {}), ...order, ...(pad ? { pad } : {}) });
    return { h, poison: body?.x === 1, garbled: h === null || text !== sent };
  } catch {
    return { h: null, poison: false, garbled: true };
  }
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
