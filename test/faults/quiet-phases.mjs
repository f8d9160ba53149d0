// Quiet phases: at seeded places in the fault schedule, traffic stops long enough
// for every object to sleep (the service sleeps after at most 60 s without sends and nothing
// to do now), faults go on, then traffic resumes. During a phase:
//
//   - the producers, the redriver and the pauser stop at their next step (the gate below); the
//     pull consumers keep asking (long polls included) and the Worker consumer stays bound;
//   - just before the phase's clock starts, a few messages go to the pull queue and to the push
//     queue with a delay that ends DUE_BEFORE_END_MS before the phase does: due while
//     everything sleeps, they must be delivered by the wake-up of a sleeping object, within
//     the phase (checkQuiet);
//   - KILL_BEFORE_DUE_MS before they are due, while everything should sleep, a hard kill of
//     wrangler dev and workerd, restarted on the same state (the alarm that holds the due
//     messages must outlive it), logged as a kill like the nemesis's;
//   - then a reset of the storage shard that holds the pull queue's delayed messages, armed at
//     its next ack or retry (abort-ack): it fires when the wake-up's delivery is acked. The
//     hooks have no "reset now" and a sleeping object has nothing in memory to lose: the
//     reset that matters is the one in the middle of the wake-up.
//
// The phase is logged as harness "phase" notes {phase: "quiet", n, ...} and {phase:
// "quiet-end", n}; the delayed sends as sends of the process "quiet" ({quiet: n, d}). The kill
// and the reset count in the run's planned kills and aborts (harness.mjs), checked as theirs.
import { retrying } from "./client.mjs";
import { prng } from "./prng.mjs";
import { sleep } from "../../src/kernel/sleep.ts";

/** The delayed messages come due this long before the phase ends: time to deliver, within the 10 s ready rule. */
export const DUE_BEFORE_END_MS = 12_000;
/** The kill comes this long before they are due: a restart takes 3 to 7 s, and the reset is armed after it. */
export const KILL_BEFORE_DUE_MS = 15_000;
/** Delayed messages per queue per phase. */
const DELAYED = 5;
/** How long after its messages are due the armed reset may wait for the ack that fires it. */
const ABORT_FIRE_MS = 20_000;
/** How long the gate waits for the producers, the redriver and the pauser to stop (a keyed send tries for up to 8 s). */
const PARK_TIMEOUT_MS = 30_000;

/**
 * Where the traffic's loops stop during a quiet phase. Each loop calls `pass(name)` at the top
 * of each step; `track` forgets a loop once it ended.
 */
export function quietGate() {
  const members = /** @type {Set<string>} */ (new Set());
  const parked = /** @type {Set<string>} */ (new Set());
  const gate = {
    closed: false,
    /** @param {string} name */
    async pass(name) {
      members.add(name);
      if (!gate.closed) return;
      parked.add(name);
      while (gate.closed) await sleep(100);
      parked.delete(name);
    },
    /** @template T @param {string} name @param {Promise<T>} loop */
    track(name, loop) {
      members.add(name);
      return loop.finally(() => members.delete(name));
    },
    /** Closes the gate and waits until every loop still running stopped at it; returns those that did not in time. */
    async close() {
      gate.closed = true;
      const until = Date.now() + PARK_TIMEOUT_MS;
      while ([...members].some((m) => !parked.has(m)) && Date.now() < until) await sleep(50);
      return [...members].filter((m) => !parked.has(m));
    },
    open() {
      gate.closed = false;
    },
  };
  return gate;
}

/**
 * The schedule with `count` quiet phases, spread evenly through it (the first after a seeded
 * share of the steps); each step's upMs is how long the service runs before it.
 * @param {import("./faults.mjs").FaultStep[]} schedule @param {number} seed
 * @param {{ quietPhases: number, abortUpMs: [number, number], downMs: [number, number] }} o
 */
export function withQuietPhases(schedule, seed, o) {
  if (!o.quietPhases) return schedule;
  const rng = prng(seed, "nemesis", "quiet");
  const out = [...schedule];
  for (let i = o.quietPhases; i >= 1; i--) {
    const at = Math.min(out.length, Math.round((i * schedule.length) / (o.quietPhases + 1)));
    out.splice(at, 0, {
      kind: "quiet",
      upMs: Math.round(rng.between(...o.abortUpMs)),
      downMs: Math.round(rng.between(...o.downMs)),
      pick: rng.next(),
    });
  }
  return out;
}

