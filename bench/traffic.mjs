// `npm run bench -- idle` and `npm run bench -- traffic`: what one queue costs a month at its
// traffic, on the deployed defaults, beside what Cloudflare Queues would bill for
// the same messages. bench/README.md ("Cost by traffic") says what each figure is.
// - idle: a queue with one Worker consumer, set up as an operator would, left alone: its
//   objects' counters (GET /cost) read once it has settled and again a window later.
// - traffic: the idle window, then single send()s at each rate (1, 10, 100, 1,000 a second),
//   each priced the same way over a window of steady sending; a table and a log-log chart.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { ROOT } from "../cli/wrangler/dev-server.mjs";
import { costRateChart } from "./charts.mjs";
import { CLASSES } from "./cost.mjs";
import { costWindow, HOURS_PER_MONTH, priceWindow } from "./cost-window.mjs";
import { sinkStats, untilDelivered } from "./driver-run.mjs";
import { startShardq } from "./stacks.mjs";
import { sleep } from "../src/kernel/sleep.ts";

/** @typedef {import("./cost-window.mjs").Priced} Priced */

/** Long enough for a queue that has gone quiet to sleep: a queue sleeps after 60 s without sends, plus a heartbeat's 5 s and a margin. */
const SETTLE_S = 75;
const MAX_CALLS = 4;

export const IDLE_HELP = `npm run bench -- idle [--settle S] [--seconds W] [--shards N]
  An idle queue's bill: a queue with one Worker consumer on the deployed defaults (wrangler.toml's REGIONS and
  shard counts), one message sent and delivered, then left alone. Its objects' counters are read S s later and
  again W s after that: Durable Object requests, alarms, rows written and read per hour, and $ per queue-month
  beside Cloudflare Queues' $0. About S + W + 30 s.
  --settle S   seconds from the set-up to the first reading (default ${SETTLE_S})
  --seconds W  the measured window (default 120)
  --shards N   pin the queue at N storage shards in one local region instead of the deployed defaults`;

export const TRAFFIC_HELP = `npm run bench -- traffic [--idle-seconds W] [--seconds S] [--warm U] [--rates R,R,...] [--settle S] [--shards N] [--out DIR]
  A queue's bill by its traffic, on the deployed defaults: the idle window, then single send()s at each rate,
  each as $ per queue-month beside Cloudflare Queues' price for the same messages; a table, JSON and a log-log
  chart (cost against rate, both products) in DIR.
  --idle-seconds W  the idle window (default 600)
  --seconds S       each rate's measured window, after U s of warming up at that rate (default 60)
  --warm U          (default 15)
  --rates R,...     single send()s per second (default 1,10,100,1000)
  --settle S        seconds from the set-up to the idle window (default ${SETTLE_S})
  --shards N        pin the queue at N storage shards in one local region instead of the deployed defaults
  --out DIR         where the report goes (default bench/results)`;

/** @param {string[]} argv */
export async function idleCommand(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      settle: { type: "string", default: String(SETTLE_S) },
      seconds: { type: "string", default: "120" },
      shards: { type: "string" },
    },
  });
  const settle = whole(o.settle, "--settle", 0, 3600);
  const seconds = whole(o.seconds, "--seconds", 1, 86_400);
  const shards = o.shards === undefined ? undefined : whole(o.shards, "--shards", 1, 64);
  return withStack(shards, async (stack, label) => {
    const idle = await idleWindow(stack, settle, seconds);
    console.log(
      `idle: queue "bench" with one Worker consumer, ${label}: ${idle.shards.storage} storage shard(s), ${idle.shards.consumer} consumer shard(s)`,
    );
    console.log(
      `read ${settle} s after the set-up (one message sent and delivered) and again ${idle.seconds.toFixed(0)} s later; a month is ${HOURS_PER_MONTH} h`,
    );
    console.log(TABLE_HEAD.join("\n"));
    console.log(row(`idle, ${idle.shards.storage} storage shard(s)`, idle));
    console.log(byClass(idle));
    return idle;
  });
}

