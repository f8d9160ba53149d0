// `npm run bench -- rates`: what one message costs at the rates queues really see,
// by object, beside Cloudflare Queues' $1.20 a million. For each pinned shard count and each
// consumer setting: single send()s at each rate, the same through shardq/producer, and keyed
// single sends; every object's own counters over a window of steady sending (traffic.mjs
// rateWindow), as requests and rows written per delivered message, split by object class.
// bench/README.md ("Cost by rate") says what each figure is.
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { ROOT } from "../cli/wrangler/dev-server.mjs";
import { CLASSES } from "./cost.mjs";
import { PRICES, queuesUsd, usd } from "./prices.mjs";
import { rateWindow, withStack } from "./traffic.mjs";

const HEADERS = { authorization: "Bearer shardq-local-dev-token", "content-type": "application/json" };
/** The driver's bodies ({ i, sent_at }): one 64 KB operation each on Cloudflare Queues. */
const BODY_BYTES = 40;
/** Ordering keys of the keyed traffic: as w8. */
const KEYS = 10_000;

/** The consumer settings a window runs under. */
export const CONSUMERS = /** @type {const} */ ({
  bench: { batch_size: 100, max_wait_time_ms: 1000, label: "the benchmark's consumer (batches of 100, 1 s)" },
  cloudflare: { batch_size: 10, max_wait_time_ms: 5000, label: "Cloudflare's defaults (batches of 10, 5 s)" },
});

export const RATES_HELP = `npm run bench -- rates [--shards N,...] [--consumers bench,cloudflare] [--single R,...] [--producer R,...] [--linger MS] [--keyed R,...] [--seconds S] [--warm U] [--out DIR]
  What one message costs at each rate: requests and rows written per delivered message by object
  (storage shard, Coordinator, consumer shard, the rest), $ per million messages and the ratio to Cloudflare
  Queues' $1.20, for each pinned storage-shard count and consumer setting. A table and JSON in DIR.
  --shards N,...      storage shards the queue is pinned at, one stack each (default 1; the issue also asks 12)
  --consumers C,...   bench (batches of 100, 1 s) and/or cloudflare (Cloudflare's defaults: 10, 5 s) (default both)
  --single R,...      single send()s per second (default 1,10,100,1000)
  --producer R,...    single send()s per second through shardq/producer's batchingQueue (default 100,1000)
  --linger MS         the batching producer's linger (default 2, its own default)
  --keyed R,...       single send()s per second with an ordering key out of ${KEYS.toLocaleString("en-US")} (default 100)
  --seconds S         each window, after U s of warming up (default 60; 15)
  --out DIR           where the report goes (default bench/results)
  About (U + S + 10) s per window: the defaults take about 20 minutes per shard count.`;

