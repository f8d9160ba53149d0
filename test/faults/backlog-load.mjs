// The large-backlog run's clients and gauges (backlog.mjs): producers that fill a
// queue with seeded bodies of mixed large sizes, the sampler of workerd's resident
// memory, and the probes of every read answer (size and latency) against the backlog.
import { readdirSync, readFileSync } from "node:fs";
import { prng } from "./prng.mjs";

/** Cloudflare's limits as shardq enforces them (src/kernel/limits.ts): bytes of a body, of a batch's bodies, messages in a batch. */
export const LIMITS = { messageBytes: 128_000, batchBytes: 256_000, batchMessages: 100 };

/**
 * The bodies' sizes (bytes of the JSON body, which is what the limits count), drawn per
 * message: most a few KB, some tens of KB, and a share up to the 128 KB limit itself,
 * so that batches run into the 256 KB limit as often as into the 100 messages one.
 * Mean about 8.8 KB: 300,000 messages store about 2.6 GB.
 * @type {ReadonlyArray<{ share: number, min: number, max: number }>}
 */
export const SIZE_CLASSES = [
  { share: 0.85, min: 1_000, max: 6_000 },
  { share: 0.12, min: 8_000, max: 32_000 },
  { share: 0.03, min: 100_000, max: LIMITS.messageBytes },
];

/**
 * @typedef {import("./history.mjs").History} History
 * @typedef {ReturnType<typeof import("./client.mjs").apiClient>} Api
 * @typedef {{ okMessages: number, okBytes: number, unknownMessages: number, failedMessages: number, firstId: string | null, lastId: string | null, sampledIds?: string[] }} FillTally
 */

/**
 * One producer of the fill. Each step sends one batch (POST .../messages/batch) of 1 to
 * 100 messages, cut short where the next body would take the batch past 256 KB (that
 * body opens the next batch). Logged exactly as runProducer (workload.mjs) logs a batch,
 * so checker.mjs reads it: every body is {h, x?, pad} with the harness id h, x: 1 for a
 * poison message, and a padding of "x" that brings it to its drawn size. A batch
 * certainly refused gives its messages back to the budget, to be sent as new ones. Its
 * seeded stream and its count go on from one fill level to the next.
 */
export class FillProducer {
  /** @param {{ index: number, seed: number, history: History, api: Api, queue: string, poisonRate: number, tally: FillTally }} o */
  constructor(o) {
    this.o = o;
    this.name = `producer-${o.index}`;
    this.rng = prng(o.seed, "backlog-producer", o.index);
    this.k = 0;
    /** @type {ReturnType<FillProducer["message"]> | null} a message drawn that did not fit the last batch */
    this.carry = null;
  }

  message() {
    const h = `${this.o.seed}.${this.o.index}.${this.k++}`;
    const x = this.rng.chance(this.o.poisonRate);
    let roll = this.rng.next();
    const c =
      SIZE_CLASSES.find((s) => (roll -= s.share) < 0) ?? /** @type {(typeof SIZE_CLASSES)[number]} */ (SIZE_CLASSES[0]);
    const size = this.rng.int(c.min, c.max);
    // JSON.stringify({ h, x?, pad: "" }) is this long; the padding makes up the rest (ASCII: bytes = characters).
    const pad = size - JSON.stringify({ h, ...(x ? { x: 1 } : {}), pad: "" }).length;
    const body = { h, ...(x ? { x: 1 } : {}), pad: "x".repeat(pad) };
    return { h, x, size, wire: { body, content_type: "json" } };
  }

  /**
   * Sends until the budget is spent (or `control.stop`).
   * @param {import("./workload.mjs").Budget} budget @param {{ stop: boolean }} control
   */
  async run(budget, control) {
    const { history, api, queue, tally } = this.o;
    while (!control.stop) {
      const want = this.rng.int(1, LIMITS.batchMessages);
      /** @type {Array<ReturnType<FillProducer["message"]>>} */
      const batch = [];
      let bytes = 0;
      while (batch.length < want) {
        const m = this.carry ?? (budget.take(1) ? this.message() : null);
        if (!m) break;
        if (bytes + m.size > LIMITS.batchBytes) {
          this.carry = m;
          break;
        }
        this.carry = null;
        batch.push(m);
        bytes += m.size;
      }
      if (batch.length === 0) return;
      const poison = batch.filter((m) => m.x).map((m) => m.h);
      const op = history.invoke(this.name, "send", {
        q: queue,
        hs: batch.map((m) => m.h),
        ...(poison.length ? { x: poison } : {}),
      });
      const r = await api.call("POST", `/${queue}/messages/batch`, { messages: batch.map((m) => m.wire) });
      const ids = r.outcome === "ok" ? r.result?.message_ids : undefined;
      if (
        r.outcome === "ok" &&
        Array.isArray(ids) &&
        ids.length === batch.length &&
        ids.every((id) => typeof id === "string")
      ) {
        history.complete(op, "ok", { ids });
        tally.okMessages += batch.length;
        tally.okBytes += bytes;
        tally.firstId ??= String(ids[0]);
        tally.lastId = String(ids[ids.length - 1]);
        // One id in every 64 batches: the probes look up the one in the middle of the backlog.
        if (Math.random() < 1 / 64) (tally.sampledIds ??= []).push(String(ids[Math.floor(ids.length / 2)]));
      } else if (r.outcome === "ok") {
        // A yes without the ids is not a yes the checker can use (as workload.mjs logs it).
        history.complete(op, "unknown", {
          status: r.status,
          error: `ok without ${batch.length} message ids: ${JSON.stringify(r.result).slice(0, 200)}`,
        });
        tally.unknownMessages += batch.length;
      } else {
        history.complete(op, r.outcome, { status: r.status, error: r.error });
        if (r.outcome === "fail") {
          tally.failedMessages += batch.length;
          budget.refund(batch.length);
        } else tally.unknownMessages += batch.length;
        await new Promise((res) => setTimeout(res, 100 + this.rng.int(0, 200)));
      }
    }
  }
}

