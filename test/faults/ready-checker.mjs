// The checker's "ready too long" rule: no message stays ready longer than
// READY_LIMIT_MS while a consumer is asking for messages. checker.mjs calls it; it reads the
// history and nothing else.
//
// When a message is ready (the latest moment the history allows, so that a late start never
// makes a false alarm):
//   sent       its send's ok answer plus its delay_seconds (a delayed batch);
//   retried    a retry's ok answer plus its delay_seconds (rd), for the lease it named;
//   lease end  a pull's answer plus its visibility timeout, when no ack or retry of that lease
//              was sent before then (dropped, or acked late); an ack answered unknown, or sent
//              in time and refused, tells nothing: no window;
//   push end   a queue() invocation's end, when it did not ack the message (retried, threw);
//   moved      into a queue (not a dead-letter queue) from another queue or as a new copy
//              (fewer attempts than before): the ok answer of the last redrive into that queue
//              answered before the delivery (none: no window).
// It stays ready until its next delivery (a pull's answer, a queue() invocation's start), in
// the queue that delivery came from. A message never delivered again is the lost rule's.
//
// While a consumer is asking:
//   pull queue  a pull of that queue was in flight (invoke to answer) and answered ok with room
//               (fewer messages than its batch size): a full batch, a pull refused or cut off,
//               and the time between pulls (a consumer settling, or the dead-letter queue's
//               consumer held while the redriver gathers messages) are not asking;
//   push queue  no queue() invocation of that queue is running: the consumer shards scale with
//               the backlog, so a small one has one consumer shard, which hands out one batch
//               at a time (a hung handler holds the next batch back).
//
// Excused, taken out of the asking time (each with EXCUSE_GRACE_MS after its end: a restarted
// object recovers its state, a broker re-reads the map, before delivery runs again):
//   down       a hard kill's invoke to its restart's ok answer (no answer: to the end);
//   reset      a storage shard reset (abort) of the shard the delivery came from, invoke to
//              answer; a consumer shard reset (consumer-abort) of the delivering push queue;
//   control    a control-plane fault (Coordinator reset, throwing alarms, a stale map) from its
//              invoke until its answer (logged once it recovered or timed out);
//   paused     a pause of the queue's delivery, its invoke to its resume's answer;
//   ordered    a message with an ordering key, until every earlier message of its key (same
//              queue) was last settled: the latest ack or retry answer of its deliveries in a
//              queue that is not a dead-letter queue, or its lease end / invocation end when
//              none came; the key's lane waits for the previous message.

/** The most a message may stay ready while a consumer asks, excuses taken out. */
export const READY_LIMIT_MS = 10_000;
/** After an excuse ends: objects reset or restarted reload, brokers re-read the map. */
export const EXCUSE_GRACE_MS = 5_000;
/** How many of the worst windows the result keeps. */
const WORST = 10;

/**
 * @typedef {import("./history.mjs").Op} Op
 * @typedef {[number, number]} Span
 * @typedef {{ h: string, q: string, t: number, a: number, s: string | null, push: boolean, l: string, vt: number, end: number | null, acked: boolean }} Got
 *   one delivery: t the pull's answer or the invocation's start; end: the lease end or the invocation's end
 */

/**
 * @param {Op[]} ops
 * @param {{ limitMs?: number }} [opts]
 */
