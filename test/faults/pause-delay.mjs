// In the fault run: an operator pausing and resuming delivery of the pull queue while
// pulls wait, and messages that become ready later under long polls (producers' delay_seconds,
// consumers' retries with a delay). The operator's loop, and the checker's rules for them:
//
//   paused   no pull answers with messages inside a confirmed pause: from the pause's ok answer
//            (plus PAUSE_SLACK_MS: a pull woken or a plan read just before the pause may still
//            lease, as a short pull that read the plan first does) to the resume's invoke
//   delayed  a delayed message is not delivered before its send's invoke plus its delay, and a
//            message retried with a delay not by a pull made after the retry's ok answer before
//            the retry's invoke plus its delay (both less DELAY_SLACK_MS of clock slack); the
//            retried copy only (same queue, shard and stored copy): one out of retries leaves
//            for the dead-letter queue at once, and a redrive brings back a new copy
import { prng } from "./prng.mjs";
import { sleep } from "../../src/kernel/sleep.ts";

export const PAUSE_SLACK_MS = 1000;
export const DELAY_SLACK_MS = 250;
/** The delays consumers retry with (s): most retries come back at once, some after 1 or 2 s. */
export const RETRY_DELAYS_S = [0, 0, 1, 2];

/**
 * Pauses delivery of `queue` for 1 to 3 s every 3 to 8 s while the producers send (until the
 * deadline at most), and always resumes (tried again until answered ok: a queue left paused
 * would never drain).
 * @param {{ seed: number, history: import("./history.mjs").History, api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string, control: { stop: boolean }, deadline: number, loadDone: () => boolean, tally: { pauses: number }, gate?: { pass: (name: string) => Promise<void> } }} o
 */
export async function runPauser(o) {
  const rng = prng(o.seed, "pauser");
  const over = () => o.control.stop || o.loadDone() || Date.now() >= o.deadline;
  while (!over()) {
    await o.gate?.pass("pauser");
    // Waits in short steps: the load may end meanwhile.
    for (const until = Date.now() + rng.int(3000, 8000); Date.now() < until && !over();) await sleep(200);
    if (over()) break;
    const paused = await setPaused(o, true);
    await sleep(rng.int(1000, 3000));
    if (paused !== "fail") {
      for (let i = 0; i < 30 && (await setPaused(o, false)) !== "ok"; i++) await sleep(500);
    }
    o.tally.pauses++;
  }
}

/** @param {Parameters<typeof runPauser>[0]} o @param {boolean} paused */
async function setPaused(o, paused) {
  const op = o.history.invoke("operator", paused ? "pause" : "resume", { q: o.queue });
  const r = await o.api.call("PATCH", `/${o.queue}`, { settings: { delivery_paused: paused } });
  o.history.complete(op, r.outcome, r.outcome === "ok" ? {} : { status: r.status, error: r.error });
  return r.outcome;
}

/**
 * The rules above over a history (history.mjs ops, in order).
 * @param {import("./history.mjs").Op[]} ops
 * @returns {{ failures: string[], figures: { pauses: number, leased_while_paused: number, delayed: number, early_delayed: number, retried_with_delay: number, early_retried: number }, examples: any[] }}
 */