/**
 * One quiet phase (the nemesis runs it as a step of the schedule).
 * @param {{ history: import("./history.mjs").History, api: ReturnType<typeof import("./client.mjs").apiClient>, service: import("./faults.mjs").Service,
 *   queue: string, pushQueue: string, gate: ReturnType<typeof quietGate>, quietMs: number, kill: boolean, abort: boolean }} o
 * @param {import("./faults.mjs").FaultStep} step @param {number} n
 * @returns {Promise<string>} what happened, for the run's log
 */
export async function runQuietPhase(o, step, n) {
  const late = await o.gate.close();
  try {
    const dueS = Math.max(1, Math.round((o.quietMs - DUE_BEFORE_END_MS) / 1000));
    const pulled = await sendDelayed(o, o.queue, n, dueS);
    await sendDelayed(o, o.pushQueue, n, dueS);
    const t0 = Date.now();
    o.history.note("harness", "phase", {
      phase: "quiet",
      n,
      ms: o.quietMs,
      due_s: dueS,
      ...(late.length ? { not_stopped: late } : {}),
    });
    const dueAt = t0 + dueS * 1000;
    const lines = [`quiet ${n}: ${Math.round(o.quietMs / 1000)} s, delayed messages due at ${dueS} s`];
    if (o.kill) {
      await sleep(dueAt - KILL_BEFORE_DUE_MS - Date.now());
      lines.push(await killWhileAsleep(o, step, n));
    }
    if (o.abort) lines.push(await resetAtWakeUp(o, step, n, pulled, dueAt));
    await sleep(t0 + o.quietMs - Date.now());
    o.history.note("harness", "phase", { phase: "quiet-end", n });
    return lines.join("; ");
  } finally {
    o.gate.open();
  }
}

/**
 * DELAYED messages to `queue`, due in `dueS` s; returns the ids answered (none when it failed).
 * @param {Parameters<typeof runQuietPhase>[0]} o @param {string} queue @param {number} n @param {number} dueS
 */
async function sendDelayed(o, queue, n, dueS) {
  const hs = Array.from({ length: DELAYED }, (_, i) => `quiet.${n}.${queue}.${i}`);
  const op = o.history.invoke("quiet", "send", { q: queue, hs, d: dueS, quiet: n });
  const r = await o.api.call("POST", `/${queue}/messages/batch`, {
    messages: hs.map((h) => ({ body: { h }, content_type: "json" })),
    delay_seconds: dueS,
  });
  const ids = r.outcome === "ok" ? r.result?.message_ids : undefined;
  if (r.outcome === "ok" && Array.isArray(ids) && ids.length === hs.length) {
    o.history.complete(op, "ok", { ids });
    return /** @type {string[]} */ (ids);
  }
  o.history.complete(op, r.outcome === "ok" ? "unknown" : r.outcome, {
    status: r.status,
    error: r.outcome === "ok" ? "ok without ids" : r.error,
  });
  return [];
}

/** @param {Parameters<typeof runQuietPhase>[0]} o @param {import("./faults.mjs").FaultStep} step @param {number} n */
async function killWhileAsleep(o, step, n) {
  const k = `quiet-${n}`;
  const kill = o.history.invoke("nemesis", "kill", {
    n: k,
    signal: "SIGKILL",
    pid: o.service.server?.pid ?? null,
    quiet: n,
  });
  await o.service.kill();
  o.history.complete(kill, "ok");
  await sleep(step.downMs);
  const start = o.history.invoke("nemesis", "start", { n: k });
  try {
    const ms = await o.service.start();
    o.history.complete(start, "ok", { ready_ms: ms });
    return `killed while asleep, dead ${step.downMs} ms, ready ${ms} ms after the restart`;
  } catch (err) {
    o.history.complete(start, "fail", { error: String(err).slice(0, 500) });
    throw err;
  }
}

/**
 * Arms abort-ack on the storage shard the pull queue's delayed messages went to (a located id
 * names its shard's number, src/kernel/ids.ts), or a seeded pick among the active ones, and
 * waits from their due time until it reset.
 * @param {Parameters<typeof runQuietPhase>[0]} o @param {import("./faults.mjs").FaultStep} step @param {number} n
 * @param {string[]} ids @param {number} dueAt
 */
