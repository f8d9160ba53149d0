// The run's queues: the pull queue and its dead-letter queue, created with their
// consumers before the load (the push queue is push-faults.mjs's), and at the end the
// drain of all three and the quarantined total the shards report.
import { JURISDICTION, PUSH_QUEUE } from "./push-faults.mjs";
import { sleep } from "./workload.mjs";

/** @typedef {ReturnType<typeof import("./client.mjs").apiClient>} Api */

export const TOKEN = "shardq-local-dev-token";
export const QUEUE = "faults";
export const DLQ = "faults-dlq";
/** Deliveries of a poison message before it is dead-lettered: max_retries + 1. */
export const MAX_RETRIES = 2;

/**
 * The queue and its dead-letter queue, each with an HTTP pull consumer. A poison
 * message is retried MAX_RETRIES times and then moved to the dead-letter queue.
 * @param {Api} api
 */
export async function setUp(api) {
  const must = async (/** @type {string} */ what, /** @type {Promise<import("./client.mjs").Outcome>} */ call) => {
    const r = await call;
    if (r.outcome !== "ok") throw new Error(`set-up: ${what}: ${r.error}`);
  };
  await must("create the dead-letter queue", api.call("POST", "", { queue_name: DLQ, jurisdiction: JURISDICTION }));
  await must("create the queue", api.call("POST", "", { queue_name: QUEUE, jurisdiction: JURISDICTION }));
  await must(
    "its pull consumer",
    api.call("POST", `/${QUEUE}/consumers`, {
      type: "http_pull",
      settings: { max_retries: MAX_RETRIES, retry_delay: 0, visibility_timeout_ms: 5000 },
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
}

/**
 * Waits until the three queues' backlogs (stored and not acked, leased included) have been 0
 * for two seconds and no late ack is pending, or the deadline passes.
 * @param {Api} api @param {Set<Promise<void>>} late @param {number} deadline
 */
export async function drain(api, late, deadline) {
  /** @type {Record<string, number | null>} */
  let backlog = {};
  let zeroSince = 0;
  while (Date.now() < deadline) {
    const queues = [QUEUE, PUSH_QUEUE, DLQ];
    const answers = await Promise.all(queues.map((q) => api.call("GET", `/${q}/metrics`)));
    backlog = Object.fromEntries(
      queues.map((q, i) => [q, answers[i]?.outcome === "ok" ? answers[i].result.backlog_count : null]),
    );
    if (queues.every((q) => backlog[q] === 0) && late.size === 0) {
      zeroSince ||= Date.now();
      if (Date.now() - zeroSince >= 2000) return { drained: true, backlog };
    } else zeroSince = 0;
    await sleep(500);
  }
  return { drained: false, backlog };
}

/**
 * The queue's quarantined total as Prometheus' GET /metrics gives it (the Coordinator's
 * counters: every shard's heartbeat totals, with those of shards since retired carried
 * in; the per-shard heartbeats of GET .../metrics leave retired shards out, and a
 * stale-map fault retires some), read until it reaches what was corrupted or 7 s pass:
 * each shard reports every HEARTBEAT_INTERVAL_MS (5 s), so a quarantine just before the
 * drain ended shows late. The checker compares it with the corrupted ids.
 * @param {Api} api @param {number} expected
 */
export async function quarantined(api, expected) {
  const deadline = Date.now() + 7_000;
  const url = api.queues.replace(/\/accounts\/[^/]+\/queues$/, "/metrics");
  const line = new RegExp(`^shardq_messages_quarantined_total\\{[^}]*queue="${QUEUE}"[^}]*\\} (\\d+)$`, "m");
  /** @type {number | null} */
  let total = null;
  while (Date.now() < deadline) {
    try {
      // Raced against a timer too, as every harness call is (client.mjs): a fetch may not settle.
      const read = fetch(url, {
        headers: { authorization: `Bearer ${TOKEN}` },
        signal: AbortSignal.timeout(5000),
      }).then(async (res) => ({ ok: res.ok, text: await res.text() }));
      read.catch(() => {});
      const res = await Promise.race([read, sleep(6000).then(() => ({ ok: false, text: "" }))]);
      const m = line.exec(res.text);
      if (res.ok && m) total = Number(m[1]);
      if (total !== null && total >= expected) break;
    } catch {
      // The service may be busy; read again.
    }
    await sleep(500);
  }
  return { quarantined: total };
}
