// What the checker reads from a history (history.mjs), before any rule: each send's outcome
// (its tries merged), every delivery (pulled, or given to a queue() handler), the acks and
// what they may have applied, the redrives, and when each fault happened.

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {{ h: string | null, id: string, q: string, a: number, l: string, s: string | null, r: string | null, x: boolean, g: boolean, inv: number, ok: number, vt: number, p: string,
 *   w?: number, push?: boolean, acked?: boolean }} Delivery  w: the pull's wait_time_ms (long polling); push: given to a queue() handler (inv = ok = when it started; acked: by that handler)
 * @typedef {{ n: number, kind: string, shard: string, inv: number, ok: number | null, fired: boolean }} Abort
 * @typedef {{ outcome: "invoked" | "ok" | "fail" | "unknown", id: string | null, poison: boolean, t: number, key: string | null, tries: number, before: Sent["outcome"] | null }} Sent
 */

import { pushDeliveries } from "./push-checker.mjs";

/** @param {Op[]} ops */
export function readRecords(ops) {
  const invokes = /** @type {Map<number, Op>} */ (new Map());
  const sends = /** @type {Map<string, Sent>} */ (new Map());
  const deliveries = /** @type {Delivery[]} */ ([]);
  /** first ack or retry sent under a lease: lease fingerprint -> t */
  const settledFrom = /** @type {Map<string, number>} */ (new Map());
  const retryAsked = /** @type {Set<string>} */ (new Set());
  const confirmedAcks = /** @type {Array<{ l: string, t: number }>} */ ([]);
  const kills = /** @type {Array<{ n: number, t: number, dead: number | null }>} */ ([]);
  const starts = /** @type {Array<{ n: number, inv: number, ok: number | null, readyMs: number | null }>} */ ([]);
  const aborts = /** @type {Abort[]} */ ([]);
  /** Corrupted message ids: when the corruption was invoked and answered. */
  const corrupted = /** @type {Map<string, { inv: number, ok: number }>} */ (new Map());
  /** Acks answered ok with some leases not applied: when, and how many. */
  const staleAcks = /** @type {Array<{ t: number, n: number }>} */ ([]);
  const sendOks = /** @type {number[]} */ ([]);
  const pullOks = /** @type {number[]} */ ([]);
  const unknownSends = /** @type {Array<{ t: number, n: number }>} */ ([]);
  /** @type {any} */
  let drained = null;
  /** @type {any} */
  let plan = null;
  const opCounts = /** @type {Record<string, Record<string, number>>} */ ({});
  const acks = { asked: 0, confirmed: 0, retriesConfirmed: 0, stale: 0, unknown: 0, failed: 0 };
  /** Leases an ack may have applied under: confirmed, or answered unknown, or never answered. */
  const mayBeAcked = /** @type {Set<string>} */ (new Set());
  /** Acks not answered yet: op -> the leases they name. */
  const openAcks = /** @type {Map<number, string[]>} */ (new Map());
  const redrives = /** @type {Array<{ inv: number, ok: number, outcome: string, moved: number }>} */ ([]);

  for (const o of ops) {
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      if (o.f === "send") {
        const poison = new Set(o.value?.x ?? []);
        for (const h of o.value?.hs ?? []) {
          // A second try with the same Idempotency-Key: what the first did still counts.
          const first = sends.get(h);
          sends.set(h, {
            outcome: "invoked",
            id: first?.id ?? null,
            poison: poison.has(h),
            t: o.t,
            key: o.value?.key ?? null,
            tries: (first?.tries ?? 0) + 1,
            before: first?.outcome ?? null,
          });
        }
      } else if (o.f === "ack") {
        for (const l of [...(o.value?.acks ?? []), ...(o.value?.retries ?? [])])
          if (!settledFrom.has(l)) settledFrom.set(l, o.t);
        for (const l of o.value?.retries ?? []) retryAsked.add(l);
        openAcks.set(o.op, o.value?.acks ?? []);
        acks.asked += (o.value?.acks?.length ?? 0) + (o.value?.retries?.length ?? 0);
      } else if (o.f === "kill") {
        kills.push({ n: o.value?.n ?? kills.length + 1, t: o.t, dead: null });
      } else if (o.f === "start") {
        starts.push({ n: o.value?.n ?? starts.length + 1, inv: o.t, ok: null, readyMs: null });
      } else if (o.f === "abort") {
        aborts.push({
          n: o.value?.n ?? aborts.length + 1,
          kind: o.value?.kind ?? "abort",
          shard: o.value?.shard ?? "",
          inv: o.t,
          ok: null,
          fired: false,
        });
      }
      continue;
    }
    const inv = invokes.get(o.op);
    invokes.delete(o.op);
    if (o.f === "phase") {
      if (o.value?.phase === "drained") drained = o.value;
      if (o.value?.phase === "load") plan = o.value;
      continue;
    }
    (opCounts[o.f] ??= {})[o.type] = (opCounts[o.f]?.[o.type] ?? 0) + 1;
    if (!inv) continue;
    if (o.f === "send") {
      const hs = /** @type {string[]} */ (inv.value?.hs ?? []);
      hs.forEach((h, i) => {
        const s = sends.get(h);
        if (!s) return;
        // Tries merged: ok if one was; else unknown if one may have stored; else failed.
        s.outcome =
          o.type === "ok" || s.before === "ok"
            ? "ok"
            : o.type === "unknown" || s.before === "unknown" || s.before === "invoked"
              ? "unknown"
              : "fail";
        s.t = o.t;
        if (o.type === "ok") s.id = o.value?.ids?.[i] ?? null;
      });
      if (o.type === "ok") sendOks.push(o.t);
      if (o.type === "unknown") unknownSends.push({ t: o.t, n: hs.length });
    } else if (o.f === "pull") {
      if (o.type !== "ok") continue;
      pullOks.push(o.t);
      for (const m of o.value?.msgs ?? []) {
        deliveries.push({
          h: m.h ?? null,
          id: m.id,
          q: inv.value?.q,
          a: m.a,
          l: m.l,
          s: m.s ?? null,
          r: m.r ?? null,
          x: m.x === 1,
          g: m.g === 1,
          inv: inv.t,
          ok: o.t,
          vt: inv.value?.vt,
          w: inv.value?.w ?? 0,
          p: o.p,
        });
      }
    } else if (o.f === "redrive") {
      redrives.push({ inv: inv.t, ok: o.t, outcome: o.type, moved: o.type === "ok" ? Number(o.value?.moved ?? 0) : 0 });
    } else if (o.f === "ack") {
      const named = openAcks.get(o.op) ?? [];
      openAcks.delete(o.op);
      if (o.type === "unknown") for (const l of named) mayBeAcked.add(l);
      if (o.type === "ok") {
        for (const l of o.value?.acked ?? []) mayBeAcked.add(l);
        for (const l of o.value?.acked ?? []) confirmedAcks.push({ l, t: o.t });
        acks.confirmed += o.value?.acked?.length ?? 0;
        acks.retriesConfirmed += o.value?.retried?.length ?? 0;
        acks.stale += o.value?.stale?.length ?? 0;
        // Warned that the shard did not answer: applied or not, nobody knows. Only an ack can
        // have ended the message; a retry left unknown (even one that dead-letters) leaves it somewhere.
        const asAcks = new Set(named);
        for (const l of o.value?.unknown ?? []) if (asAcks.has(l)) mayBeAcked.add(l);
        acks.unknown += o.value?.unknown?.length ?? 0;
        if (o.value?.stale?.length) staleAcks.push({ t: o.t, n: o.value.stale.length });
      } else {
        const n = (inv.value?.acks?.length ?? 0) + (inv.value?.retries?.length ?? 0);
        if (o.type === "unknown") acks.unknown += n;
        else acks.failed += n;
      }
    } else if (o.f === "kill") {
      const k = kills.find((x) => x.t === inv.t);
      if (k) k.dead = o.t;
    } else if (o.f === "corrupt") {
      if (o.type === "ok") for (const id of o.value?.ids ?? []) corrupted.set(id, { inv: inv.t, ok: o.t });
    } else if (o.f === "abort") {
      const a = aborts.find((x) => x.inv === inv.t);
      // Disarmed unfired after the load was over: a skipped fault (its "skipped" note counts it), not an attempt.
      if (a && o.value?.skipped === true) aborts.splice(aborts.indexOf(a), 1);
      else if (a) {
        a.ok = o.t;
        a.fired = o.type === "ok" && o.value?.fired === true;
      }
    } else if (o.f === "start") {
      const s = starts.find((x) => x.inv === inv.t);
      if (s && o.type === "ok") {
        s.ok = o.t;
        s.readyMs = o.value?.ready_ms ?? Math.round(o.t - inv.t);
      }
    }
  }
  // An ack still open when the history ended may have applied.
  for (const named of openAcks.values()) for (const l of named) mayBeAcked.add(l);
  // A send still open when the history ended may or may not have been stored.
  let incomplete = 0;
  for (const s of sends.values()) {
    if (s.outcome === "invoked") {
      s.outcome = "unknown";
      incomplete++;
    }
  }
  // A message a queue() handler was given is delivered; leases and acks are push-checker.mjs's.
  const pushed = pushDeliveries(ops);
  for (const d of pushed) {
    deliveries.push({
      h: d.h,
      id: d.id,
      q: d.q,
      a: d.a,
      l: `push:${d.d}:${d.id}`,
      s: null,
      r: null,
      x: d.x,
      g: d.g,
      inv: d.start,
      ok: d.start,
      vt: 0,
      p: "push-consumer",
      push: true,
      acked: d.outcome === "acked",
    });
  }

  return {
    sends,
    deliveries,
    pushed,
    settledFrom,
    retryAsked,
    confirmedAcks,
    mayBeAcked,
    acks,
    staleAcks,
    kills,
    starts,
    aborts,
    corrupted,
    redrives,
    sendOks,
    pullOks,
    unknownSends,
    incomplete,
    opCounts,
    drained,
    plan,
  };
}