export function checkReady(ops, opts = {}) {
  const limit = opts.limitMs ?? READY_LIMIT_MS;
  const invokes = /** @type {Map<number, Op>} */ (new Map());
  /** h -> [queue, ready at (ok + delay), key, seq] of its first acknowledged send */
  const sent = /** @type {Map<string, { q: string, ready: number, key: string | null, seq: number }>} */ (new Map());
  const deliveries = /** @type {Map<string, Got[]>} */ (new Map());
  const byLease = /** @type {Map<string, Got>} */ (new Map());
  /** Per lease: the first ack/retry invoke naming it, and how it was answered. */
  const settle =
    /** @type {Map<string, { inv: number, ok: number | null, how: "acked" | "retried" | "stale" | "unknown", rd: number }>} */ (
      new Map()
    );
  /** Per queue: spans of pulls answered with room. */
  const asking = /** @type {Map<string, Span[]>} */ (new Map());
  /** Per queue: spans while a queue() invocation ran. */
  const pushBusy = /** @type {Map<string, Span[]>} */ (new Map());
  const pushQueues = /** @type {Set<string>} */ (new Set());
  const down = /** @type {Span[]} */ ([]);
  const control = /** @type {Span[]} */ ([]);
  const resets = /** @type {Array<{ shard: string, span: Span }>} */ ([]);
  const consumerResets = /** @type {Map<string, Span[]>} */ (new Map());
  const paused = /** @type {Map<string, Span[]>} */ (new Map());
  const openPause = /** @type {Map<string, number>} */ (new Map());
  const redrives = /** @type {Map<string, number[]>} */ (new Map());
  const openKills = /** @type {number[]} */ ([]);
  let end = 0;
  const add = (/** @type {Map<string, Span[]>} */ m, /** @type {string} */ k, /** @type {Span} */ s) =>
    (m.get(k) ?? m.set(k, []).get(k))?.push(s);

  for (const o of ops) {
    end = Math.max(end, o.t);
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      if (o.f === "kill") openKills.push(o.t);
      else if (o.f === "pause" && !openPause.has(o.value?.q)) openPause.set(o.value?.q, o.t);
      else if (o.f === "ack") {
        for (const l of [...(o.value?.acks ?? []), ...(o.value?.retries ?? [])])
          if (!settle.has(l)) settle.set(l, { inv: o.t, ok: null, how: "unknown", rd: Number(o.value?.rd ?? 0) });
      } else if (o.f === "push") {
        const q = String(o.value?.q ?? "");
        pushQueues.add(q);
        for (const m of o.value?.msgs ?? []) {
          if (!m.h) continue;
          const g = {
            h: m.h,
            q,
            t: o.t,
            a: Number(m.a),
            s: null,
            push: true,
            l: `push:${o.op}:${m.id}`,
            vt: 0,
            end: null,
            acked: false,
          };
          add(/** @type {any} */ (deliveries), m.h, /** @type {any} */ (g));
          byLease.set(g.l, g);
        }
      }
      continue;
    }
    const inv = invokes.get(o.op);
    invokes.delete(o.op);
    if (!inv) continue;
    if (o.f === "send" && o.type === "ok") {
      const keys = new Map((inv.value?.ord ?? []).map((/** @type {[string, string, number]} */ x) => [x[0], x]));
      for (const h of inv.value?.hs ?? []) {
        if (sent.has(h)) continue;
        const k = keys.get(h);
        sent.set(h, {
          q: inv.value?.q,
          ready: o.t + Number(inv.value?.d ?? 0) * 1000,
          key: k ? k[1] : null,
          seq: k ? k[2] : 0,
        });
      }
    } else if (o.f === "pull" && o.type === "ok") {
      const q = inv.value?.q;
      const msgs = o.value?.msgs ?? [];
      if (msgs.length < Number(inv.value?.n ?? Infinity)) add(asking, q, [inv.t, o.t]);
      for (const m of msgs) {
        if (!m.h) continue;
        const g = {
          h: m.h,
          q,
          t: o.t,
          a: Number(m.a),
          s: m.s ?? null,
          push: false,
          l: m.l,
          vt: Number(inv.value?.vt ?? 0),
          end: o.t + Number(inv.value?.vt ?? 0),
          acked: false,
        };
        add(/** @type {any} */ (deliveries), m.h, /** @type {any} */ (g));
        byLease.set(m.l, g);
      }
    } else if (o.f === "ack") {
      for (const l of [...(inv.value?.acks ?? []), ...(inv.value?.retries ?? [])]) {
        const s = settle.get(l);
        if (!s || s.inv !== inv.t) continue;
        s.ok = o.t;
        if (o.type !== "ok") continue;
        if ((o.value?.acked ?? []).includes(l)) s.how = "acked";
        else if ((o.value?.retried ?? []).includes(l)) s.how = "retried";
        else if ((o.value?.stale ?? []).includes(l)) s.how = "stale";
      }
    } else if (o.f === "push") {
      const q = String(inv.value?.q ?? "");
      add(pushBusy, q, [inv.t, o.t]);
      const v = o.value ?? {};
      // A late ack or retry (from waitUntil) came at a time the history does not have: as if acked.
      const settledLate = new Set([...(v.acked ?? []), ...(v.late_acked ?? []), ...(v.late_retried ?? [])]);
      const retried = new Set(v.retried ?? []);
      for (const m of inv.value?.msgs ?? []) {
        const g = byLease.get(`push:${o.op}:${m.id}`);
        if (!g) continue;
        g.end = o.t;
        g.acked = !retried.has(m.id) && settledLate.has(m.id);
      }
    } else if (o.f === "kill") {
      // Its restart closes the span (below).
    } else if (o.f === "start") {
      const k = openKills.shift();
      if (k !== undefined) down.push([k, o.type === "ok" ? o.t : Infinity]);
    } else if (o.f === "abort" && o.value?.fired === true) {
      resets.push({ shard: String(inv.value?.shard ?? ""), span: [inv.t, o.t] });
    } else if (o.f === "consumer-abort" && o.value?.fired === true) {
      add(consumerResets, String(inv.value?.q ?? ""), [inv.t, o.t]);
    } else if (o.f === "control") {
      control.push([inv.t, o.t]);
    } else if (o.f === "resume" && o.type === "ok") {
      const from = openPause.get(inv.value?.q);
      if (from !== undefined) {
        add(paused, inv.value?.q, [from, o.t]);
        openPause.delete(inv.value?.q);
      }
    } else if (o.f === "redrive" && o.type === "ok") {
      (redrives.get(inv.value?.to) ?? redrives.set(inv.value?.to, []).get(inv.value?.to))?.push(o.t);
    }
  }
  for (const k of openKills) down.push([k, Infinity]);
  for (const [q, from] of openPause) add(paused, q, [from, Infinity]);
  // A push invocation never ended (cut off by a kill) was busy to the kill: the down span covers the rest.
  for (const ds of deliveries.values())
    for (const g of ds) if (g.push && g.end === null) add(pushBusy, g.q, [g.t, g.t]);

  const isDlq = (/** @type {string} */ q) => q.endsWith("-dlq");
  const grace = (/** @type {Span} */ s) => /** @type {Span} */ ([s[0], s[1] + EXCUSE_GRACE_MS]);

  // When each message of an ordering key stopped holding its lane back.
  const released = /** @type {Map<string, number>} */ (new Map());
  for (const [h, ds] of deliveries) {
    let last = -Infinity;
    for (const g of ds) {
      if (isDlq(g.q)) continue;
      const s = g.push ? null : settle.get(g.l);
      last = Math.max(last, s?.ok ?? g.end ?? g.t);
    }
    released.set(h, last);
  }
  /** key|queue -> [seq, h] sorted */
  const lanes = /** @type {Map<string, Array<[number, string]>>} */ (new Map());
  for (const [h, s] of sent)
    if (s.key !== null)
      (lanes.get(`${s.key}|${s.q}`) ?? lanes.set(`${s.key}|${s.q}`, []).get(`${s.key}|${s.q}`))?.push([s.seq, h]);
  /** h -> until when its key's earlier messages held it back */
  const laneHeld = /** @type {Map<string, number>} */ (new Map());
  for (const lane of lanes.values()) {
    lane.sort((a, b) => a[0] - b[0]);
    let before = -Infinity;
    for (const [, h] of lane) {
      laneHeld.set(h, before);
      before = Math.max(before, released.get(h) ?? -Infinity);
    }
  }

  // Merged once: a full run has hundreds of thousands of pulls, and each window reads its part by binary search.
  const askMerged = new Map([...asking].map(([q, spans]) => [q, merge(spans)]));
  const busyMerged = new Map([...pushBusy].map(([q, spans]) => [q, merge(spans)]));
  const downGrace = merge(down.map(grace));
  const controlGrace = merge(control.map(grace));
  const pausedGrace = new Map([...paused].map(([q, spans]) => [q, merge(spans.map(grace))]));
  const resetGrace = (/** @type {Got} */ next) =>
    merge([
      ...resets.filter((r) => next.push || r.shard === next.s).map((r) => grace(r.span)),
      ...(next.push ? (consumerResets.get(next.q) ?? []).map(grace) : []),
    ]);

  let windows = 0;
  let tooLong = 0;
  let worstMs = 0;
  const excusedMs = { down: 0, reset: 0, control: 0, paused: 0, ordered: 0 };
  const worst =
    /** @type {Array<{ h: string, q: string, ready_at: number, delivered_at: number, waited_ms: number, asking_ms: number, why: string }>} */ ([]);
  const windowOf = (
    /** @type {string} */ h,
    /** @type {number} */ ready,
    /** @type {Got} */ next,
    /** @type {string} */ why,
  ) => {
    if (!(next.t > ready)) return;
    windows++;
    const span = /** @type {Span} */ ([ready, next.t]);
    const ask = next.push
      ? subtract([span], clip(busyMerged.get(next.q) ?? [], span))
      : clip(askMerged.get(next.q) ?? [], span);
    const held = laneHeld.get(h);
    /** @type {Array<[keyof typeof excusedMs, Span[]]>} */
    const excuses = [
      ["down", downGrace],
      ["reset", resetGrace(next)],
      ["control", controlGrace],
      ["paused", pausedGrace.get(next.q) ?? []],
      ["ordered", held !== undefined && held > ready ? [grace([ready, held])] : []],
    ];
    let left = ask;
    for (const [kind, spans] of excuses) {
      const after = subtract(left, spans);
      excusedMs[kind] += length(left) - length(after);
      left = after;
    }
    const ms = length(left);
    worstMs = Math.max(worstMs, ms);
    if (ms > limit) {
      tooLong++;
      worst.push({
        h,
        q: next.q,
        ready_at: Math.round(ready),
        delivered_at: Math.round(next.t),
        waited_ms: Math.round(next.t - ready),
        asking_ms: Math.round(ms),
        why,
      });
    }
  };
  for (const [h, ds] of deliveries) {
    ds.sort((a, b) => a.t - b.t);
    const s = sent.get(h);
    const first = /** @type {Got} */ (ds[0]);
    if (s && first.q === s.q) windowOf(h, s.ready, first, "sent");
    for (let i = 1; i < ds.length; i++) {
      const prev = /** @type {Got} */ (ds[i - 1]);
      const next = /** @type {Got} */ (ds[i]);
      let ready = readyAfter(prev, settle);
      if (ready === null) continue;
      let why = prev.push ? "push end" : settle.get(prev.l)?.how === "retried" ? "retried" : "lease end";
      if (!isDlq(next.q) && (prev.q !== next.q || next.a < prev.a)) {
        const moved = (redrives.get(next.q) ?? []).filter((t) => t <= next.t);
        if (!moved.length) continue;
        ready = Math.max(ready, /** @type {number} */ (moved[moved.length - 1]));
        why = "moved";
      }
      windowOf(h, ready, next, why);
    }
  }
  worst.sort((a, b) => b.asking_ms - a.asking_ms);
  const failures = tooLong
    ? [`${tooLong} times a message stayed ready longer than ${limit / 1000} s while a consumer asked for messages`]
    : [];
  return {
    failures,
    figures: {
      windows,
      too_long: tooLong,
      limit_ms: limit,
      worst_asking_ms: Math.round(worstMs),
      excused_ms: Object.fromEntries(Object.entries(excusedMs).map(([k, v]) => [k, Math.round(v)])),
    },
    examples: worst.slice(0, WORST),
  };
}