/** @param {string[]} argv */
export async function trafficCommand(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      "idle-seconds": { type: "string", default: "600" },
      seconds: { type: "string", default: "60" },
      warm: { type: "string", default: "15" },
      rates: { type: "string", default: "1,10,100,1000" },
      settle: { type: "string", default: String(SETTLE_S) },
      shards: { type: "string" },
      out: { type: "string", default: join(ROOT, "bench", "results") },
    },
  });
  const idleSeconds = whole(o["idle-seconds"], "--idle-seconds", 1, 86_400);
  const seconds = whole(o.seconds, "--seconds", 1, 3600);
  const warm = whole(o.warm, "--warm", 0, 600);
  const settle = whole(o.settle, "--settle", 0, 3600);
  const shards = o.shards === undefined ? undefined : whole(o.shards, "--shards", 1, 64);
  const rates = String(o.rates)
    .split(",")
    .map((r) => whole(r.trim(), "--rates", 1, 5000));
  return withStack(shards, async (stack, label) => {
    const idle = await idleWindow(stack, settle, idleSeconds);
    /** @type {Array<Priced & { rate: number, offered: number, failed: number }>} */
    const levels = [];
    for (const rate of rates) levels.push({ rate, ...(await rateWindow(stack, rate, warm, seconds)) });
    const stamp = new Date().toISOString().replace(/[:T]/g, "-").slice(0, 19);
    const out = resolve(String(o.out));
    mkdirSync(out, { recursive: true });
    const md = trafficMarkdown({ label, idle, levels, idleSeconds, seconds, warm });
    const files = {
      json: join(out, `${stamp}-traffic.json`),
      md: join(out, `${stamp}-traffic.md`),
      svg: join(out, `${stamp}-traffic.svg`),
    };
    writeFileSync(
      files.json,
      JSON.stringify(
        { label, hours_per_month: HOURS_PER_MONTH, idle_seconds: idleSeconds, seconds, warm, idle, levels },
        null,
        2,
      ) + "\n",
    );
    writeFileSync(files.svg, costRateChart("$ per queue-month against single send()s per second", levels, idle, label));
    writeFileSync(files.md, md + `\n\n![cost against rate](${stamp}-traffic.svg)\n`);
    console.log(md);
    console.log(`\nwritten: ${files.md}, ${files.json}, ${files.svg}`);
    return { idle, levels, files };
  });
}

/**
 * The service's vars for a stack on the deployed defaults: local dev's .dev.vars (the local
 * token, the signing key, the local consumer transport, no rate limits) except where shards go,
 * REGIONS and DEFAULT_REGION, which are wrangler.toml's: .dev.vars' one local region would hide
 * how many shards a deployed queue has. Everything else the service reads (shards per region,
 * heartbeats, autoscaling) is wrangler.toml's already. With `shards`, the queue is pinned at that
 * many in the one local region instead.
 * @param {string} toml wrangler.toml's text @param {string} devVars .dev.vars' text @param {number} [shards]
 */