/** @param {string[]} argv */
export async function ratesCommand(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      shards: { type: "string", default: "1" },
      consumers: { type: "string", default: "bench,cloudflare" },
      single: { type: "string", default: "1,10,100,1000" },
      producer: { type: "string", default: "100,1000" },
      linger: { type: "string", default: "2" },
      keyed: { type: "string", default: "100" },
      seconds: { type: "string", default: "60" },
      warm: { type: "string", default: "15" },
      out: { type: "string", default: join(ROOT, "bench", "results") },
    },
  });
  const shardCounts = list(o.shards, "--shards", 1, 64);
  const consumers = String(o.consumers)
    .split(",")
    .map((c) => c.trim())
    .filter(Boolean);
  for (const c of consumers)
    if (!(c in CONSUMERS)) throw new Error(`--consumers: ${c} is not one of ${Object.keys(CONSUMERS).join(", ")}`);
  const linger = whole(o.linger, "--linger", 0, 1000);
  /** @type {Array<{ kind: string, rate: number, params: string }>} */
  const traffic = [
    ...list(o.single, "--single", 1, 5000).map((rate) => ({ kind: "single send()", rate, params: "" })),
    ...list(o.producer, "--producer", 1, 5000).map((rate) => ({
      kind: `shardq/producer (linger ${linger} ms)`,
      rate,
      params: `&producer=batching&linger=${linger}`,
    })),
    ...list(o.keyed, "--keyed", 1, 5000).map((rate) => ({
      kind: `keyed send() (${KEYS.toLocaleString("en-US")} keys)`,
      rate,
      params: `&keys=${KEYS}&ordered=1`,
    })),
  ];
  const seconds = whole(o.seconds, "--seconds", 1, 3600);
  const warm = whole(o.warm, "--warm", 0, 600);
  /** @type {PerMessage[]} */
  const rows = [];
  for (const shards of shardCounts) {
    await withStack(shards, async (stack) => {
      for (const c of consumers) {
        const consumer = CONSUMERS[/** @type {keyof typeof CONSUMERS} */ (c)];
        await setConsumer(stack.base, consumer);
        for (const t of traffic) {
          const w = await rateWindow(stack, t.rate, warm, seconds, t.params);
          const r = perMessage(w.delta, w.perHour.delivered * (w.seconds / 3600), {
            shards,
            consumer: c,
            kind: t.kind,
            rate: t.rate,
            failed: w.failed,
            restarted: w.restarted,
          });
          rows.push(r);
          console.log(tableRow(r));
        }
      }
    });
  }
  const stamp = new Date().toISOString().replace(/[:T]/g, "-").slice(0, 19);
  const out = resolve(String(o.out));
  mkdirSync(out, { recursive: true });
  const md = ratesMarkdown(rows, { seconds, warm });
  const files = { json: join(out, `${stamp}-rates.json`), md: join(out, `${stamp}-rates.md`) };
  writeFileSync(files.json, JSON.stringify({ seconds, warm, linger, rows }, null, 2) + "\n");
  writeFileSync(files.md, md + "\n");
  console.log(`\n${md}\n\nwritten: ${files.md}, ${files.json}`);
  return { rows, files };
}

/**
 * @typedef {{ shards: number, consumer: string, kind: string, rate: number, failed: number, restarted: number }} Labels
 * @typedef {{ requests: number, rowsWritten: number, rowsRead: number }} Counts
 * @typedef {Labels & { messages: number, total: Counts, byClass: Record<string, Counts>, usdPerMillion: number, cqUsdPerMillion: number, ratio: number }} PerMessage
 */

/**
 * A window's counts per delivered message, in total and by class (the idempotency tables and the
 * account catalog together as "other"), priced per million messages.
 * @param {ReturnType<typeof import("./cost.mjs").costDelta>} delta @param {number} messages @param {Labels} labels @returns {PerMessage}
 */
export function perMessage(delta, messages, labels) {
  const per = (/** @type {number} */ x) => (messages > 0 ? x / messages : 0);
  /** @type {Record<string, Counts>} */
  const byClass = { storage: zero(), coordinator: zero(), consumer: zero(), other: zero() };
  for (const c of CLASSES) {
    const into = /** @type {Counts} */ (byClass[c in byClass ? c : "other"]);
    into.requests += per(delta[c].rpcs + delta[c].alarms);
    into.rowsWritten += per(delta[c].rowsWritten);
    into.rowsRead += per(delta[c].rowsRead);
  }
  const total = Object.values(byClass).reduce(
    (t, c) => ({
      requests: t.requests + c.requests,
      rowsWritten: t.rowsWritten + c.rowsWritten,
      rowsRead: t.rowsRead + c.rowsRead,
    }),
    zero(),
  );
  const usdPerMillion =
    usd(PRICES.doRequests, total.requests * 1e6) +
    usd(PRICES.rowsWritten, total.rowsWritten * 1e6) +
    usd(PRICES.rowsRead, total.rowsRead * 1e6);
  const cqUsdPerMillion = queuesUsd({ delivered: 1e6, bytesPerMessage: BODY_BYTES });
  return {
    ...labels,
    messages: Math.round(messages),
    total,
    byClass,
    usdPerMillion,
    cqUsdPerMillion,
    ratio: usdPerMillion / cqUsdPerMillion,
  };
}

