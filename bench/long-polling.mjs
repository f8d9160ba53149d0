// `npm run bench -- longpoll [--consumers N] [--seconds S] [--sends N] [--poll-ms P]`: long
// polling, on the benchmark's shardq stack, loopback only. bench/README.md
// ("Long polling") says what each figure is.
// - idle: N pull consumers of an empty queue for S seconds, first short-polling (a pull, then
//   P ms of sleep after an empty answer: a loop without long polling), then long-polling
//   (`wait_time_ms` 20,000): HTTP requests and Durable Object RPCs per idle consumer-minute.
// - latency: one consumer long-polling an idle queue, and single sends one at a time: how
//   long from a send's start to the pull's answer carrying its message.
// - wake-up: the same, for a message that becomes ready later while the pull waits: its
//   delay_seconds end, its retry delay ends, its lease runs out.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { costDelta, readCost, CLASSES } from "./cost.mjs";
import { pct } from "./driver-run.mjs";
import { startShardq } from "./stacks.mjs";

export const LONGPOLL_HELP = `npm run bench -- longpoll [--consumers N] [--seconds S] [--sends N] [--poll-ms P] [--wake-samples W]
  Long polling: requests and Durable Object RPCs per idle pull consumer-minute, short-polling and long-polling, and the
  latency from a send to a waiting pull's answer.
  --consumers N  idle consumers (default 1000)
  --seconds S    how long each idle phase runs (default 60)
  --sends N      single sends for the latency (default 1000)
  --poll-ms P    the short-polling loop's sleep after an empty answer (default 1000)
  --wake-samples W  messages per cause of becoming ready later (delay end, retry delay end, lease expiry, redrive, key release; default 100, 0: none)`;

const HEADERS = { authorization: "Bearer shardq-local-dev-token", "content-type": "application/json" };
const QUEUE = "longpoll";
/** The consumer's dead-letter queue: what a redrive moves back, where a released key's head goes. */
const DLQ = "longpoll-dlq";
const WAIT_MS = 20_000;

