// `npm run bench -- heap`: the JavaScript heap a storage shard takes with a large backlog.
// An isolate on Cloudflare has 128 MB, shared by the objects it hosts, so a shard must not keep
// its messages in memory: they live in SQLite. This fills a queue pinned at one storage shard
// and reads the heap of the isolate that runs it, through the V8 inspector wrangler dev serves
// (HeapProfiler.collectGarbage, then Runtime.getHeapUsage). Locally every object of the
// service shares that one isolate (the broker, the Coordinator, the shard), so each figure
// bounds the shard's own heap from above; the figure once the shard has been evicted shows
// what of it was the shard's.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { writeDevConfig } from "../cli/wrangler/dev-config.mjs";
import { freePort, ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";
import { Inspector } from "../scripts/v8-inspector.mjs";
import { stackVars } from "./traffic.mjs";

const HEADERS = { authorization: "Bearer shardq-local-dev-token", "content-type": "application/json" };
/** Sends of 100 in flight while filling. */
const FILL_CONCURRENCY = 8;
/** Idle time after which workerd has evicted the shard (it evicts an object idle for about 10 s). */
const EVICTED_AFTER_MS = 30_000;

export const HEAP_HELP = `npm run bench -- heap [--messages N] [--bytes B] [--leased L] [--out DIR]
  The JS heap of the isolate that runs a storage shard holding N messages (default 1,000,000) of
  B bytes each (default 100): after garbage collection, empty, at each quarter of the fill, with L
  messages leased (default 1,000), once the idle shard was evicted, and once it loaded its backlog
  again. A table and JSON in DIR (default bench/results). About a minute per million messages.`;

/** @param {string[]} argv */
export async function heapCommand(argv) {
  const { values: o } = parseArgs({
    args: argv,
    options: {
      messages: { type: "string", default: "1000000" },
      bytes: { type: "string", default: "100" },
      leased: { type: "string", default: "1000" },
      out: { type: "string", default: join(ROOT, "bench", "results") },
    },
  });
  const messages = whole(o.messages, "--messages", 100, 10_000_000);
  const bytes = whole(o.bytes, "--bytes", 20, 128_000);
  const leased = whole(o.leased, "--leased", 0, 100_000);
  const work = mkdtempSync(join(tmpdir(), "shardq-heap-"));
  const { vars, label } = stackVars(
    readFileSync(join(ROOT, "wrangler.toml"), "utf8"),
    readFileSync(join(ROOT, ".dev.vars"), "utf8"),
    1,
  );
  const config = writeDevConfig({ file: join(work, "wrangler.service.toml"), consumers: [], vars, outsideRoot: true });
  const [port, inspectorPort] = [await freePort(), await freePort()];
  const base = `http://127.0.0.1:${port}`;
  const service = await startWrangler({
    args: [
      "-c",
      config,
      "--port",
      String(port),
      "--ip",
      "127.0.0.1",
      "--persist-to",
      join(work, "state"),
      "--inspector-port",
      String(inspectorPort),
    ],
    readyUrl: `${base}/ready`,
    env: { WRANGLER_REGISTRY_PATH: join(work, "registry") },
  });
  /** @type {Array<{ step: string, backlog: number, heap_used_mb: number, heap_total_mb: number, seconds: number }>} */
  const rows = [];
  const t0 = performance.now();
  const inspector = await Inspector.connect(inspectorPort, () => fetch(`${base}/healthz`).then((r) => r.arrayBuffer()));
  try {
    const api = apiOf(base);
    await api("POST", "/queues", { queue_name: "heap" });
    await api("POST", "/queues/heap/consumers", { type: "http_pull", settings: { visibility_timeout_ms: 3_600_000 } });
    const reading = async (/** @type {string} */ step) => {
      const h = await inspector.heap();
      const backlog = (await api("GET", "/queues/heap/metrics")).backlog_count;
      const row = {
        step,
        backlog,
        heap_used_mb: mb(h.usedSize),
        heap_total_mb: mb(h.totalSize),
        seconds: Math.round((performance.now() - t0) / 1000),
      };
      rows.push(row);
      console.log(JSON.stringify(row));
    };
    await reading("queue created, empty");
    let sent = 0;
    const pad = "x".repeat(Math.max(0, bytes - 20));
    for (const quarter of [1, 2, 3, 4]) {
      const upto = Math.round((messages * quarter) / 4);
      await Promise.all(
        Array.from({ length: FILL_CONCURRENCY }, async () => {
          while (sent < upto) {
            const from = sent;
            const n = Math.min(100, upto - from);
            sent += n;
            await api("POST", "/queues/heap/messages/batch", {
              messages: Array.from({ length: n }, (_, k) => ({ body: { i: from + k, pad } })),
            });
          }
        }),
      );
      await reading(`filled: ${upto.toLocaleString("en-US")} messages`);
    }
    for (let got = 0; got < leased;) {
      const r = await api("POST", "/queues/heap/messages/pull", {
        batch_size: Math.min(100, leased - got),
        visibility_timeout_ms: 3_600_000,
      });
      if (r.messages.length === 0) throw new Error(`pull: nothing to lease after ${got}`);
      got += r.messages.length;
    }
    if (leased > 0) await reading(`${leased.toLocaleString("en-US")} of them leased`);
    // Only the inspector's pokes (GET /healthz, which no object serves) while the shard sits idle.
    await new Promise((r) => setTimeout(r, EVICTED_AFTER_MS));
    await reading(`the shard idle ${EVICTED_AFTER_MS / 1000} s (evicted)`);
    await api("POST", "/queues/heap/messages/pull", { batch_size: 1, visibility_timeout_ms: 3_600_000 });
    await reading("the shard loaded again (a pull)");
  } finally {
    inspector.close();
    await service.stop();
    rmSync(work, { recursive: true, force: true });
  }
  const stamp = new Date().toISOString().replace(/[:T]/g, "-").slice(0, 19);
  const out = String(o.out);
  mkdirSync(out, { recursive: true });
  const md = [
    "## The heap of a storage shard with a large backlog",
    "",
    `\`npm run bench -- heap --messages ${messages} --bytes ${bytes} --leased ${leased}\`: one queue ${label}, filled over HTTP in batches of 100 (${bytes}-byte bodies), an http_pull consumer. Each line: the JS heap of the service's isolate after garbage collection (the V8 inspector's Runtime.getHeapUsage), which also holds the broker and the Coordinator, and the queue's backlog then.`,
    "",
    "| step | backlog | heap used (MB) | heap reserved (MB) | s since start |",
    "| --- | --- | --- | --- | --- |",
    ...rows.map(
      (r) =>
        `| ${r.step} | ${r.backlog.toLocaleString("en-US")} | ${r.heap_used_mb} | ${r.heap_total_mb} | ${r.seconds} |`,
    ),
    "",
  ].join("\n");
  writeFileSync(join(out, `${stamp}-heap.md`), md);
  writeFileSync(join(out, `${stamp}-heap.json`), JSON.stringify({ messages, bytes, leased, label, rows }, null, 1));
  console.log(`\n${md}\nwritten: ${join(out, `${stamp}-heap.md`)}`);
}

/** @param {string} base */
function apiOf(base) {
  return async (/** @type {string} */ method, /** @type {string} */ path, /** @type {unknown} */ body = undefined) => {
    const res = await fetch(`${base}/accounts/local${path}`, {
      method,
      headers: HEADERS,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    if (!res.ok && !(res.status === 409 && method === "POST"))
      throw new Error(`${method} ${path}: ${res.status} ${text.slice(0, 300)}`);
    return /** @type {any} */ (JSON.parse(text)).result;
  };
}

const mb = (/** @type {number} */ b) => Math.round((b / 1024 / 1024) * 10) / 10;

/** @param {unknown} v @param {string} name @param {number} min @param {number} max */
function whole(v, name, min, max) {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${name}: a whole number from ${min} to ${max}`);
  return n;
}
