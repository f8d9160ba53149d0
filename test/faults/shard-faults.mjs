// The storage shard faults of the nemesis (faults.mjs runs them): a reset of one shard at an
// exact point through the test hooks (storage-shard/test-hooks.ts), once an append is durable
// and before its reply ("abort-append") or at the next ack or retry it is asked to apply
// ("abort-ack"); and a corruption of a few stored bodies ("corrupt").
import { retrying } from "./client.mjs";
import { sleep } from "./workload.mjs";

/** @typedef {{ kind: string, pick: number }} Step  a step of the fault schedule (faults.mjs FaultStep): its kind, and which shard it aims at */

/** Each abort kind's point in the storage shard (storage-shard/test-hooks.ts). */
const HOOK_POINT = { "abort-append": "abort-append", "abort-ack": "abort-settle" };
/**
 * How long an armed abort may wait for the call it aims at before it counts as not fired.
 * The short run's producers send a few requests a second, spread over the queue's shards
 * (and three tenths go to the push queue): one shard can go 10 s without an append.
 */
const ABORT_FIRE_TIMEOUT_MS = 20_000;
/** How long after the producers are done an armed storage shard abort may still fire (the last acks drain). */
const LOAD_OVER_GRACE_MS = 5000;

/**
 * Arms one shard's hook and waits for its reset. A hook call that fails is retried
 * (the hooks route goes through the same broker as the load); one that never fires is
 * disarmed and logged as failed, which the checker reports; one still waiting
 * LOAD_OVER_GRACE_MS after the producers were done is disarmed and logged as skipped.
 * @param {{ history: import("./history.mjs").History, api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string, loadDone?: () => boolean }} o
 * @param {Step} step @param {number} n
 */
export async function abortShard(o, step, n) {
  const shard = await pickShard(o, step);
  const hooks = `/${o.queue}/test-hooks`;
  const t0 = Date.now();
  const op = o.history.invoke("nemesis", "abort", { n, kind: step.kind, shard, q: o.queue });
  const armed = await retrying(() =>
    o.api.call("POST", hooks, { shard, arm: HOOK_POINT[/** @type {"abort-append" | "abort-ack"} */ (step.kind)] }),
  );
  const instance = armed.result.instance;
  /** When the producers were first seen done during the wait: a few seconds on, nothing comes to fire it. */
  let loadOverAt = null;
  while (Date.now() - t0 < ABORT_FIRE_TIMEOUT_MS) {
    await sleep(25);
    const now = await o.api.call("GET", `${hooks}?shard=${encodeURIComponent(shard)}`);
    if (now.outcome === "ok" && now.result.instance !== instance) {
      o.history.complete(op, "ok", { fired: true, instance: now.result.instance });
      return { shard, fired: true, ms: Date.now() - t0 };
    }
    if (o.loadDone?.()) loadOverAt ??= Date.now();
    if (loadOverAt !== null && Date.now() - loadOverAt > LOAD_OVER_GRACE_MS) break;
  }
  await retrying(() => o.api.call("POST", hooks, { shard, arm: null }));
  if (loadOverAt !== null) {
    // Disarmed unfired once the load was over: skipped, as one due after it would have been
    // (the run's faults drifted past the end of its load), unless it fired at the last moment.
    const last = await o.api.call("GET", `${hooks}?shard=${encodeURIComponent(shard)}`);
    if (last.outcome === "ok" && last.result.instance !== instance) {
      o.history.complete(op, "ok", { fired: true, instance: last.result.instance });
      return { shard, fired: true, ms: Date.now() - t0 };
    }
    o.history.complete(op, "fail", { fired: false, skipped: true, why: "the load was over while it waited" });
    o.history.note("nemesis", "skipped", { kind: step.kind, why: "the load was over while it waited" });
    return { shard, fired: false, error: "skipped: the load was over while it waited" };
  }
  const error = `not reset within ${ABORT_FIRE_TIMEOUT_MS} ms of arming`;
  o.history.complete(op, "fail", { fired: false, error });
  return { shard, fired: false, error };
}