/** @param {string[]} argv */
export async function longPolling(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      consumers: { type: "string", default: "1000" },
      seconds: { type: "string", default: "60" },
      sends: { type: "string", default: "1000" },
      "poll-ms": { type: "string", default: "1000" },
      "wake-samples": { type: "string", default: "100" },
    },
  });
  const consumers = whole(o.consumers, "--consumers", 1, 5000);
  const seconds = whole(o.seconds, "--seconds", 5, 600);
  const sends = whole(o.sends, "--sends", 10, 100_000);
  const pollMs = whole(o["poll-ms"], "--poll-ms", 0, 60_000);
  const wakeSamples = whole(o["wake-samples"], "--wake-samples", 0, 10_000);
  const work = mkdtempSync(join(tmpdir(), "shardq-longpoll-"));
  const stack = await startShardq({
    work,
    env: { WRANGLER_REGISTRY_PATH: join(work, "registry") },
    file: "wrangler.bench.toml",
    name: "state",
  });
  try {
    const base = `${stack.base}/shardq/accounts/local/queues`;
    await post(`${stack.base}/shardq/accounts/local/queues`, { queue_name: QUEUE });
    await post(`${stack.base}/shardq/accounts/local/queues`, { queue_name: DLQ });
    await post(`${base}/${QUEUE}/consumers`, {
      type: "http_pull",
      settings: { visibility_timeout_ms: 30_000 },
      dead_letter_queue: DLQ,
    });
    const queueId = (await (await fetch(`${base}/${QUEUE}`, { headers: HEADERS })).json()).result.queue_id;

    const short = await idlePhase(stack.base, queueId, consumers, seconds, (signal) =>
      shortPoller(base, pollMs, signal),
    );
    const long = await idlePhase(stack.base, queueId, consumers, seconds, (signal) => longPoller(base, signal));
    const latency = await latencyRun(base, sends);
    /** @type {Array<[WakeCause, Awaited<ReturnType<typeof wakeRun>>]>} */
    const wakes = [];
    for (const cause of /** @type {const} */ (["delay", "retry", "lease", "redrive", "release"]))
      if (wakeSamples > 0) wakes.push([cause, await wakeRun(base, cause, wakeSamples)]);

    console.log(`idle: ${consumers} pull consumers of an empty queue, ${seconds} s each way`);
    console.log("| loop | HTTP requests per consumer-minute | Durable Object RPCs per consumer-minute | by class |");
    console.log("| --- | --- | --- | --- |");
    for (const [name, r] of [
      [`short polling (${pollMs} ms after an empty answer)`, short],
      [`long polling (wait_time_ms ${WAIT_MS})`, long],
    ]) {
      const r2 = /** @type {typeof short} */ (r);
      console.log(`| ${name} | ${r2.requestsPerMinute.toFixed(2)} | ${r2.rpcsPerMinute.toFixed(2)} | ${r2.byClass} |`);
    }
    console.log(
      `\nlatency: ${latency.count} single sends to an idle queue with one long-polling consumer, from a send's start to the answer carrying its message`,
    );
    console.log(
      `p50 ${latency.p50.toFixed(1)} ms, p99 ${latency.p99.toFixed(1)} ms, max ${latency.max.toFixed(1)} ms (goal: p99 at most 50 ms); from the send's answer: p99 ${latency.afterAnswerP99.toFixed(1)} ms`,
    );
    if (wakes.length > 0) {
      console.log(
        `\nwake-up: a waiting pull's answer after its message became ready later (${wakeSamples} each; goal: p99 at most 50 ms)`,
      );
      console.log(
        "The message became ready between the start of the request that made it ready and its answer (plus the delay): the true latency lies between the two figures.",
      );
      console.log("| cause | p50 ms | p99 ms | max ms | from the answer: p50 / p99 ms |");
      console.log("| --- | --- | --- | --- | --- |");
      console.log(
        `| send (above, from the send's start) | ${latency.p50.toFixed(1)} | ${latency.p99.toFixed(1)} | ${latency.max.toFixed(1)} | - / ${latency.afterAnswerP99.toFixed(1)} |`,
      );
      for (const [cause, w] of wakes)
        console.log(
          `| ${WAKE_CAUSES[cause]} | ${w.p50.toFixed(1)} | ${w.p99.toFixed(1)} | ${w.max.toFixed(1)} | ${w.answerP50.toFixed(1)} / ${w.answerP99.toFixed(1)} |`,
        );
    }
  } finally {
    await stack.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Runs `consumers` pollers for `seconds` and answers what they cost: the requests they made
 * and the RPCs every object of the queue served (GET /cost of the driver), per consumer-minute.
 * @param {string} root @param {string} queueId @param {number} consumers @param {number} seconds
 * @param {(signal: AbortSignal) => Promise<number>} poller answers the requests it made
 */
async function idlePhase(root, queueId, consumers, seconds, poller) {
  const before = await readCost(root, queueId);
  const started = performance.now();
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), seconds * 1000);
  const requests = (await Promise.all(Array.from({ length: consumers }, () => poller(stop.signal)))).reduce(
    (a, b) => a + b,
    0,
  );
  clearTimeout(timer);
  // Until the last poller's last pull ended: a long poll begun just before the stop runs its wait out.
  const minutes = (consumers * (performance.now() - started)) / 60_000;
  const delta = costDelta(before, await readCost(root, queueId));
  const rpcs = CLASSES.reduce((n, c) => n + delta[c].rpcs + delta[c].alarms, 0);
  const byClass = CLASSES.filter((c) => delta[c].rpcs + delta[c].alarms > 0)
    .map((c) => `${c} ${((delta[c].rpcs + delta[c].alarms) / minutes).toFixed(2)}`)
    .join(", ");
  return { requestsPerMinute: requests / minutes, rpcsPerMinute: rpcs / minutes, byClass };
}

/** A loop without long polling: pull, and after an empty answer sleep `pollMs`. @param {string} base @param {number} pollMs @param {AbortSignal} signal */
async function shortPoller(base, pollMs, signal) {
  let requests = 0;
  while (!signal.aborted) {
    requests++;
    const got = await pull(base, 0);
    if (got.length === 0) await sleep(pollMs, signal);
  }
  return requests;
}

/** The same loop, long-polling: no sleep, the service holds the pull. @param {string} base @param {AbortSignal} signal */
async function longPoller(base, signal) {
  let requests = 0;
  while (!signal.aborted) {
    requests++;
    await pull(base, WAIT_MS);
  }
  return requests;
}

/**
 * One consumer long-polls (and acks what it gets) while single sends go one at a time, each
 * once the one before was received and the consumer is waiting again.
 * @param {string} base @param {number} count
 */
