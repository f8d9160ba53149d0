// The control-plane faults of a run, through the test hooks of src/kernel/test-hooks.ts
// (broker/http/test-hooks-api.ts):
//
//   abort-coordinator  the queue's Coordinator is reset mid-autoscale: in turn, after a
//                      forced scale-out wrote and activated its new shard and before it
//                      recorded it active (abort-scale-out), and after a storage shard
//                      was told to drain and before the drain was recorded (abort-drain).
//                      Recovered: the new shard is active in the map, or the shard told
//                      to drain reports the state the map says (active) again.
//   throw-alarm        the next `times` alarms of one object throw (a storage shard, a
//                      consumer shard of the queue, or its Coordinator, in turn): the
//                      platform retries an alarm that throws, 2 s later and doubling, at
//                      most 6 times. Recovered: an alarm of that object ran through.
//   stale-map          the Coordinator drains a storage shard and keeps the map brokers
//                      read (KV) as it was for `holdMs`, as KV's propagation delay could:
//                      brokers go on sending to the draining (later retired) shard and
//                      know nothing of the shard the autoscaler adds. Recovered: KV has
//                      the current map again and the drained shard is retired.
//
// Each is one operation of the process "nemesis" (f: "control") whose completion says
// whether it fired and when it recovered; control-figures.mjs reads them.
import { sleep } from "./workload.mjs";
import { retrying } from "./client.mjs";

export const CONTROL_KINDS = ["abort-coordinator", "throw-alarm", "stale-map"];
/** How long a control fault may take to fire, and then to recover, before it counts as failed. */
const FIRE_TIMEOUT_MS = 15_000;
/** Alarm retries back off 2, 4, 8, 16, 32, 64 s: six of them take about two minutes. */
const ALARM_RECOVERY_TIMEOUT_MS = 180_000;
/** The longest a control fault may play out after the nemesis ran it: the harness keeps its consumers that much longer. */
export const MAX_PLAY_OUT_MS = ALARM_RECOVERY_TIMEOUT_MS;

/**
 * @typedef {import("./faults.mjs").FaultStep} FaultStep
 * @typedef {{ history: import("./history.mjs").History, api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string,
 *   holdMapMs: number, alarmThrows: number[], consumerQueue?: string }} ControlContext
 *   consumerQueue: the queue whose consumer shards a throw-alarm aims at (one with a Worker consumer; default `queue`)
 * @typedef {{ version: number, published: { version: number } | null,
 *   shards: Array<{ name: string, state: string, heartbeat: { state: string, received_at: number } | null }>,
 *   consumer_shards?: { shards: Array<{ index: number, running: boolean }> } }} ShardsView
 */

/**
 * Runs one control fault. Returns a line for the run's log and a promise that settles
 * when its recovery has been seen (or has timed out): a throw-alarm of seven throws
 * takes minutes to play out, and the nemesis goes on with its schedule meanwhile.
 * @param {ControlContext} o @param {FaultStep} step @param {number} n the kind's count so far
 * @returns {Promise<{ line: string, recovered: Promise<void> }>}
 */
export async function runControlFault(o, step, n) {
  if (step.kind === "abort-coordinator") return abortCoordinator(o, step, n);
  if (step.kind === "throw-alarm") return throwAlarm(o, step, n);
  if (step.kind === "stale-map") return staleMap(o, step, n);
  throw new Error(`not a control fault: ${step.kind}`);
}

