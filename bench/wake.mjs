// `npm run bench -- wake [--every S] [--times N]`: the first send after a sleep,
// on the deployed defaults. Two queues, each left alone between sends: one with a Worker
// consumer (push), one with a pull consumer that long-polls all along. Every S seconds one
// send to each; how long from the send to the push delivery and to the long poll's answer.
// bench/README.md ("Wake-up after a sleep") says what each figure is.
import { parseArgs } from "node:util";
import { pct } from "./driver-run.mjs";
import { withStack } from "./traffic.mjs";
import { sleep } from "../src/kernel/sleep.ts";

export const WAKE_HELP = `npm run bench -- wake [--every S] [--times N] [--shards N]
  The first send after a sleep: two queues on the deployed defaults, one with a Worker consumer (push), one with a
  long-polling pull consumer; every S s a single send to each, N times. From each send's start and from its answer
  to the push delivery and to the long poll's answer: p50, p99 and max (goal: p50 100 ms, p99 500 ms).
  About S x N + 30 s.
  --every S   seconds between sends (default 120)
  --times N   sends to each queue (default 10)
  --shards N  pin the queues at N storage shards in one local region instead of the deployed defaults`;

const HEADERS = { authorization: "Bearer shardq-local-dev-token", "content-type": "application/json" };
const PUSH = "wake-push";
const PULL = "wake-pull";
/** The longest a pull may wait (SQS's 20 s, src/kernel/limits.ts). */
const WAIT_MS = 20_000;
/** A send goes out only while a pull has waited a little and has this long left: it finds a pull waiting, not one being made. */
const POLL_MARGIN_MS = 3000;
export const GOAL = { p50: 100, p99: 500 };

/** @param {string[]} argv */
export async function wakeCommand(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      every: { type: "string", default: "120" },
      times: { type: "string", default: "10" },
      shards: { type: "string" },
    },
  });
  const every = whole(o.every, "--every", 1, 3600);
  const times = whole(o.times, "--times", 1, 1000);
  const shards = o.shards === undefined ? undefined : whole(o.shards, "--shards", 1, 64);
  return withStack(shards, async (stack, label) => {
    const api = `${stack.base}/shardq/accounts/local/queues`;
    await post(api, { queue_name: PUSH });
    await post(api, { queue_name: PULL });
    // One message makes a full batch: the figure is the wake-up, not a batch waiting to fill.
    await post(`${api}/${PUSH}/consumers`, {
      type: "worker",
      script_name: "bench-sink",
      settings: { batch_size: 1, max_wait_time_ms: 0, max_retries: 3, transport: "queue" },
    });
    await post(`${api}/${PULL}/consumers`, { type: "http_pull", settings: { visibility_timeout_ms: 30_000 } });
    const poller = longPoller(`${api}/${PULL}`);
    /** @type {Record<"push" | "pull", { start: number[], answer: number[] }>} */
    const got = { push: { start: [], answer: [] }, pull: { start: [], answer: [] } };
    try {
      for (let i = 0; i < times; i++) {
        await sleep(every * 1000);
        await poller.waiting();
        await fetch(`${stack.base}/sink/reset`, { method: "POST" });
        const started = Date.now();
        const [pushAnswered, pullAnswered] = await Promise.all([
          post(`${api}/${PUSH}/messages`, { body: { i, sent_at: started } }).then(() => Date.now()),
          post(`${api}/${PULL}/messages`, { body: { i } }).then(() => Date.now()),
        ]);
        // The sink's figure is its handler's start less the body's sent_at, on the machine's one clock.
        const pushed = await delivered(stack.base);
        got.push.start.push(pushed);
        got.push.answer.push(Math.max(0, pushed - (pushAnswered - started)));
        const at = await poller.received(i);
        got.pull.start.push(at - started);
        got.pull.answer.push(Math.max(0, at - pullAnswered));
      }
    } finally {
      await poller.stop();
    }
    const figures = { push: stats(got.push), pull: stats(got.pull) };
    console.log(
      `wake: a single send to each of two queues left alone between sends, every ${every} s, ${times} times, ${label}`,
    );
    console.log(
      `| consumer | from the send's start: p50 / p99 / max ms | from the send's answer: p50 / p99 ms | goal: p50 ${GOAL.p50} / p99 ${GOAL.p99} ms |`,
    );
    console.log("| --- | --- | --- | --- |");
    for (const [name, f] of /** @type {const} */ ([
      ["push (Worker consumer, batch_size 1)", figures.push],
      [`long poll (wait_time_ms ${WAIT_MS})`, figures.pull],
    ])) {
      const met = f.p50 <= GOAL.p50 && f.p99 <= GOAL.p99 ? "met" : "not met";
      console.log(`| ${name} | ${f.p50} / ${f.p99} / ${f.max} | ${f.answerP50} / ${f.answerP99} | ${met} |`);
    }
    return figures;
  });
}