async function latencyRun(base, count) {
  /** @type {Map<number, number>} */
  const received = new Map();
  let done = false;
  const consumer = (async () => {
    while (!done) {
      const messages = await pull(base, WAIT_MS, true);
      const at = performance.now();
      for (const m of messages) received.set(JSON.parse(Buffer.from(m.body, "base64").toString()).i, at);
      if (messages.length)
        await post(`${base}/${QUEUE}/messages/ack`, {
          acks: messages.map((/** @type {any} */ m) => ({ lease_id: m.lease_id })),
        });
    }
  })();
  /** @type {number[]} */
  const fromStart = [];
  /** @type {number[]} */
  const fromAnswer = [];
  for (let i = 0; i < count; i++) {
    // The consumer is back at its pull, waiting.
    await sleep(20);
    const started = performance.now();
    await post(`${base}/${QUEUE}/messages`, { body: { i } });
    const answered = performance.now();
    const deadline = Date.now() + 30_000;
    while (!received.has(i)) {
      if (Date.now() > deadline) throw new Error(`message ${i} was not received in 30 s`);
      await sleep(1);
    }
    fromStart.push(/** @type {number} */ (received.get(i)) - started);
    fromAnswer.push(Math.max(0, /** @type {number} */ (received.get(i)) - answered));
  }
  done = true;
  // The last pull ends with its wait: a message wakes it sooner.
  await post(`${base}/${QUEUE}/messages`, { body: { i: -1 } });
  await consumer;
  fromStart.sort((a, b) => a - b);
  fromAnswer.sort((a, b) => a - b);
  return {
    count,
    p50: pct(fromStart, 50) ?? 0,
    p99: pct(fromStart, 99) ?? 0,
    max: fromStart[fromStart.length - 1] ?? 0,
    afterAnswerP99: pct(fromAnswer, 99) ?? 0,
  };
}

/** @typedef {"delay" | "retry" | "lease" | "redrive" | "release"} WakeCause */
/** @type {Record<WakeCause, string>} */
const WAKE_CAUSES = {
  delay: "delay_seconds 1 ends (from the send's start + 1 s)",
  retry: "retry delay of 1 s ends (from the ack's start + 1 s)",
  lease: "lease of 1 s runs out (from the leasing pull's start + 1 s)",
  redrive: "redriven in from the dead-letter queue (from the redrive's start)",
  release: "its key released by an operator (from the release's start)",
};

/**
 * One message at a time becomes ready while a pull waits for it: a delayed send, a retry with
 * a delay, a lease left to run out, a redrive from the dead-letter queue, an operator's release
 * of the key holding it. It became ready somewhere between the start of the request that made it
 * ready and that request's answer (plus the delay): timed from the start, the figure includes the
 * request's own work and is never less than the true wake-up latency; timed from the answer, it
 * is never more. Both are reported.
 * @param {string} base @param {WakeCause} cause @param {number} count
 */