export function stackVars(toml, devVars, shards) {
  /** @type {Record<string, string>} */
  const vars = {};
  for (const line of devVars.split("\n")) {
    const m = /^\s*([A-Z_][A-Z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (m) vars[/** @type {string} */ (m[1])] = /** @type {string} */ (m[2]).replace(/^"(.*)"$/, "$1");
  }
  if (shards !== undefined)
    return {
      vars: { ...vars, SHARDS_PER_REGION: String(shards), MAX_SHARDS_PER_REGION: String(shards) },
      label: `pinned at ${shards} storage shard(s) in one local region`,
    };
  const section = /^\[vars\]\s*$([\s\S]*?)(?=^\[)/m.exec(toml)?.[1] ?? "";
  /** @type {Record<string, string>} */
  const deployed = {};
  for (const m of section.matchAll(/^([A-Z_][A-Z0-9_]*)\s*=\s*"([^"]*)"/gm))
    deployed[/** @type {string} */ (m[1])] = /** @type {string} */ (m[2]);
  for (const key of ["REGIONS", "DEFAULT_REGION"]) {
    if (deployed[key] === undefined) delete vars[key];
    else vars[key] = deployed[key];
  }
  const shape = ["REGIONS", "SHARDS_PER_REGION"]
    .filter((k) => deployed[k] !== undefined)
    .map((k) => `${k} ${deployed[k]}`)
    .join(", ");
  return { vars, label: `wrangler.toml's defaults (${shape || "no REGIONS"})` };
}

/**
 * Runs `run` on a stack of its own (stackVars), on fresh state, and stops it.
 * @template T @param {number | undefined} shards @param {(stack: import("./stacks.mjs").Stack, label: string) => Promise<T>} run
 */
export async function withStack(shards, run) {
  const work = mkdtempSync(join(tmpdir(), "shardq-traffic-"));
  const { vars, label } = stackVars(
    readFileSync(join(ROOT, "wrangler.toml"), "utf8"),
    readFileSync(join(ROOT, ".dev.vars"), "utf8"),
    shards,
  );
  const stack = await startShardq({
    work,
    env: { WRANGLER_REGISTRY_PATH: join(work, "registry") },
    file: join(work, "wrangler.service.toml"),
    name: "state",
    vars,
    outside: true,
  });
  try {
    return await run(stack, label);
  } finally {
    await stack.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * The idle window: one message sent and delivered (the queue has had traffic and gone quiet),
 * `settle` s of nothing, then the objects' counters over `seconds` of nothing.
 * @param {import("./stacks.mjs").Stack} stack @param {number} settle @param {number} seconds @returns {Promise<Priced>}
 */
async function idleWindow(stack, settle, seconds) {
  await fetch(`${stack.base}/sink/reset`, { method: "POST" });
  const r = /** @type {any} */ (
    await (await fetch(`${stack.base}/run?count=1&concurrency=1&batch=1`, { method: "POST" })).json()
  );
  if (r.error) throw new Error(`driver: ${r.error}`);
  if ((await untilDelivered(stack.base, 1)).distinct < 1)
    throw new Error("the set-up's message was not delivered in 2 minutes");
  await sleep(settle * 1000);
  const w = await costWindow(stack, seconds, async () => 0);
  return { seconds: w.seconds, delta: w.delta, shards: w.shards, ...priceWindow(w.delta, w.seconds, 0) };
}

/** How often a rate window reads the objects' counters: more often than workerd evicts an idle object (costWindow). */
const READ_EVERY_S = 5;

/**
 * Single send()s at `rate` a second through the driver Worker (a call of a second's worth each
 * second, each message paced within it, at most MAX_CALLS calls outstanding: what could not be
 * offered is counted, not caught up), `warm` s before the window and through it; then sending
 * stops and everything sent is waited for. `params` adds to the driver's /run query: its
 * batching producer (`producer=batching`), ordering keys (`keys=N`).
 * @param {import("./stacks.mjs").Stack} stack @param {number} rate @param {number} warm @param {number} seconds @param {string} [params]
 */
export async function rateWindow(stack, rate, warm, seconds, params = "") {
  await fetch(`${stack.base}/sink/reset`, { method: "POST" });
  const tally = { offered: 0, sent: 0, failed: 0, skipped: 0 };
  const stop = new AbortController();
  // Enough in flight for a send latency of up to 100 ms at the rate.
  const concurrency = Math.min(256, Math.max(1, Math.ceil(rate / 10)));
  const sending = (async () => {
    /** @type {Set<Promise<void>>} */
    const calls = new Set();
    const t0 = performance.now();
    for (let k = 0; !stop.signal.aborted; k++) {
      const due = t0 + k * 1000 - performance.now();
      if (due > 0) await sleep(due);
      if (stop.signal.aborted) break;
      tally.offered += rate;
      if (calls.size >= MAX_CALLS) {
        tally.skipped += rate;
        continue;
      }
      const call = fetch(
        `${stack.base}/run?count=${rate}&concurrency=${concurrency}&batch=1&rate=${rate}&continue=1${params}`,
        { method: "POST" },
      )
        .then(async (res) => {
          const r = /** @type {any} */ (await res.json());
          tally.sent += r.sent ?? 0;
          tally.failed += r.failed ?? 0;
        })
        .catch(() => void (tally.failed += rate))
        .finally(() => calls.delete(call));
      calls.add(call);
    }
    await Promise.all(calls);
  })();
  await sleep(warm * 1000);
  const w = await costWindow(stack, seconds, async () => (await sinkStats(stack.base)).distinct, READ_EVERY_S);
  stop.abort();
  await sending;
  const done = await untilDelivered(stack.base, tally.sent);
  if (done.distinct < tally.sent)
    throw new Error(
      `${rate}/s: ${tally.sent - done.distinct} of ${tally.sent} sent messages were not delivered in 2 minutes`,
    );
  return {
    seconds: w.seconds,
    delta: w.delta,
    shards: w.shards,
    offered: tally.offered,
    failed: tally.failed + tally.skipped,
    ...priceWindow(w.delta, w.seconds, w.marked),
  };
}

const TABLE_HEAD = [
  "| traffic | messages delivered / h | DO requests / h (alarms) | rows written / h | rows read / h | shardq $ per queue-month | Cloudflare Queues $ per queue-month |",
  "| --- | --- | --- | --- | --- | --- | --- |",
];

/** @param {string} name @param {Priced} p */
function row(name, p) {
  const n = (/** @type {number} */ x) => Math.round(x).toLocaleString("en-US");
  const lower = p.restarted > 0 ? ` (${p.restarted} object(s) restarted in the window: a lower bound)` : "";
  return `| ${name} | ${n(p.perHour.delivered)} | ${n(p.perHour.requests)} (${n(p.perHour.alarms)}) | ${n(p.perHour.rowsWritten)} | ${n(p.perHour.rowsRead)} | **$${p.usd.toFixed(2)}**${lower} | $${p.cq_usd.toFixed(2)} |`;
}

/** Requests an hour by class, the classes that made any. @param {Priced} p */
function byClass(p) {
  const h = 3600 / p.seconds;
  const parts = CLASSES.filter((c) => p.delta[c].rpcs + p.delta[c].alarms > 0).map(
    (c) =>
      `${c} ${Math.round((p.delta[c].rpcs + p.delta[c].alarms) * h).toLocaleString("en-US")} (${p.delta[c].active} active)`,
  );
  return `DO requests / h by class: ${parts.length ? parts.join(", ") : "none"}`;
}

/**
 * The report: the idle line on its own, then every level beside it.
 * @param {{ label: string, idle: Priced, levels: Array<Priced & { rate: number, offered: number, failed: number }>, idleSeconds: number, seconds: number, warm: number }} r
 */
export function trafficMarkdown(r) {
  const lines = [
    `## Cost by traffic (${r.label})`,
    "",
    `Idle, on its own: **$${r.idle.usd.toFixed(2)} per queue-month** (Cloudflare Queues: $0.00), ${r.idle.shards.storage} storage shard(s), ${r.idle.shards.consumer} consumer shard(s), over ${Math.round(r.idle.seconds)} s.`,
    "",
    `Each rate: single send()s through the producer binding, ${r.warm} s of warming up, then ${r.seconds} s measured. Durable Object requests (RPCs and alarms), rows written and read at list prices, a month of ${HOURS_PER_MONTH} h; ` +
      "duration and Workers CPU left out. Cloudflare Queues: 3 operations per message (write, read, delete), $0.40 per million.",
    "",
    ...TABLE_HEAD,
    row(`idle (${Math.round(r.idle.seconds)} s)`, r.idle),
    ...r.levels.map((l) =>
      row(
        `${l.rate} send()/s (${Math.round(l.seconds)} s; ${l.shards.storage} storage shard(s)${l.failed ? `; ${l.failed} not sent` : ""})`,
        l,
      ),
    ),
  ];
  return lines.join("\n");
}

/** @param {string | undefined} v @param {string} flag @param {number} min @param {number} max */
function whole(v, flag, min, max) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag} must be an integer from ${min} to ${max}`);
  return n;
}
