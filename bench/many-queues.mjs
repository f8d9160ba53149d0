// `npm run bench -- many`: many queues on one machine, then quiet ("Ten thousand
// queues"). Starts the stack as `npm start` does (the service with the example consumer, the
// example producer, shardq.config.json applied) on free loopback ports with its own state,
// creates N queues through the REST API, each with a consumer (alternately a Worker push
// consumer, the example consumer, and an http_pull consumer), sends one message to each,
// receives every message exactly once (push: the example consumer's tally; pull: pull, then
// ack), checks every backlog is 0, waits --settle-seconds, and then measures a quiet window
// (quiet-window.mjs): the Durable Object requests the stack makes in it, and the CPU and
// memory of workerd.
// bench/README.md ("Many queues") says what each figure is.
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { applyConfig } from "../cli/workers/apply-config.mjs";
import { writeDevConfig } from "../cli/wrangler/dev-config.mjs";
import { freePort, ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";
import { mb, printReport, secs } from "./many-queues-report.mjs";
import { quietWindow, workerdFigures } from "./quiet-window.mjs";
import { sleep } from "../src/kernel/sleep.ts";

export const MANY_HELP = `npm run bench -- many [--queues N] [--quiet-seconds S] [--settle-seconds S] [--concurrency C] [--state DIR] [--json FILE]
  Many queues, then quiet: creates N queues (even: a Worker push consumer, odd: an http_pull consumer), sends one
  message to each, receives every one once, then counts the Durable Object requests and workerd's CPU and memory
  over a quiet window.
  --queues N          queues to create (default 10000, Cloudflare's per-account limit; at most 10000)
  --quiet-seconds S   the quiet window (default 300)
  --settle-seconds S  wait after the last message is received before the window starts (default 60: the issue's
                      "no sends for at most 60 s")
  --concurrency C     API calls in flight while setting up and receiving (default 16)
  --state DIR         keep the service's state there (default: a temporary directory, removed at the end)
  --json FILE         write the figures as JSON`;

const TOKEN = "shardq-local-dev-token";
const HEADERS = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
const PREFIX = "many-";
/** The consumer Worker of the push queues: the example consumer, which tallies what it got. */
const PUSH_SCRIPT = "shardq-example-consumer";
/** The service's config for this run: wrangler.toml with the test hooks on (gitignored). */
const CONFIG_FILE = "wrangler.bench-many.toml";
/** Errors kept per phase; the rest are counted. */
const KEEP_ERRORS = 3;

/**
 * @typedef {{ name: string, kind: "push" | "pull", created: boolean, consumer: boolean, id: string | null, received: number }} Q
 * @typedef {{ ms: number, ok: number, failed: number, errors: string[] }} Phase
 */

/** @param {string[]} argv */
export async function manyQueues(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      queues: { type: "string", default: "10000" },
      "quiet-seconds": { type: "string", default: "300" },
      "settle-seconds": { type: "string", default: "60" },
      concurrency: { type: "string", default: "16" },
      state: { type: "string" },
      json: { type: "string" },
    },
  });
  const n = whole(o.queues, "--queues", 2, 10_000);
  const quietSeconds = whole(o["quiet-seconds"], "--quiet-seconds", 1, 3600);
  const settleSeconds = whole(o["settle-seconds"], "--settle-seconds", 0, 3600);
  const concurrency = whole(o.concurrency, "--concurrency", 1, 256);

  const work = mkdtempSync(join(tmpdir(), "shardq-bench-many-"));
  const stateDir = o.state ?? join(work, "state");
  const env = { WRANGLER_REGISTRY_PATH: join(work, "registry") };
  const port = await freePort();
  const producerPort = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const producerBase = `http://127.0.0.1:${producerPort}`;
  /** @type {Record<string, unknown>} */
  const report = {
    queues: n,
    push: Math.ceil(n / 2),
    pull: Math.floor(n / 2),
    concurrency,
    quiet_seconds: quietSeconds,
    settle_seconds: settleSeconds,
    phases: {},
  };
  const phases = /** @type {Record<string, Phase>} */ (report.phases);
  const log = (/** @type {string} */ line) => console.log(`[many] ${line}`);

  /** @type {Awaited<ReturnType<typeof startWrangler>> | undefined} */
  let service;
  /** @type {Awaited<ReturnType<typeof startWrangler>> | undefined} */
  let producer;
  try {
    // As `npm start`, plus SHARDQ_TEST_HOOKS: the route that reads the request count without asking an object.
    const config = writeDevConfig({ file: join(ROOT, CONFIG_FILE), vars: { SHARDQ_TEST_HOOKS: "on" } });
    service = await startWrangler({
      args: [
        "-c",
        config,
        "-c",
        "examples/consumer/wrangler.toml",
        "--port",
        String(port),
        "--ip",
        "127.0.0.1",
        "--persist-to",
        stateDir,
        "--inspector-port",
        "0",
      ],
      readyUrl: `${base}/`,
      env,
    });
    producer = await startWrangler({
      args: [
        "-c",
        "examples/producer/wrangler.toml",
        "--port",
        String(producerPort),
        "--ip",
        "127.0.0.1",
        "--persist-to",
        join(work, "producer-state"),
        "--inspector-port",
        "0",
      ],
      readyUrl: `${producerBase}/`,
      env,
    });
    await applyConfig(base, TOKEN);
    const servicePid = /** @type {number} */ (service.pid);
    const producerPid = /** @type {number} */ (producer.pid);
    report.memory_at_start = workerdFigures(servicePid);
    log(`stack up on ${base}; workerd ${mb(workerdFigures(servicePid).rss_bytes)} MB`);

    /** @type {Q[]} */
    const queues = Array.from({ length: n }, (_, i) => ({
      name: `${PREFIX}${String(i).padStart(5, "0")}`,
      kind: i % 2 === 0 ? "push" : "pull",
      created: false,
      consumer: false,
      id: null,
      received: 0,
    }));
    const call = (/** @type {string} */ method, /** @type {string} */ path, /** @type {unknown} */ body = undefined) =>
      api(base, method, path, body);

    // 1. Queues, then a consumer on each.
    phases.create = await phase(queues, concurrency, async (q) => {
      await call("POST", "/queues", { queue_name: q.name });
      q.created = true;
    });
    log(
      `created ${phases.create.ok} queues in ${secs(phases.create.ms)} s (${phases.create.failed} failed); workerd ${mb(workerdFigures(servicePid).rss_bytes)} MB`,
    );
    phases.consumers = await phase(
      queues.filter((q) => q.created),
      concurrency,
      async (q) => {
        // As the example queue's consumer in shardq.config.json.
        const consumer =
          q.kind === "push"
            ? {
                type: "worker",
                script_name: PUSH_SCRIPT,
                settings: { batch_size: 10, max_wait_time_ms: 1000, max_retries: 3 },
              }
            : { type: "http_pull", settings: { visibility_timeout_ms: 30_000, max_retries: 3 } };
        await call("POST", `/queues/${q.name}/consumers`, consumer);
        q.consumer = true;
      },
    );
    log(`added ${phases.consumers.ok} consumers in ${secs(phases.consumers.ms)} s (${phases.consumers.failed} failed)`);
    report.memory_after_setup = workerdFigures(servicePid);

    // 2. One message each.
    const ready = queues.filter((q) => q.consumer);
    phases.send = await phase(ready, concurrency, async (q) => {
      const r = await call("POST", `/queues/${q.name}/messages`, { body: { queue: q.name, sent_at: Date.now() } });
      q.id = r.message_id;
    });
    log(`sent ${phases.send.ok} messages in ${secs(phases.send.ms)} s (${phases.send.failed} failed)`);

    // 3. Every message received once. Pull queues: pull until the message comes, ack it, and
    // one more pull that must come back empty (a second copy would be a duplicate).
    const sent = ready.filter((q) => q.id !== null);
    const pull = { pulled: 0, acked: 0, duplicates: 0, wrong_ids: 0, empty_pulls: 0 };
    const deadline = Date.now() + 120_000 + 20 * n;
    phases.receive_pull = await phase(
      sent.filter((q) => q.kind === "pull"),
      concurrency,
      async (q) => {
        for (;;) {
          const r = await call("POST", `/queues/${q.name}/messages/pull`, {
            batch_size: 10,
            visibility_timeout_ms: 60_000,
          });
          const messages = /** @type {Array<{ id: string, lease_id: string }>} */ (r.messages);
          if (messages.length > 0) {
            q.received += messages.length;
            pull.pulled += messages.length;
            pull.wrong_ids += messages.filter((m) => m.id !== q.id).length;
            const acked = await call("POST", `/queues/${q.name}/messages/ack`, {
              acks: messages.map((m) => ({ lease_id: m.lease_id })),
            });
            pull.acked += acked.ackCount;
            break;
          }
          pull.empty_pulls++;
          if (Date.now() > deadline) throw new Error(`no message within the deadline`);
          await sleep(200);
        }
        const again = await call("POST", `/queues/${q.name}/messages/pull`, {
          batch_size: 10,
          visibility_timeout_ms: 60_000,
        });
        pull.duplicates += again.messages.length;
      },
    );
    log(
      `pulled ${pull.pulled} and acked ${pull.acked} in ${secs(phases.receive_pull.ms)} s (${phases.receive_pull.failed} queues failed, ${pull.duplicates} pulled twice)`,
    );

    // Push queues: the example consumer's tally, over every queue (only these queues get messages).
    const pushSent = sent.filter((q) => q.kind === "push").length;
    const pushStarted = Date.now();
    /** @type {any} */
    let stats = null;
    for (;;) {
      stats = await (await fetch(`${producerBase}/consumer/stats`)).json();
      if (stats.received >= pushSent || Date.now() > deadline) break;
      await sleep(1000);
    }
    const push = {
      sent: pushSent,
      received: stats.received,
      distinct: stats.distinct,
      duplicates: stats.duplicates,
      latency_ms: stats.latencyMs,
      missing: /** @type {string[]} */ ([]),
    };
    if (stats.distinct < pushSent) {
      // Which ones: asked per queue only when some are missing.
      await phase(
        sent.filter((q) => q.kind === "push"),
        concurrency,
        async (q) => {
          const r = /** @type {any} */ (
            await (
              await fetch(`${producerBase}/consumer/missing`, {
                method: "POST",
                body: JSON.stringify({ queue: q.name, ids: [q.id] }),
              })
            ).json()
          );
          if (r.missing.length > 0 && push.missing.length < 20) push.missing.push(q.name);
        },
      );
    }
    phases.receive_push = {
      ms: Date.now() - pushStarted,
      ok: stats.distinct,
      failed: Math.max(0, pushSent - stats.distinct),
      errors: [],
    };
    log(
      `push consumer received ${stats.received} (${stats.distinct} distinct, ${stats.duplicates} duplicates) of ${pushSent}`,
    );
    const lastReceived = Date.now();

    // 4. Nothing left anywhere (a push message is acked after the tally recorded it: waited for here).
    let left = { queues: 0, messages: 0 };
    for (;;) {
      left = { queues: 0, messages: 0 };
      phases.verify = await phase(sent, concurrency, async (q) => {
        const m = await call("GET", `/queues/${q.name}/metrics`);
        if (m.backlog_count > 0) {
          left.queues++;
          left.messages += m.backlog_count;
        }
      });
      if (left.messages === 0 || Date.now() > deadline) break;
      await sleep(1000);
    }
    const once =
      sent.length === n &&
      pull.acked === report.pull &&
      pull.duplicates === 0 &&
      pull.wrong_ids === 0 &&
      push.distinct === report.push &&
      push.duplicates === 0 &&
      push.received === report.push &&
      left.messages === 0;
    report.delivery = { sent: sent.length, push, pull, backlog_left: left, every_message_once: once };
    log(
      `every message delivered once: ${once ? "yes" : "NO"} (backlog left: ${left.messages} in ${left.queues} queues)`,
    );

    // 5. Settle, then the quiet window.
    const settleLeft = lastReceived + settleSeconds * 1000 - Date.now();
    if (settleLeft > 0) {
      log(`settling ${secs(settleLeft)} s before the quiet window`);
      await sleep(settleLeft);
    }
    log(`quiet window: ${quietSeconds} s`);
    const readRequests = async () => /** @type {number} */ ((await api(base, "GET", "/test-hooks/requests")).requests);
    report.quiet = await quietWindow(readRequests, servicePid, producerPid, quietSeconds);
    const q = /** @type {any} */ (report.quiet);
    log(
      `quiet ${quietSeconds} s: ${q.do_requests} Durable Object requests (${q.do_requests_per_hour} /h), workerd ${q.workerd.cpu_percent_of_core} % of a core, RSS ${mb(q.workerd.rss_bytes_end)} MB (max ${mb(q.workerd.rss_bytes_max)} MB)`,
    );
    report.state_bytes = dirBytes(stateDir);
  } catch (err) {
    report.error = /** @type {Error} */ (err).message;
    if (service?.pid) report.memory_at_error = workerdFigures(service.pid);
    process.exitCode = 1;
  } finally {
    await Promise.all([producer?.stop(), service?.stop()]);
    if (o.state === undefined) rmSync(work, { recursive: true, force: true });
    else rmSync(join(work, "registry"), { recursive: true, force: true });
  }
  printReport(report);
  if (o.json) writeFileSync(o.json, `${JSON.stringify(report, null, 2)}\n`);
}