async function wakeRun(base, cause, count) {
  /** From the earliest moment the message can have become ready (the request's start), and from the latest (its answer). */
  /** @type {number[]} */
  const lat = [];
  /** @type {number[]} */
  const fromAnswer = [];
  /** @param {number} got @param {number} earliest @param {number} latest */
  const note = (got, earliest, latest) => {
    lat.push(got - earliest);
    fromAnswer.push(Math.max(0, got - latest));
  };
  for (let i = 0; i < count; i++) {
    const tag = `${cause}-${i}`;
    if (cause === "redrive") {
      await post(`${base}/${DLQ}/messages`, { body: { tag } });
      const waiting = waitForTag(base, tag);
      await sleep(20);
      const started = performance.now();
      await post(`${base}/${DLQ}/redrive`, { target_queue: QUEUE });
      const answered = performance.now();
      note(await waiting, started, answered);
    } else if (cause === "release") {
      // The key's head is leased and never settled: the operator releases it to the dead-letter queue.
      const key = `wake-${i}`;
      await post(`${base}/${QUEUE}/messages`, { body: { tag: `${tag}-head` }, ordering_key: key });
      await post(`${base}/${QUEUE}/messages`, { body: { tag }, ordering_key: key });
      const [head] = await pullWith(base, { batch_size: 1, visibility_timeout_ms: 60_000 });
      if (!head) throw new Error(`${tag}: the key's head was not leased`);
      const waiting = waitForTag(base, tag);
      await sleep(20);
      const started = performance.now();
      await post(`${base}/${QUEUE}/ordering/release`, { ordering_key: key, message_id: head.id });
      const answered = performance.now();
      note(await waiting, started, answered);
    } else if (cause !== "delay") {
      await post(`${base}/${QUEUE}/messages`, { body: { tag } });
      const leaseStarted = performance.now();
      const [m] = await pullWith(base, { batch_size: 1, visibility_timeout_ms: cause === "lease" ? 1000 : 30_000 });
      const leaseAnswered = performance.now();
      if (!m) throw new Error(`${tag}: not leased`);
      const waiting = waitForTag(base, tag);
      await sleep(20);
      if (cause === "retry") {
        const started = performance.now();
        await post(`${base}/${QUEUE}/messages/ack`, { retries: [{ lease_id: m.lease_id, delay_seconds: 1 }] });
        const answered = performance.now();
        note(await waiting, started + 1000, answered + 1000);
      } else note(await waiting, leaseStarted + 1000, leaseAnswered + 1000);
    } else {
      const waiting = waitForTag(base, tag);
      await sleep(20);
      const started = performance.now();
      await post(`${base}/${QUEUE}/messages`, { body: { tag }, delay_seconds: 1 });
      const answered = performance.now();
      note(await waiting, started + 1000, answered + 1000);
    }
  }
  lat.sort((a, b) => a - b);
  fromAnswer.sort((a, b) => a - b);
  return {
    p50: pct(lat, 50) ?? 0,
    p99: pct(lat, 99) ?? 0,
    max: lat[lat.length - 1] ?? 0,
    answerP50: pct(fromAnswer, 50) ?? 0,
    answerP99: pct(fromAnswer, 99) ?? 0,
  };
}

/** Long-polls until a pull answers with the message tagged `tag` (acking all it gets); when it came. @param {string} base @param {string} tag */
async function waitForTag(base, tag) {
  for (;;) {
    const messages = await pullWith(base, { batch_size: 10, visibility_timeout_ms: 30_000, wait_time_ms: WAIT_MS });
    const at = performance.now();
    if (messages.length)
      await post(`${base}/${QUEUE}/messages/ack`, {
        acks: messages.map((/** @type {any} */ m) => ({ lease_id: m.lease_id })),
      });
    if (messages.some((/** @type {any} */ m) => JSON.parse(Buffer.from(m.body, "base64").toString()).tag === tag))
      return at;
    if (messages.length === 0) throw new Error(`${tag}: the pull's wait ended without it`);
  }
}

/** @param {string} base @param {Record<string, number>} body @returns {Promise<any[]>} */
async function pullWith(base, body) {
  const res = await fetch(`${base}/${QUEUE}/messages/pull`, {
    method: "POST",
    headers: HEADERS,
    body: JSON.stringify(body),
  });
  const json = /** @type {any} */ (await res.json());
  if (!res.ok) throw new Error(`pull: ${res.status} ${JSON.stringify(json.errors)}`);
  return json.result.messages;
}

/** @param {string} base @param {number} waitMs @param {boolean} [full] @returns {Promise<any[]>} */
async function pull(base, waitMs, full = false) {
  const res = await fetch(`${base}/${QUEUE}/messages/pull`, {
    method: "POST",
    headers: HEADERS,
    body: JSON.stringify({ batch_size: full ? 10 : 1, visibility_timeout_ms: 30_000, wait_time_ms: waitMs }),
  });
  const body = /** @type {any} */ (await res.json());
  if (!res.ok) throw new Error(`pull: ${res.status} ${JSON.stringify(body.errors)}`);
  return body.result.messages;
}

/** @param {string} url @param {unknown} body */
async function post(url, body) {
  const res = await fetch(url, { method: "POST", headers: HEADERS, body: JSON.stringify(body) });
  if (!res.ok && res.status !== 409) throw new Error(`POST ${url}: ${res.status} ${await res.text()}`);
  return res;
}

/** @param {number} ms @param {AbortSignal} [signal] */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(t), resolve(undefined)), { once: true });
  });
}

/** @param {string | undefined} v @param {string} flag @param {number} min @param {number} max */
function whole(v, flag, min, max) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag} must be an integer from ${min} to ${max}`);
  return n;
}
