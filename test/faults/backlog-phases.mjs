// The large-backlog run's phases around the fill (backlog.mjs): the queues set up with
// delivery paused, a hard kill and restart with the whole backlog stored, and the drain.
import { sleep } from "./workload.mjs";

/**
 * @typedef {ReturnType<typeof import("./client.mjs").apiClient>} Api
 * @typedef {import("./backlog-load.mjs").RssSample} RssSample
 */

export const QUEUE = "backlog";
/** The checker tells the dead-letter queue's deliveries by this suffix. */
export const DLQ = "backlog-dlq";

/**
 * The queue and its dead-letter queue, each with an HTTP pull consumer (a poison message
 * moves after 3 deliveries, as in queues.mjs), and the queue's delivery paused.
 * @param {Api} api
 */
export async function setUp(api) {
  const must = async (/** @type {string} */ what, /** @type {Promise<import("./client.mjs").Outcome>} */ call) => {
    const r = await call;
    if (r.outcome !== "ok") throw new Error(`set-up: ${what}: ${r.error}`);
  };
  await must("create the dead-letter queue", api.call("POST", "", { queue_name: DLQ }));
  await must("create the queue", api.call("POST", "", { queue_name: QUEUE }));
  await must(
    "its pull consumer",
    api.call("POST", `/${QUEUE}/consumers`, {
      type: "http_pull",
      settings: { max_retries: 2, retry_delay: 0, visibility_timeout_ms: 5000 },
      dead_letter_queue: DLQ,
    }),
  );
  await must(
    "the dead-letter queue's pull consumer",
    api.call("POST", `/${DLQ}/consumers`, {
      type: "http_pull",
      settings: { max_retries: 100, retry_delay: 0, visibility_timeout_ms: 5000 },
    }),
  );
  await must("pause delivery", api.call("PATCH", `/${QUEUE}`, { settings: { delivery_paused: true } }));
}

/**
 * Polls both queues' backlogs (stored and not acked, leased included) until both have
 * been 0 for two seconds with no late ack pending, or the deadline passes. `emptyAt`:
 * when they reached the 0 they stayed at (history clock). Keeps `gauge` on the queue's.
 * @param {Api} api @param {Set<Promise<void>>} late @param {number} deadline
 * @param {() => number} now @param {{ backlog: number, bytes: number }} gauge
 */
export async function drainQueues(api, late, deadline, now, gauge) {
  /** @type {Record<string, number | null>} */
  let backlog = {};
  /** @type {number | null} */
  let emptyAt = null;
  let zeroSince = 0;
  while (Date.now() < deadline) {
    const [a, b] = await Promise.all([QUEUE, DLQ].map((q) => api.call("GET", `/${q}/metrics`)));
    backlog = {
      [QUEUE]: a?.outcome === "ok" ? a.result.backlog_count : null,
      [DLQ]: b?.outcome === "ok" ? b.result.backlog_count : null,
    };
    if (a?.outcome === "ok") Object.assign(gauge, { backlog: a.result.backlog_count, bytes: a.result.backlog_bytes });
    if (backlog[QUEUE] === 0 && backlog[DLQ] === 0 && late.size === 0) {
      emptyAt ??= now();
      zeroSince ||= Date.now();
      if (Date.now() - zeroSince >= 2000) return { drained: true, backlog, emptyAt };
    } else {
      zeroSince = 0;
      emptyAt = null;
    }
    await sleep(500);
  }
  return { drained: false, backlog, emptyAt: null };
}

/**
 * A hard kill with the whole backlog stored and delivery paused (nothing in flight), and
 * a restart on the same state, logged as the nemesis' kill and start: how long until
 * wrangler answers, and until every storage shard has (GET .../metrics asks each one,
 * and a storage shard counts its rows when it starts), the backlog it then reports, and
 * workerd's RSS before the kill, once ready, with every shard awake, and after `probe`, and
 * the JS heap then.
 * A fresh workerd holds only what it needs to serve: memory kept in proportion to the
 * backlog would be back at once, whatever the allocator kept from the fill.
 * @param {{ service: import("./faults.mjs").Service, history: import("./history.mjs").History, api: Api,
 *   sample: () => RssSample | null, probe: () => Promise<import("./backlog-load.mjs").Probe[]>, heap: () => Promise<number> }} o
 */
export async function restartOverBacklog(o) {
  const before = o.sample();
  const kill = o.history.invoke("nemesis", "kill", {
    n: 1,
    signal: "SIGKILL",
    pid: o.service.server?.pid ?? null,
    in_flight: { send: 0, pull: 0, ack: 0 },
  });
  await o.service.kill();
  o.history.complete(kill, "ok");
  const start = o.history.invoke("nemesis", "start", { n: 1 });
  let readyMs;
  try {
    readyMs = await o.service.start();
  } catch (err) {
    o.history.complete(start, "fail", { error: String(err).slice(0, 500) });
    throw err;
  }
  o.history.complete(start, "ok", { ready_ms: readyMs });
  const ready = o.sample();
  const t0 = performance.now();
  let metrics = await o.api.call("GET", `/${QUEUE}/metrics`);
  for (let i = 0; metrics.outcome !== "ok" && i < 30; i++) {
    await sleep(1000);
    metrics = await o.api.call("GET", `/${QUEUE}/metrics`);
  }
  if (metrics.outcome !== "ok") throw new Error(`metrics after the restart: ${metrics.error}`);
  const metricsMs = Math.round(performance.now() - t0);
  const awake = o.sample();
  const probes = await o.probe();
  const probed = o.sample();
  const heap = await o.heap();
  const rss = (/** @type {RssSample | null} */ s) => s?.workerd.rss ?? null;
  return {
    ready_ms: readyMs,
    first_metrics_ms: metricsMs,
    backlog: /** @type {number} */ (metrics.result.backlog_count),
    bytes: /** @type {number} */ (metrics.result.backlog_bytes),
    rss: { before_kill: rss(before), ready: rss(ready), shards_awake: rss(awake), after_probes: rss(probed) },
    /** The JS heap after the reads, every storage shard loaded again. */
    heap,
    probes,
  };
}