/** @typedef {{ rss: number, anon: number, file: number, hwm: number }} Mem  bytes, from /proc/<pid>/status */
/**
 * @typedef {{ t: number, phase: string, backlog: number, bytes: number, workerd: Mem, wrangler: number, workerds: number }} RssSample
 *   t: ms since the run began; backlog and bytes: messages and body bytes stored then
 *   (acknowledged sends while filling, the queue's metrics while draining)
 */

/**
 * Samples, every `periodMs`, the resident memory of the workerd processes under
 * wrangler's pid (wrangler runs workerd as its child; cli/wrangler/dev-server.mjs starts
 * wrangler in its own process group), summed, and wrangler's own apart: workerd holds
 * the Durable Objects, their SQLite and every isolate, so it is where a backlog held in
 * memory would show. RssAnon (heap) and RssFile (mapped files) are kept apart too.
 */
export class RssSampler {
  /**
   * @param {() => number | undefined} rootPid wrangler's pid (Service.server.pid)
   * @param {() => { phase: string, backlog: number, bytes: number }} state
   * @param {() => number} now
   */
  constructor(rootPid, state, now, periodMs = 1000) {
    this.rootPid = rootPid;
    this.state = state;
    this.now = now;
    this.periodMs = periodMs;
    /** @type {RssSample[]} */
    this.samples = [];
    /** @type {ReturnType<typeof setInterval> | undefined} */
    this.timer = undefined;
  }

  start() {
    this.sample();
    this.timer = setInterval(() => this.sample(), this.periodMs);
  }

  stop() {
    clearInterval(this.timer);
  }

  /** One sample now (also kept); null when wrangler is not running. */
  sample() {
    const root = this.rootPid();
    if (root === undefined) return null;
    const procs = descendants(root);
    const workerd = procs.filter((p) => p.comm === "workerd").map((p) => memOf(p.pid));
    const sum = (/** @type {keyof Mem} */ k) => workerd.reduce((n, m) => n + (m?.[k] ?? 0), 0);
    const s = {
      t: this.now(),
      ...this.state(),
      workerd: { rss: sum("rss"), anon: sum("anon"), file: sum("file"), hwm: sum("hwm") },
      wrangler: memOf(root)?.rss ?? 0,
      workerds: workerd.length,
    };
    this.samples.push(s);
    return s;
  }
}

/** The processes below `root` (itself excluded), from /proc/<pid>/stat: pid, comm, ppid. @param {number} root */
export function descendants(root) {
  /** @type {Map<number, Array<{ pid: number, comm: string }>>} */
  const children = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue; // gone since the listing
    }
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ")".
    const close = stat.lastIndexOf(")");
    const comm = stat.slice(stat.indexOf("(") + 1, close);
    const ppid = Number(stat.slice(close + 2).split(" ")[1]);
    const list = children.get(ppid) ?? [];
    list.push({ pid: Number(name), comm });
    children.set(ppid, list);
  }
  const out = [];
  const todo = [root];
  while (todo.length) {
    for (const c of children.get(/** @type {number} */ (todo.pop())) ?? []) {
      out.push(c);
      todo.push(c.pid);
    }
  }
  return out;
}

/** @param {number} pid @returns {Mem | null} */
function memOf(pid) {
  let status;
  try {
    status = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return null;
  }
  const kb = (/** @type {string} */ key) =>
    Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), anon: kb("RssAnon"), file: kb("RssFile"), hwm: kb("VmHWM") };
}

/**
 * @typedef {{ name: string, method: string, path: string, body?: unknown, status: number, expected: number, bytes: number, ms: number[], count: number | null }} Probe
 *   bytes: the answer's body; ms: each try's latency; count: messages in the answer, for those that hold messages
 */

/**
 * Every read answer of the API, asked `tries` times each with the backlog as it is:
 * the queue list, the queue, its metrics, shards, series and consumers, Prometheus'
 * /metrics, a peek of 10 and of the most (100), lookups by id (the oldest message, one in
 * the middle, the newest, and one that does not exist, which every shard must rule out), and the limits
 * past their maximum (a peek of 101, a list page of 101, a pull of 101: refused, 400),
 * and a pull while delivery is paused (refused, 409: nothing leased).
 * @param {{ base: string, token: string, queue: string, ids: { first: string | null, last: string | null, middle?: string | null }, tries?: number }} o
 * @returns {Promise<Probe[]>}
 */