/** @param {{ start: number[], answer: number[] }} s */
function stats(s) {
  const a = [...s.start].sort((x, y) => x - y);
  const b = [...s.answer].sort((x, y) => x - y);
  return {
    p50: pct(a, 50) ?? 0,
    p99: pct(a, 99) ?? 0,
    max: a[a.length - 1] ?? 0,
    answerP50: pct(b, 50) ?? 0,
    answerP99: pct(b, 99) ?? 0,
  };
}

/** The push latency of the one message since the sink's reset, once it has it. @param {string} base */
async function delivered(base) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const s = /** @type {any} */ (await (await fetch(`${base}/sink/stats`)).json());
    if (s.distinct >= 1 && typeof s.latency_ms.p50 === "number") return s.latency_ms.p50;
    if (Date.now() > deadline) throw new Error("the push consumer did not receive the message in 30 s");
    await sleep(5);
  }
}

/**
 * A pull consumer that long-polls all along, acking what it gets: when each message's pull
 * answered (Date.now()), and whether a pull is waiting with time left.
 * @param {string} queue
 */
function longPoller(queue) {
  /** @type {Map<number, number>} */
  const at = new Map();
  let pullStarted = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      pullStarted = Date.now();
      const res = await fetch(`${queue}/messages/pull`, {
        method: "POST",
        headers: HEADERS,
        body: JSON.stringify({ batch_size: 10, visibility_timeout_ms: 30_000, wait_time_ms: WAIT_MS }),
      });
      const now = Date.now();
      pullStarted = 0;
      const body = /** @type {any} */ (await res.json());
      if (!res.ok) throw new Error(`pull: ${res.status} ${JSON.stringify(body.errors)}`);
      for (const m of body.result.messages) at.set(JSON.parse(Buffer.from(m.body, "base64").toString()).i, now);
      if (body.result.messages.length)
        await post(`${queue}/messages/ack`, {
          acks: body.result.messages.map((/** @type {any} */ m) => ({ lease_id: m.lease_id })),
        });
    }
  })();
  return {
    async waiting() {
      for (;;) {
        const waited = pullStarted ? Date.now() - pullStarted : -1;
        if (waited >= 50 && waited < WAIT_MS - POLL_MARGIN_MS) return;
        await sleep(10);
      }
    },
    /** @param {number} i */
    async received(i) {
      const deadline = Date.now() + 30_000;
      while (!at.has(i)) {
        if (Date.now() > deadline) throw new Error(`the long poll did not answer with message ${i} in 30 s`);
        await sleep(1);
      }
      return /** @type {number} */ (at.get(i));
    },
    async stop() {
      stopped = true;
      // The last pull would run its wait out: a message ends it.
      await post(`${queue}/messages`, { body: { i: -1 } }).catch(() => undefined);
      await loop.catch(() => undefined);
    },
  };
}

/** @param {string} url @param {unknown} body */
async function post(url, body) {
  const res = await fetch(url, { method: "POST", headers: HEADERS, body: JSON.stringify(body) });
  if (!res.ok && res.status !== 409) throw new Error(`POST ${url}: ${res.status} ${await res.text()}`);
  return res;
}

/** @param {string | undefined} v @param {string} flag @param {number} min @param {number} max */
function whole(v, flag, min, max) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag} must be an integer from ${min} to ${max}`);
  return n;
}