/**
 * When a delivery let its message be ready again, or null when the history cannot say (acked, an
 * ack whose outcome is unknown, a push invocation cut off).
 * @param {Got} g @param {Map<string, { inv: number, ok: number | null, how: string, rd: number }>} settle
 */
function readyAfter(g, settle) {
  if (g.push) return g.acked || g.end === null ? null : g.end;
  const s = settle.get(g.l);
  if (!s) return /** @type {number} */ (g.end);
  if (s.how === "retried" && s.ok !== null) return s.ok + s.rd * 1000;
  // Sent after the lease ended (a late ack): ready from the lease's end until whatever came next.
  if (s.inv >= /** @type {number} */ (g.end)) return /** @type {number} */ (g.end);
  // Refused as stale although sent in time: the lease was gone already (a reset); when, unknown.
  return null;
}

/** The union of spans, sorted and merged. @param {Span[]} spans @returns {Span[]} */
function merge(spans) {
  const s = [...spans].sort((a, b) => a[0] - b[0]);
  /** @type {Span[]} */
  const out = [];
  for (const x of s) {
    const last = out[out.length - 1];
    if (last && x[0] <= last[1]) last[1] = Math.max(last[1], x[1]);
    else out.push([x[0], x[1]]);
  }
  return out;
}

/** The parts of `merged` (sorted, disjoint: merge's) inside `w`. @param {Span[]} merged @param {Span} w @returns {Span[]} */
function clip(merged, w) {
  let lo = 0;
  let hi = merged.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (/** @type {Span} */ (merged[mid])[1] <= w[0]) lo = mid + 1;
    else hi = mid;
  }
  /** @type {Span[]} */
  const out = [];
  for (let i = lo; i < merged.length && /** @type {Span} */ (merged[i])[0] < w[1]; i++) {
    const s = /** @type {Span} */ (merged[i]);
    out.push([Math.max(s[0], w[0]), Math.min(s[1], w[1])]);
  }
  return out;
}

/** `from` less `spans`. @param {Span[]} from @param {Span[]} spans @returns {Span[]} */
function subtract(from, spans) {
  const cut = merge(spans);
  /** @type {Span[]} */
  const out = [];
  for (const f of merge(from)) {
    let start = f[0];
    for (const c of cut) {
      if (c[1] <= start || c[0] >= f[1]) continue;
      if (c[0] > start) out.push([start, c[0]]);
      start = Math.max(start, c[1]);
      if (start >= f[1]) break;
    }
    if (start < f[1]) out.push([start, f[1]]);
  }
  return out;
}

/** @param {Span[]} spans */
function length(spans) {
  return spans.reduce((n, s) => n + (s[1] - s[0]), 0);
}