async function resetAtWakeUp(o, step, n, ids, dueAt) {
  const view = await retrying(() => o.api.call("GET", `/${o.queue}/shards`));
  const active = /** @type {Array<{ name: string, state: string }>} */ (view.result.shards)
    .filter((s) => s.state === "active")
    .map((s) => s.name)
    .sort();
  const number = ids[0] ? parseInt(ids[0].slice(14, 20), 16) : -1;
  const shard =
    active.find((name) => Number(name.slice(name.lastIndexOf(":") + 1)) === number) ??
    /** @type {string} */ (active[Math.floor(step.pick * active.length)]);
  const hooks = `/${o.queue}/test-hooks`;
  const op = o.history.invoke("nemesis", "abort", { n: `quiet-${n}`, kind: "abort-ack", shard, quiet: n });
  const t0 = Date.now();
  const armed = await retrying(() => o.api.call("POST", hooks, { shard, arm: "abort-settle" }));
  const instance = armed.result.instance;
  // Not looked at before the wake-up: a look is a request, and would keep the shard awake.
  await sleep(dueAt - Date.now());
  while (Date.now() < dueAt + ABORT_FIRE_MS) {
    const now = await o.api.call("GET", `${hooks}?shard=${encodeURIComponent(shard)}`);
    if (now.outcome === "ok" && now.result.instance !== instance) {
      o.history.complete(op, "ok", { fired: true, instance: now.result.instance });
      return `abort-ack of ${shard} at the wake-up: reset ${Date.now() - t0} ms after arming`;
    }
    await sleep(250);
  }
  await retrying(() => o.api.call("POST", hooks, { shard, arm: null }));
  const error = `not reset within ${ABORT_FIRE_MS} ms of its messages' due time`;
  o.history.complete(op, "fail", { fired: false, error });
  return `abort-ack of ${shard}: NOT fired (${error})`;
}

/**
 * The quiet phases of a history: each planned phase ran, and each of its delayed messages was
 * delivered (a pull's answer, a queue() invocation's start) before the phase ended.
 * @param {import("./history.mjs").Op[]} ops
 */
export function checkQuiet(ops) {
  const plan = ops.find((o) => o.f === "phase" && o.value?.phase === "load")?.value;
  const phases = /** @type {Map<number, { from: number, to: number | null }>} */ (new Map());
  /** h -> its phase and when it was due (the send's ok answer plus its delay) */
  const due = /** @type {Map<string, { n: number, at: number }>} */ (new Map());
  /** h -> its first delivery */
  const first = /** @type {Map<string, number>} */ (new Map());
  const invokes = /** @type {Map<number, import("./history.mjs").Op>} */ (new Map());
  for (const o of ops) {
    if (o.f === "phase" && o.value?.phase === "quiet") phases.set(o.value.n, { from: o.t, to: null });
    if (o.f === "phase" && o.value?.phase === "quiet-end") {
      const p = phases.get(o.value.n);
      if (p) p.to = o.t;
    }
    if (o.type === "invoke") {
      if (o.f === "send" && o.value?.quiet !== undefined) invokes.set(o.op, o);
      if (o.f === "push") for (const m of o.value?.msgs ?? []) if (m.h && !first.has(m.h)) first.set(m.h, o.t);
      continue;
    }
    if (o.f === "send" && o.type === "ok" && invokes.has(o.op)) {
      const inv = /** @type {import("./history.mjs").Op} */ (invokes.get(o.op));
      for (const h of inv.value.hs) due.set(h, { n: inv.value.quiet, at: o.t + inv.value.d * 1000 });
    }
    if (o.f === "pull" && o.type === "ok")
      for (const m of o.value?.msgs ?? []) if (m.h && !first.has(m.h)) first.set(m.h, o.t);
  }
  const examples = [];
  let inPhase = 0;
  let notInPhase = 0;
  let worst = 0;
  for (const [h, d] of due) {
    const p = phases.get(d.n);
    const t = first.get(h);
    if (t !== undefined) worst = Math.max(worst, t - d.at);
    if (t !== undefined && p && t <= (p.to ?? Infinity)) inPhase++;
    else
      (notInPhase++,
        examples.push({
          h,
          phase: d.n,
          due_at: Math.round(d.at),
          delivered_at: t === undefined ? null : Math.round(t),
          phase_end: p?.to ?? null,
        }));
  }
  const planned = Number(plan?.quiet?.phases ?? 0);
  const failures = [];
  if (phases.size !== planned) failures.push(`${phases.size} of the ${planned} planned quiet phases ran`);
  if (notInPhase) failures.push(`${notInPhase} messages due during a quiet phase not delivered within it`);
  return {
    failures,
    figures: {
      phases: phases.size,
      planned,
      delayed: due.size,
      delivered_in_phase: inPhase,
      not_in_phase: notInPhase,
      worst_due_to_delivery_ms: Math.round(worst),
      spans: [...phases].map(([n, p]) => ({
        n,
        from: Math.round(p.from),
        to: p.to === null ? null : Math.round(p.to),
      })),
    },
    examples: examples.slice(0, 10),
  };
}