export function checkPausesAndDelays(ops) {
  const invokes = new Map();
  /** Confirmed pause windows per queue: [start, end]. */
  const windows = /** @type {Map<string, Array<{ from: number, to: number }>>} */ (new Map());
  const openPause = /** @type {Map<string, number>} */ (new Map());
  /** h -> when it may first be delivered (a delayed send) */
  const dueAt = /** @type {Map<string, number>} */ (new Map());
  /** lease -> the delivery under it: its harness id and which stored copy it was */
  const byLease = /** @type {Map<string, { h: string, copy: string }>} */ (new Map());
  /** h -> retries with a delay, confirmed: { copy, after: the ack's answer, due } */
  const retryDue = /** @type {Map<string, Array<{ copy: string, after: number, due: number }>>} */ (new Map());
  /** Pull answers with messages, for the pause rule (windows close later in the history). */
  const answers = /** @type {Array<{ q: string, t: number, n: number }>} */ ([]);
  const examples = [];
  let delayed = 0,
    earlyDelayed = 0,
    retriedWithDelay = 0,
    earlyRetried = 0;
  for (const o of ops) {
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      if (o.f === "resume") {
        const q = o.value?.q;
        const from = openPause.get(q);
        if (from !== undefined) {
          (windows.get(q) ?? windows.set(q, []).get(q))?.push({ from, to: o.t });
          openPause.delete(q);
        }
      }
      continue;
    }
    const inv = invokes.get(o.op);
    invokes.delete(o.op);
    if (!inv) continue;
    if (o.f === "pause" && o.type === "ok") openPause.set(inv.value?.q, o.t);
    else if (o.f === "send" && inv.value?.d && o.type !== "fail") {
      // A send tried again (its first answer lost) may have been stored by an earlier attempt:
      // the message is due from the earliest attempt that may have stored it.
      for (const h of inv.value?.hs ?? []) dueAt.set(h, Math.min(dueAt.get(h) ?? Infinity, inv.t + inv.value.d * 1000));
    } else if (o.f === "ack" && o.type === "ok" && inv.value?.rd) {
      for (const l of o.value?.retried ?? []) {
        const d = byLease.get(l);
        if (!d) continue;
        retriedWithDelay++;
        (retryDue.get(d.h) ?? retryDue.set(d.h, []).get(d.h))?.push({
          copy: d.copy,
          after: o.t,
          due: inv.t + inv.value.rd * 1000,
        });
      }
    } else if (o.f === "pull" && o.type === "ok") {
      const msgs = o.value?.msgs ?? [];
      if (msgs.length) answers.push({ q: inv.value?.q, t: o.t, n: msgs.length });
      for (const m of msgs) {
        const copy = `${inv.value?.q}|${m.s ?? ""}|${m.r ?? ""}`;
        if (m.h) byLease.set(m.l, { h: m.h, copy });
        const due = m.h ? dueAt.get(m.h) : undefined;
        if (due !== undefined) {
          delayed++;
          dueAt.delete(m.h); // its first delivery only
          if (o.t < due - DELAY_SLACK_MS)
            (earlyDelayed++, examples.push({ rule: "delayed", h: m.h, answered: o.t, due }));
        }
        const retries = (m.h ? retryDue.get(m.h) : undefined) ?? [];
        for (const r of retries) {
          if (r.copy === copy && inv.t >= r.after && o.t < r.due - DELAY_SLACK_MS)
            (earlyRetried++, examples.push({ rule: "retried", h: m.h, copy, answered: o.t, due: r.due }));
        }
        // Its next delivery of that copy is the one the retry delayed.
        if (m.h && retries.length)
          retryDue.set(
            m.h,
            retries.filter((r) => r.copy !== copy),
          );
      }
    }
  }
  // A pause never resumed in the history stays a window to its end.
  for (const [q, from] of openPause) (windows.get(q) ?? windows.set(q, []).get(q))?.push({ from, to: Infinity });
  let leasedWhilePaused = 0;
  for (const a of answers) {
    const w = (windows.get(a.q) ?? []).find((w) => a.t >= w.from + PAUSE_SLACK_MS && a.t <= w.to);
    if (w) ((leasedWhilePaused += a.n), examples.push({ rule: "paused", q: a.q, answered: a.t, pause: w }));
  }
  const failures = [];
  if (leasedWhilePaused)
    failures.push(`${leasedWhilePaused} messages leased to pulls inside a confirmed pause of delivery`);
  if (earlyDelayed) failures.push(`${earlyDelayed} delayed messages delivered before their delay`);
  if (earlyRetried) failures.push(`${earlyRetried} retried messages delivered before their retry delay`);
  const pauses = [...windows.values()].reduce((n, w) => n + w.length, 0);
  return {
    failures,
    figures: {
      pauses,
      leased_while_paused: leasedWhilePaused,
      delayed,
      early_delayed: earlyDelayed,
      retried_with_delay: retriedWithDelay,
      early_retried: earlyRetried,
    },
    examples: examples.slice(0, 10),
  };
}