/**
 * Corrupts `corruptEach` stored bodies, from the shard the step picks and then the next
 * ones (by name), round after round for up to 3 s (20 s while none is found): consumers keep the backlog short, and
 * a shard may hold fewer messages than wanted, or none. Logged as one "corrupt" operation.
 * First it sends `corruptEach` messages of its own, delayed 10 s, so there are stored
 * bodies nobody holds even when the producers are done (a short run whose faults drifted
 * past the end of the load once found none in 20 s); they are ordinary acknowledged sends
 * to the checker, delivered later or quarantined.
 * @param {{ history: import("./history.mjs").History, api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string,
 *   corruptEach: number, corrupted: string[] }} o
 * @param {Step} step
 */
export async function corruptBodies(o, step) {
  const names = await activeShards(o);
  const first = Math.floor(step.pick * names.length);
  await sendTargets(o);
  const op = o.history.invoke("nemesis", "corrupt", { shard: names[first], want: o.corruptEach });
  /** @type {string[]} */
  const ids = [];
  /** @type {string[]} */
  const shards = [];
  // Rounds over the shards for 3 s (new messages keep arriving), and on for up to 20 s
  // while none was found: at a short run's rate, with consumers keeping the backlog near
  // empty, every shard can be empty for a few seconds (a CI run once corrupted nothing).
  const until = Date.now() + 3000;
  const giveUp = Date.now() + 20_000;
  const searching = () => Date.now() < until || (ids.length === 0 && Date.now() < giveUp);
  for (let i = 0; ids.length < o.corruptEach && (i < names.length || searching()); i++) {
    if (i > 0 && i % names.length === 0) await sleep(100);
    const shard = /** @type {string} */ (names[(first + i) % names.length]);
    const r = await retrying(() =>
      o.api.call("POST", `/${o.queue}/test-hooks`, { shard, corrupt: o.corruptEach - ids.length }),
    );
    const got = /** @type {Array<{ id: string }>} */ (r.result.corrupted ?? []).map((c) => c.id);
    if (got.length && !shards.includes(shard)) shards.push(shard);
    ids.push(...got);
  }
  o.history.complete(op, "ok", { ids, shards });
  o.corrupted.push(...ids);
  return { ids, shards };
}

let targetRounds = 0;

/**
 * Messages for a corruption to find: `corruptEach` bodies with harness ids of the nemesis,
 * delayed 10 s, logged as a send like a producer's.
 * @param {{ history: import("./history.mjs").History, api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string, corruptEach: number }} o
 */
async function sendTargets(o) {
  const round = ++targetRounds;
  const hs = Array.from({ length: o.corruptEach }, (_, i) => `nemesis.corrupt.${round}.${i}`);
  const op = o.history.invoke("nemesis", "send", { q: o.queue, hs });
  const r = await o.api.call("POST", `/${o.queue}/messages/batch`, {
    messages: hs.map((h) => ({ body: { h }, content_type: "json" })),
    delay_seconds: 10,
  });
  const ids = r.outcome === "ok" ? r.result?.message_ids : undefined;
  if (r.outcome === "ok" && Array.isArray(ids) && ids.length === hs.length) o.history.complete(op, "ok", { ids });
  else
    o.history.complete(op, r.outcome === "ok" ? "unknown" : r.outcome, {
      status: r.status,
      error: r.outcome === "ok" ? "ok without ids" : r.error,
    });
}

/**
 * The active shard a step aims at (its seeded pick among them, by name).
 * @param {{ api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string }} o @param {Step} step
 */
async function pickShard(o, step) {
  // A queue may have no active shard for a moment (a forced drain cut short): its next tick adds one.
  for (let tries = 0; ; tries++) {
    const names = await activeShards(o);
    if (names.length > 0 || tries >= 60) return /** @type {string} */ (names[Math.floor(step.pick * names.length)]);
    await sleep(500);
  }
}

/** The queue's active storage shards, by name. @param {{ api: ReturnType<typeof import("./client.mjs").apiClient>, queue: string }} o */
async function activeShards(o) {
  const shards = await retrying(() => o.api.call("GET", `/${o.queue}/shards`));
  return /** @type {Array<{ name: string, state: string }>} */ (shards.result.shards)
    .filter((s) => s.state === "active")
    .map((s) => s.name)
    .sort();
}