const zero = () => ({ requests: 0, rowsWritten: 0, rowsRead: 0 });

const HEAD = [
  "| traffic | msg/s | messages | requests / msg (storage, Coordinator, consumer shard, other) | rows written / msg (storage, Coordinator, consumer shard, other) | $ per million messages | vs Cloudflare Queues |",
  "| --- | --- | --- | --- | --- | --- | --- |",
];

/** @param {PerMessage} r */
function tableRow(r) {
  const f = (/** @type {number} */ x) => (x >= 10 ? x.toFixed(1) : x.toFixed(3));
  const split = (/** @type {"requests" | "rowsWritten"} */ k) =>
    `**${f(r.total[k])}** (${["storage", "coordinator", "consumer", "other"].map((c) => f(/** @type {Counts} */ (r.byClass[c])[k])).join(", ")})`;
  const notes = [
    r.failed ? `${r.failed} not sent` : "",
    r.restarted ? `${r.restarted} object(s) restarted: a lower bound` : "",
  ]
    .filter(Boolean)
    .join("; ");
  return `| ${r.kind}${notes ? ` (${notes})` : ""} | ${r.rate} | ${r.messages.toLocaleString("en-US")} | ${split("requests")} | ${split("rowsWritten")} | $${r.usdPerMillion.toFixed(2)} | **${r.ratio.toFixed(2)}x** |`;
}

/**
 * One table per shard count and consumer setting.
 * @param {PerMessage[]} rows @param {{ seconds: number, warm: number }} o
 */
export function ratesMarkdown(rows, o) {
  const lines = [
    "## Cost by rate",
    "",
    `Each line: ${o.warm} s of warming up at the rate, then ${o.seconds} s measured; every object's own counters (GET /cost), per message delivered in the window. ` +
      `Priced at list prices (bench/prices.mjs): $${PRICES.doRequests.usd} per million Durable Object requests (alarms included), $${PRICES.rowsWritten.usd} per million rows written, $${PRICES.rowsRead.usd} per million rows read; ` +
      "duration and Workers CPU left out. Cloudflare Queues: 3 operations per message, $1.20 per million messages.",
  ];
  const groups = new Map();
  for (const r of rows) {
    const key = `${r.shards}|${r.consumer}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  for (const [key, group] of groups) {
    const [shards, consumer] = key.split("|");
    lines.push(
      "",
      `### ${shards} storage shard(s), ${CONSUMERS[/** @type {keyof typeof CONSUMERS} */ (consumer)].label}`,
      "",
      ...HEAD,
      ...group.map(tableRow),
    );
  }
  return lines.join("\n");
}

/** Sets the queue's consumer to `settings` (PATCH, as `wrangler queues consumer` would). @param {string} base @param {{ batch_size: number, max_wait_time_ms: number }} settings */
async function setConsumer(base, settings) {
  const api = `${base}/shardq/accounts/local/queues/bench/consumers`;
  const list = /** @type {any} */ (await (await fetch(api, { headers: HEADERS })).json());
  const id = list.result?.[0]?.consumer_id;
  if (!id) throw new Error(`the bench queue has no consumer: ${JSON.stringify(list)}`);
  const res = await fetch(`${api}/${id}`, {
    method: "PATCH",
    headers: HEADERS,
    body: JSON.stringify({
      settings: { batch_size: settings.batch_size, max_wait_time_ms: settings.max_wait_time_ms },
    }),
  });
  if (!res.ok) throw new Error(`PATCH consumer: ${res.status} ${await res.text()}`);
}

/** @param {string | undefined} v @param {string} flag @param {number} min @param {number} max */
function list(v, flag, min, max) {
  return String(v ?? "")
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean)
    .map((x) => whole(x, flag, min, max));
}

/** @param {string | undefined} v @param {string} flag @param {number} min @param {number} max */
function whole(v, flag, min, max) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag} must be an integer from ${min} to ${max}`);
  return n;
}