/** @param {ControlContext} o @param {FaultStep} step @param {number} n */
async function abortCoordinator(o, step, n) {
  const point = n % 2 === 1 ? "abort-scale-out" : "abort-drain";
  const before = await shardsView(o);
  const active = before.shards
    .filter((s) => s.state === "active")
    .map((s) => s.name)
    .sort();
  const victim = point === "abort-drain" ? active[Math.floor(step.pick * active.length)] : undefined;
  const instance = (await hook(o, "GET", "?coordinator=1")).instance;
  const op = o.history.invoke("nemesis", "control", {
    kind: step.kind,
    point,
    n,
    ...(victim ? { shard: victim } : {}),
  });
  const t0 = Date.now();
  // The call itself dies with the Coordinator: its answer is not wanted, only the reset.
  const call = await o.api.call("POST", `/${o.queue}/test-hooks`, {
    coordinator: true,
    arm: point,
    action: point === "abort-scale-out" ? "scale-out" : "drain",
    ...(victim ? { drain_shard: victim } : {}),
  });
  const fired = await until(
    FIRE_TIMEOUT_MS,
    async () => (await hook(o, "GET", "?coordinator=1", true))?.instance !== instance,
  );
  if (!fired) {
    await hook(o, "POST", "", true, { coordinator: true, arm: null });
    o.history.complete(op, "fail", {
      fired: false,
      error: `Coordinator not reset within ${FIRE_TIMEOUT_MS} ms (${call.outcome === "ok" ? "the call answered" : call.error})`,
    });
    return { line: `${step.kind} (${point}) NOT fired`, recovered: Promise.resolve() };
  }
  const firedMs = Date.now() - t0;
  const firedAt = Date.now();
  const known = new Set(before.shards.map((s) => s.name));
  // Recovered: the change the reset cut short is finished (scale-out) or undone (drain).
  const recovered = until(FIRE_TIMEOUT_MS + 30_000, async () => {
    const now = await peekShards(o);
    if (!now) return false;
    if (point === "abort-scale-out") return now.shards.some((s) => !known.has(s.name) && s.state === "active");
    const s = now.shards.find((x) => x.name === victim);
    // The shard's own report after the reset agrees with the map again (or the autoscaler has since changed its state for its own reasons).
    if (s?.state !== "active") return true;
    return s.heartbeat !== null && s.heartbeat.received_at >= firedAt && s.heartbeat.state === "active";
  }).then((ok) => {
    const value = { fired: true, fired_ms: firedMs, recovered: ok, recovered_ms: ok ? Date.now() - t0 : null };
    o.history.complete(op, ok ? "ok" : "fail", value);
  });
  return {
    line: `${step.kind}: ${point}${victim ? ` of ${victim}` : ""}, reset ${firedMs} ms after arming`,
    recovered,
  };
}

/** @param {ControlContext} o @param {FaultStep} step @param {number} n */
async function throwAlarm(o, step, n) {
  const targets = ["storage", "consumer", "coordinator"];
  const target = targets[(n - 1) % targets.length];
  const times = /** @type {number} */ (o.alarmThrows[Math.floor(step.pick * o.alarmThrows.length)]);
  /** @type {Record<string, unknown>} */
  let selector;
  if (target === "storage") {
    const active = (await shardsView(o)).shards
      .filter((s) => s.state === "active")
      .map((s) => s.name)
      .sort();
    selector = { shard: active[Math.floor(step.pick * active.length)] };
  } else if (target === "consumer") {
    // A consumer shard of the queue with a Worker consumer, one that reported a round
    // running if any did (pull consumers have none: with no such queue, no alarm comes
    // and the fault is skipped below).
    const view = await peekShards({ ...o, queue: o.consumerQueue ?? o.queue });
    const running = (view?.consumer_shards?.shards ?? [])
      .filter((c) => c.running)
      .map((c) => c.index)
      .sort((a, b) => a - b);
    selector = { consumer_shard: running.length ? running[Math.floor(step.pick * running.length)] : 0 };
  } else selector = { coordinator: true };
  const query =
    "shard" in selector
      ? `?shard=${encodeURIComponent(String(selector.shard))}`
      : "consumer_shard" in selector
        ? `?consumer_shard=${selector.consumer_shard}`
        : "?coordinator=1";
  const op = o.history.invoke("nemesis", "control", { kind: step.kind, n, target, times, ...selector });
  const t0 = Date.now();
  const armed = await hook(o, "POST", "", false, { ...selector, arm: "throw-alarm", times });
  const instance = armed.instance;
  // Fired: this instance threw. One reset before (a kill; an idle object evicted) forgot
  // the arming, and an object whose alarms never come (a consumer shard of a queue with
  // no Worker consumer) cannot throw: both skipped, with the reason, not failed.
  /** @type {string | null} */
  let skip = null;
  const fired = await until(FIRE_TIMEOUT_MS, async () => {
    const s = await hook(o, "GET", query, true);
    if (s !== null && s.instance !== instance) skip = "reset before an alarm came";
    return s !== null && (s.alarms_thrown > 0 || skip !== null);
  });
  if (!fired || skip !== null) {
    await hook(o, "POST", "", true, { ...selector, arm: null });
    skip ??= target === "consumer" ? "no alarm came" : null;
    o.history.complete(op, skip ? "ok" : "fail", {
      fired: false,
      ...(skip ? { skipped: true, why: skip } : { error: `no alarm threw within ${FIRE_TIMEOUT_MS} ms` }),
    });
    return {
      line: `${step.kind} of the ${target}: ${skip ? `skipped (${skip})` : "NOT fired"}`,
      recovered: Promise.resolve(),
    };
  }
  const firedMs = Date.now() - t0;
  // Thrown: the most this instance was seen to have thrown (a kill meanwhile starts a new,
  // unarmed one, whose first alarm that runs through is the recovery, logged as such).
  let thrown = 0;
  let resetMeanwhile = false;
  const recovered = until(ALARM_RECOVERY_TIMEOUT_MS, async () => {
    const s = await hook(o, "GET", query, true);
    if (s?.instance === instance) thrown = Math.max(thrown, s.alarms_thrown);
    else if (s) resetMeanwhile = true;
    // Ran through after its throws: an alarm ended in this instance after it was armed,
    // with no throw left (a reset in between, by a kill, starts a new instance unarmed).
    return s !== null && s.throws_left === 0 && s.alarm_ok_at !== null && s.alarm_ok_at >= t0;
  }).then((ok) => {
    o.history.complete(op, ok ? "ok" : "fail", {
      fired: true,
      fired_ms: firedMs,
      recovered: ok,
      recovered_ms: ok ? Date.now() - t0 : null,
      thrown,
      reset_meanwhile: resetMeanwhile,
    });
  });
  return {
    line: `${step.kind} of the ${target} (${times} throw${times === 1 ? "" : "s"}): first throw seen ${firedMs} ms after arming`,
    recovered,
  };
}