/**
 * Runs `fn` over `items`, `concurrency` at a time; a failure is counted (and the first few
 * kept) and the rest go on, so a run that runs out of something says how far it got.
 * @template T @param {T[]} items @param {number} concurrency @param {(item: T) => Promise<void>} fn @returns {Promise<Phase>}
 */
async function phase(items, concurrency, fn) {
  const started = Date.now();
  const out = { ms: 0, ok: 0, failed: 0, errors: /** @type {string[]} */ ([]) };
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++];
      try {
        await fn(/** @type {T} */ (item));
        out.ok++;
      } catch (err) {
        out.failed++;
        if (out.errors.length < KEEP_ERRORS) out.errors.push(/** @type {Error} */ (err).message);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  out.ms = Date.now() - started;
  return out;
}

/** A call of the local account's API; its `result`, or an error naming the call. @param {string} base @param {string} method @param {string} path @param {unknown} [body] */
async function api(base, method, path, body) {
  const res = await fetch(`${base}/accounts/local${path}`, {
    method,
    headers: HEADERS,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
  return /** @type {any} */ (JSON.parse(text)).result;
}

/** @param {string} dir */
function dirBytes(dir) {
  let total = 0;
  try {
    for (const e of readdirSync(dir, { withFileTypes: true }))
      total += e.isDirectory() ? dirBytes(join(dir, e.name)) : statSync(join(dir, e.name)).size;
  } catch {
    // not there
  }
  return total;
}

/** @param {string | undefined} v @param {string} flag @param {number} min @param {number} max */
function whole(v, flag, min, max) {
  const x = Number(v);
  if (!Number.isInteger(x) || x < min || x > max) throw new Error(`${flag} must be an integer from ${min} to ${max}`);
  return x;
}
