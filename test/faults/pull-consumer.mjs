// The pull consumers of a fault run: each pulls, acks, retries, drops and acks late, logging
// every operation to the history, with its decisions (batch sizes, waits, what to do with a
// delivery) drawn from its own seeded stream; and what the history keeps of a delivery (its
// lease's fingerprint, where the message is stored, its harness id). Every loop ends at a deadline.
import { createHash } from "node:crypto";
import { prng } from "./prng.mjs";
import { sleep } from "./workload.mjs";

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

/** Lease ids are long signed tokens: the history keeps a 64-bit fingerprint of each. */
export const fingerprint = (/** @type {string} */ token) =>
  createHash("sha256").update(token).digest("hex").slice(0, 16);

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
  // A shard that did not answer may have applied it (ack-api.ts UNREACHABLE): unknown, not stale.
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
 * is), and whether the body is garbled: not exactly the bytes runProducer (workload.mjs)
 * sent, which its id, poison flag, ordering key and sequence number, and padding of "x"
 * fix (a corrupted body must never be delivered).
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