/** @param {ControlContext} o @param {FaultStep} step @param {number} n */
async function staleMap(o, step, n) {
  const before = await shardsView(o);
  const active = before.shards
    .filter((s) => s.state === "active")
    .map((s) => s.name)
    .sort();
  const victim = /** @type {string} */ (active[Math.floor(step.pick * active.length)]);
  const op = o.history.invoke("nemesis", "control", {
    kind: step.kind,
    n,
    shard: victim,
    hold_ms: o.holdMapMs,
    published_version: before.published?.version ?? null,
  });
  const t0 = Date.now();
  await hook(o, "POST", "", false, {
    coordinator: true,
    action: "drain",
    drain_shard: victim,
    hold_map_ms: o.holdMapMs,
  });
  /** @type {number | null} */
  let retiredMs = null;
  /** @type {number | null} */
  let publishedMs = null;
  const recovered = until(o.holdMapMs + 120_000, async () => {
    const now = await peekShards(o);
    if (!now) return false;
    const s = now.shards.find((x) => x.name === victim);
    if (retiredMs === null && (s === undefined || s.state === "retired")) retiredMs = Date.now() - t0;
    if (publishedMs === null && Date.now() - t0 >= o.holdMapMs && now.published?.version === now.version)
      publishedMs = Date.now() - t0;
    return retiredMs !== null && publishedMs !== null;
  }).then((ok) => {
    o.history.complete(op, ok ? "ok" : "fail", {
      fired: true,
      recovered: ok,
      recovered_ms: ok ? Date.now() - t0 : null,
      retired_ms: retiredMs,
      published_ms: publishedMs,
    });
  });
  return {
    line: `${step.kind}: ${victim} drained, the published map held ${Math.round(o.holdMapMs / 1000)} s`,
    recovered,
  };
}

/**
 * GET .../shards: the Coordinator's map with each shard's heartbeat, and the copy in KV.
 * @param {ControlContext} o @returns {Promise<ShardsView>}
 */
async function shardsView(o) {
  return (await retrying(() => o.api.call("GET", `/${o.queue}/shards`))).result;
}

/** The same, or null while the service does not answer (it may be restarting). @param {ControlContext} o @returns {Promise<ShardsView | null>} */
async function peekShards(o) {
  const r = await o.api.call("GET", `/${o.queue}/shards`);
  return r.outcome === "ok" ? r.result : null;
}

/**
 * A call to the hooks route. Lenient: null when it fails (the service may be restarting).
 * @param {ControlContext} o @param {"GET" | "POST"} method @param {string} query @param {boolean} [lenient] @param {unknown} [body]
 * @returns {Promise<any>}
 */
async function hook(o, method, query, lenient = false, body) {
  // A consumer shard is addressed through the queue it belongs to.
  const queue =
    query.startsWith("?consumer_shard") || (body && typeof body === "object" && "consumer_shard" in body)
      ? (o.consumerQueue ?? o.queue)
      : o.queue;
  const call = () => o.api.call(method, `/${queue}/test-hooks${query}`, body);
  if (lenient) {
    const r = await call();
    return r.outcome === "ok" ? r.result : null;
  }
  return (await retrying(call)).result;
}

/** Polls `test` every 250 ms until it holds (true) or `ms` pass (false). @param {number} ms @param {() => Promise<boolean>} test */
async function until(ms, test) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await test()) return true;
    await sleep(250);
  }
  return false;
}