export async function probeReads(o) {
  const q = `/accounts/local/queues/${o.queue}`;
  // Time-ordered like shardq's ids (src/kernel/ids.ts) yet never made: far in the future.
  const missing = `ffffffffffff${"0".repeat(20)}`;
  /** @type {Array<{ name: string, method?: string, path: string, body?: unknown, expected?: number, messages?: (r: any) => unknown[] }>} */
  const asks = [
    { name: "queue list", path: "/accounts/local/queues" },
    { name: "queue list, per_page 101", path: "/accounts/local/queues?per_page=101", expected: 400 },
    { name: "queue", path: q },
    { name: "metrics", path: `${q}/metrics` },
    { name: "shards", path: `${q}/shards` },
    { name: "series", path: `${q}/series` },
    { name: "consumers", path: `${q}/consumers` },
    { name: "GET /metrics (Prometheus)", path: "/metrics" },
    { name: "peek 10", path: `${q}/messages?limit=10`, messages: (r) => r.result.messages },
    { name: "peek 100", path: `${q}/messages?limit=100`, messages: (r) => r.result.messages },
    { name: "peek 101", path: `${q}/messages?limit=101`, expected: 400 },
    ...(o.ids.first ? [{ name: "lookup, oldest message", path: `${q}/messages/${o.ids.first}` }] : []),
    ...(o.ids.middle ? [{ name: "lookup, a message in the middle", path: `${q}/messages/${o.ids.middle}` }] : []),
    ...(o.ids.last ? [{ name: "lookup, newest message", path: `${q}/messages/${o.ids.last}` }] : []),
    { name: "lookup, no such message", path: `${q}/messages/${missing}`, expected: 404 },
    { name: "pull 101", method: "POST", path: `${q}/messages/pull`, body: { batch_size: 101 }, expected: 400 },
    {
      name: "pull 100, delivery paused",
      method: "POST",
      path: `${q}/messages/pull`,
      body: { batch_size: 100 },
      expected: 409,
    },
  ];
  /** @type {Probe[]} */
  const out = [];
  for (const a of asks) {
    const method = a.method ?? "GET";
    const p = {
      name: a.name,
      method,
      path: a.path,
      ...(a.body ? { body: a.body } : {}),
      status: 0,
      expected: a.expected ?? 200,
      bytes: 0,
      ms: /** @type {number[]} */ ([]),
      count: /** @type {number | null} */ (null),
    };
    for (let i = 0; i < (o.tries ?? 3); i++) {
      const t0 = performance.now();
      const res = await fetch(`${o.base}${a.path}`, {
        method,
        headers: { authorization: `Bearer ${o.token}`, "content-type": "application/json" },
        body: a.body === undefined ? undefined : JSON.stringify(a.body),
        signal: AbortSignal.timeout(60_000),
      });
      const text = await res.text();
      p.ms.push(Math.round((performance.now() - t0) * 10) / 10);
      p.status = res.status;
      p.bytes = Buffer.byteLength(text);
      if (a.messages && res.ok) p.count = a.messages(JSON.parse(text)).length;
    }
    out.push(p);
  }
  return out;
}

/**
 * Wraps the consumers' client to time every pull and weigh its answer (the result as
 * JSON, which is the answer less its envelope), with the backlog it reported, the one
 * the run last read from GET .../metrics (`stored`: a pull's own count takes the other
 * shards' from their last heartbeat, which is 0 for a while after a restart), and how
 * many of its messages came for the first time.
 * @param {Api} api @param {() => number} now @param {() => number} stored
 */
export function measuredPulls(api, now, stored) {
  /** @type {Array<{ t: number, ms: number, asked: number, count: number, fresh: number, bytes: number, backlog: number | null, stored: number, q: string }>} */
  const pulls = [];
  /** Message ids delivered so far (per queue): `fresh` counts a pull's first deliveries. */
  const seen = new Set();
  /** @type {Api} */
  const wrapped = {
    ...api,
    call: async (method, path, body, extra) => {
      if (!path.endsWith("/messages/pull")) return api.call(method, path, body, extra);
      const t0 = performance.now();
      const r = await api.call(method, path, body, extra);
      if (r.outcome === "ok") {
        const messages = /** @type {Array<{ id: string }>} */ (
          Array.isArray(r.result?.messages) ? r.result.messages : []
        );
        let fresh = 0;
        for (const m of messages) {
          const key = `${path}\u0000${m.id}`;
          if (!seen.has(key)) fresh++;
          seen.add(key);
        }
        pulls.push({
          t: now(),
          ms: Math.round(performance.now() - t0),
          asked: /** @type {{ batch_size: number }} */ (body).batch_size,
          count: messages.length,
          fresh,
          bytes: Buffer.byteLength(JSON.stringify(r.result)),
          backlog: r.result?.message_backlog_count ?? null,
          stored: stored(),
          q: path.split("/")[1] ?? "",
        });
      }
      return r;
    },
  };
  return { api: wrapped, pulls };
}
