// The large-backlog run's figures and verdict (backlog.mjs), and what it prints and
// writes: a table on the console, report.json and report.md next to the history.
//
// Memory stays bounded: workerd's resident memory (summed over its processes) never
// passes RSS_CAP, and grows from each fill level (10 %, 50 %) to 100 % by at most
// GROWTH_SHARE of the bytes stored in between, or GROWTH_FLOOR, whichever is more. A
// service that kept the backlog, or anything proportional to it, in memory would grow by
// at least the bytes added; SQLite's page cache and the JS heaps level off. The floor is
// what workerd's heaps take on under this load whatever the backlog: in the first full
// run they grew 370 MB from 10 % to 50 % and then nothing to 100 %, and stayed there as
// the backlog drained to 0; it is all the short run's 90 MB can show. The cap is about
// half the bytes the full run stores and six times workerd's idle size (about 260 MB).
//
// Responses stay paged: every read answer has the status expected at every level (the
// limits past their maximum refused), holds at most the messages asked for, weighs at
// most what its page allows (MESSAGE_ANSWER_BYTES a message, SMALL_ANSWER_BYTES for the
// others), does not grow from 10 % to 100 % (series excepted: it grows with the hour it
// covers, not the backlog; the shards answer is held to its size per storage shard), and answers within LATENCY_CAP_MS at every level. An
// answer whose latency grows with the backlog (SLOWER_BY times the 10 % level's median,
// and at least SLOW_MS) is reported as a finding, not a failure: it reads every row.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { SIZE_CLASSES } from "./backlog-load.mjs";
import { summaryRows } from "./report.mjs";

export const RSS_CAP = 1.5e9;
/**
 * The JS heap a storage shard may take, of the 128 MB an isolate has on Cloudflare: a shard
 * keeps its messages in SQLite, not in memory. Locally every shard runs in one isolate, so
 * the isolate's heap, which must stay under it, bounds each shard's.
 */
export const HEAP_CAP = 32e6;
export const GROWTH_SHARE = 0.25;
export const GROWTH_FLOOR = 384e6;
/** A message in an answer: its body base64 (128,000 bytes at most: 170,668) and its fields (id, lease id, metadata). */
export const MESSAGE_ANSWER_BYTES = 170_668 + 1_000;
export const SMALL_ANSWER_BYTES = 64_000;
export const LATENCY_CAP_MS = 2_000;
const SLOWER_BY = 3;
const SLOW_MS = 100;
/** Answers that grow with time rather than the backlog: the last hour, a point every 10 s. */
const TIME_WINDOWED = new Set(["series"]);
/**
 * Answers with an entry for every storage shard (its state and latest report): they grow with
 * the shards the autoscaler adds as the backlog fills, which its maximum bounds, so each is
 * held to its size per shard.
 */
const PER_SHARD = new Set(["shards"]);

/**
 * @typedef {import("./backlog-load.mjs").Probe} Probe
 * @typedef {import("./backlog-load.mjs").RssSample} RssSample
 * @typedef {{ level: number, sentOk: number, sentBytes: number, stored: { count: number, bytes: number, shards: number } | null, rss: RssSample, heap: number, fillMs: number, probes: Probe[] }} Level
 * @typedef {Awaited<ReturnType<typeof import("./backlog-phases.mjs").restartOverBacklog>>} Restart
 * @typedef {ReturnType<typeof backlogFigures>} BacklogFigures
 */

/**
 * @param {{ levels: Level[], restart: Restart | null, samples: RssSample[], pulls: ReturnType<typeof import("./backlog-load.mjs").measuredPulls>["pulls"],
 *   resumedAt: number | null, emptyAt: number | null, tally: import("./backlog-load.mjs").FillTally }} o
 */
export function backlogFigures(o) {
  const full = o.levels[o.levels.length - 1];
  const first = o.levels[0];
  const count = full?.stored?.count ?? full?.sentOk ?? 0;
  const bytes = full?.stored?.bytes ?? full?.sentBytes ?? 0;
  return {
    backlog: {
      messages: count,
      bytes,
      shards: full?.stored?.shards ?? null,
      sends: { ok: o.tally.okMessages, unknown: o.tally.unknownMessages, failed: o.tally.failedMessages },
      fill_ms: full?.fillMs ?? 0,
      size_classes: SIZE_CLASSES,
    },
    memory: memory(o.levels, o.samples, first, full),
    restart: o.restart && {
      ready_ms: o.restart.ready_ms,
      first_metrics_ms: o.restart.first_metrics_ms,
      backlog: o.restart.backlog,
      bytes: o.restart.bytes,
      rss: o.restart.rss,
      heap: o.restart.heap,
    },
    paging: paging(o.levels, o.restart, o.pulls, count),
    drain: drain(o.pulls, o.resumedAt, o.emptyAt, count, bytes),
  };
}

/** @param {Level[]} levels @param {RssSample[]} samples @param {Level | undefined} first @param {Level | undefined} full */
function memory(levels, samples, first, full) {
  const max = (/** @type {RssSample[]} */ xs) => Math.max(0, ...xs.map((s) => s.workerd.rss));
  const fill = samples.filter((s) => s.phase === "fill");
  const peak = Math.max(max(samples), ...samples.map((s) => s.workerd.hwm));
  /** @type {string[]} */
  const failures = [];
  if (samples.length === 0) failures.push("no memory sample: workerd was not found under wrangler's pid");
  if (peak > RSS_CAP) failures.push(`workerd's RSS peaked at ${mb(peak)}, past the ${mb(RSS_CAP)} cap`);
  for (const l of levels)
    if (l.heap > HEAP_CAP)
      failures.push(
        `the service isolate's JS heap was ${mb(l.heap)} at the ${pct(l.level)} fill level, past the ${mb(HEAP_CAP)} a storage shard may take`,
      );
  const growths = levels.slice(0, -1).map((l) => {
    const added = (full?.rss.bytes ?? 0) - l.rss.bytes;
    const growth = (full?.rss.workerd.rss ?? 0) - l.rss.workerd.rss;
    const allowed = Math.max(GROWTH_FLOOR, GROWTH_SHARE * added);
    if (growth > allowed)
      failures.push(
        `workerd's RSS grew ${mb(growth)} from the ${pct(l.level)} to the ${pct(full?.level)} fill level, past the ${mb(allowed)} allowed (${mb(added)} stored in between)`,
      );
    return { from: l.level, growth, allowed, added };
  });
  return {
    at_levels: levels.map((l) => ({
      level: l.level,
      backlog: l.rss.backlog,
      bytes: l.rss.bytes,
      rss: l.rss.workerd.rss,
      anon: l.rss.workerd.anon,
      file: l.rss.workerd.file,
      heap: l.heap,
    })),
    max_filling: max(fill),
    max_draining: max(samples.filter((s) => s.phase === "drain")),
    peak_hwm: peak,
    wrangler_max: Math.max(0, ...samples.map((s) => s.wrangler)),
    // Least squares over the fill's samples: RSS bytes per byte stored (0 for memory that does not follow the backlog).
    slope_per_byte_stored: slope(fill.map((s) => [s.bytes, s.workerd.rss])),
    growths,
    samples: samples.length,
    // Every sample, compact: [ms since the run began, phase, backlog, bytes stored, workerd RSS, anon, file].
    series: samples.map((s) => [
      Math.round(s.t),
      s.phase,
      s.backlog,
      s.bytes,
      s.workerd.rss,
      s.workerd.anon,
      s.workerd.file,
    ]),
    ok: failures.length === 0,
    failures,
  };
}

/**
 * Each answer at each fill level and after the restart (growth: 10 % to 100 % only).
 * @param {Level[]} levels @param {Restart | null} restart
 * @param {ReturnType<typeof import("./backlog-load.mjs").measuredPulls>["pulls"]} pulls @param {number} full
 */
function paging(levels, restart, pulls, full) {
  const asked = [
    ...levels.map((l) => ({ label: pct(l.level), probes: l.probes })),
    ...(restart ? [{ label: "100 % after the restart", probes: restart.probes }] : []),
  ];
  /** @type {string[]} */
  const failures = [];
  /** @type {string[]} */
  const findings = [];
  const names = levels[0]?.probes.map((p) => p.name) ?? [];
  const probes = names.map((name) => {
    const at = asked.map((l) => /** @type {Probe} */ (l.probes.find((p) => p.name === name)));
    const limit = Number(/limit=(\d+)/.exec(at[0]?.path ?? "")?.[1] ?? 0);
    const cap = limit ? 1_000 + limit * MESSAGE_ANSWER_BYTES : SMALL_ANSWER_BYTES;
    const medians = at.map((p) => median(p.ms));
    for (const [i, p] of at.entries()) {
      const where = `${name} at ${asked[i]?.label}`;
      if (p.status !== p.expected) failures.push(`${where}: HTTP ${p.status}, not ${p.expected}`);
      if (limit && p.count !== null && p.count > limit)
        failures.push(`${where}: ${p.count} messages for a limit of ${limit}`);
      if (p.bytes > cap) failures.push(`${where}: ${p.bytes} bytes, past its page's ${cap}`);
      if (Math.max(...p.ms) > LATENCY_CAP_MS)
        failures.push(`${where}: ${Math.max(...p.ms)} ms, past ${LATENCY_CAP_MS} ms`);
    }
    const b0 = at[0]?.bytes ?? 0;
    const b1 = at[levels.length - 1]?.bytes ?? 0;
    const m0 = medians[0] ?? 0;
    const m1 = medians[levels.length - 1] ?? 0;
    if (m1 >= SLOW_MS && m1 > SLOWER_BY * m0)
      findings.push(
        `${name}: median ${medians.map((x) => Math.round(x)).join(" / ")} ms at ${asked.map((l) => l.label).join(" / ")}: its latency grows with the backlog`,
      );
    const perShard = PER_SHARD.has(name);
    const shards0 = perShard ? Math.max(1, levels[0]?.stored?.shards ?? 1) : 1;
    const shards1 = perShard ? Math.max(1, levels[levels.length - 1]?.stored?.shards ?? 1) : 1;
    if (!limit && !TIME_WINDOWED.has(name) && b1 / shards1 > 1.25 * (b0 / shards0) + 2_000) {
      const each = perShard
        ? ` (${Math.round(b0 / shards0)} and ${Math.round(b1 / shards1)} a shard, of ${shards0} and ${shards1})`
        : "";
      failures.push(
        `${name}: ${b0} bytes at ${pct(levels[0]?.level)} and ${b1} at ${pct(levels[levels.length - 1]?.level)}${each}: it grows with the backlog`,
      );
    }
    return {
      name,
      method: at[0]?.method,
      path: at[0]?.path,
      expected: at[0]?.expected,
      status: at.map((p) => p.status),
      bytes: at.map((p) => p.bytes),
      count: at.map((p) => p.count),
      median_ms: medians,
      max_ms: Math.max(...at.flatMap((p) => p.ms)),
      cap_bytes: cap,
    };
  });
  const main = pulls.filter((p) => !p.q.endsWith("-dlq"));
  const stat = (/** @type {typeof pulls} */ xs) => ({
    pulls: xs.length,
    max_messages: Math.max(0, ...xs.map((p) => p.count)),
    max_bytes: Math.max(0, ...xs.map((p) => p.bytes)),
    mean_bytes: xs.length ? Math.round(xs.reduce((n, p) => n + p.bytes, 0) / xs.length) : 0,
    ms: percentiles(xs.map((p) => p.ms)),
  });
  // With the backlog (90 % or more) in place: by the run's own count of first deliveries
  // before each answer, or by its last metrics read. The metrics gauge alone lags behind a
  // short run's drain and can read low right after the restart, which once left no pull counted.
  let firstDeliveries = 0;
  const atFull = main.filter((p) => {
    const before = firstDeliveries;
    firstDeliveries += p.fresh;
    return before + p.fresh <= 0.1 * full || p.stored >= 0.9 * full;
  });
  const pullFigures = { all: stat(main), at_full: stat(atFull), cap_bytes: 1_000 + 100 * MESSAGE_ANSWER_BYTES };
  for (const p of main) {
    if (p.count > p.asked) failures.push(`a pull of ${p.asked} answered ${p.count} messages`);
    if (p.bytes > pullFigures.cap_bytes)
      failures.push(`a pull answered ${p.bytes} bytes, past ${pullFigures.cap_bytes}`);
  }
  if (pullFigures.at_full.pulls === 0) failures.push("no pull answered with the backlog (90 % or more) in place");
  return { probes, pulls: pullFigures, ok: failures.length === 0, failures: [...new Set(failures)], findings };
}

/**
 * @param {ReturnType<typeof import("./backlog-load.mjs").measuredPulls>["pulls"]} pulls
 * @param {number | null} resumedAt @param {number | null} emptyAt @param {number} count @param {number} bytes
 */
function drain(pulls, resumedAt, emptyAt, count, bytes) {
  const ms = resumedAt !== null && emptyAt !== null ? Math.round(emptyAt - resumedAt) : null;
  // When the last message of the backlog was first delivered: the rest of resume to empty
  // is the tail the consumers make on purpose (drops and late acks wait out their lease).
  let fresh = 0;
  const once = pulls.find((p) => !p.q.endsWith("-dlq") && (fresh += p.fresh) >= count);
  const all = once && resumedAt !== null ? Math.round(once.t - resumedAt) : null;
  // The drain rate over the time every message took to be delivered once.
  return {
    resume_to_all_delivered_ms: all,
    resume_to_empty_ms: ms,
    messages_per_second: all ? Math.round((count * 1000) / all) : null,
    bytes_per_second: all ? Math.round((bytes * 1000) / all) : null,
    deliveries: pulls.reduce((n, p) => n + p.count, 0),
    delivered_bytes: pulls.reduce((n, p) => n + p.bytes, 0),
  };
}

/**
 * The summary rows: the backlog's figures, then the checker's that apply to a run without faults.
 * @param {import("./checker.mjs").CheckResult} r @param {BacklogFigures} b @param {import("./report.mjs").RunMeta} meta @param {boolean} ok
 * @returns {Array<[string, string]>}
 */
export function backlogRows(r, b, meta, ok) {
  const m = b.memory;
  const d = b.drain;
  const rs = b.restart;
  const p = b.paging.pulls;
  const failures = [...(r.valid ? [] : [`checker: ${r.failures.join("; ")}`]), ...m.failures, ...b.paging.failures];
  const checker = new Map(summaryRows(r, meta));
  const keep = [
    "messages sent",
    "delivered",
    "lost",
    "unexpected",
    "message ids stored twice",
    "garbled deliveries",
    "duplicated",
    "recovered",
    "lease overlaps",
    "delivered after ack",
    "poison messages",
    "acks",
  ];
  return [
    ["verdict", ok ? "PASS (history VALID, memory bounded, answers paged)" : `FAIL: ${failures.join("; ")}`],
    ["seed, replay", `${meta.seed}: ${meta.replay}`],
    [
      "backlog",
      `${n(b.backlog.messages)} messages, ${mb(b.backlog.bytes)} of bodies on ${b.backlog.shards ?? "?"} storage shards, filled in ${(b.backlog.fill_ms / 1000).toFixed(0)} s (${n(Math.round((b.backlog.messages * 1000) / Math.max(1, b.backlog.fill_ms)))} msg/s, ${mb((b.backlog.bytes * 1000) / Math.max(1, b.backlog.fill_ms))}/s) with delivery paused`,
    ],
    ["body sizes", SIZE_CLASSES.map((c) => `${Math.round(c.share * 100)} % ${kb(c.min)}-${kb(c.max)}`).join(", ")],
    [
      "workerd RSS at fill levels",
      m.at_levels.map((l) => `${mb(l.rss)} at ${pct(l.level)} (${n(l.backlog)} msgs, ${mb(l.bytes)})`).join("; "),
    ],
    [
      "workerd RSS max",
      `${mb(m.max_filling)} filling, ${mb(m.max_draining)} draining, peak (VmHWM) ${mb(m.peak_hwm)}; ${(m.slope_per_byte_stored * 1e3).toFixed(1)} MB per GB stored; wrangler (node) at most ${mb(m.wrangler_max)}`,
    ],
    [
      "JS heap at fill levels",
      `${m.at_levels.map((l) => `${mb(l.heap)} at ${pct(l.level)}`).join("; ")} (the isolate all storage shards run in, after garbage collection; ≤ ${mb(HEAP_CAP)})`,
    ],
    [
      "memory bound",
      `${m.ok ? "held" : "BROKEN"}: peak ≤ ${mb(RSS_CAP)}, JS heap ≤ ${mb(HEAP_CAP)}; growth to 100 % ${m.growths.map((g) => `from ${pct(g.from)} ${mb(g.growth)} (≤ ${mb(g.allowed)})`).join(", ")}`,
    ],
    [
      "SIGKILL and restart over it",
      rs
        ? `ready ${(rs.ready_ms / 1000).toFixed(1)} s after the restart; every storage shard answered ${(rs.first_metrics_ms / 1000).toFixed(1)} s later, ${n(rs.backlog)} messages (${mb(rs.bytes)}) stored; workerd RSS ${mb(rs.rss.before_kill ?? 0)} before the kill, ${mb(rs.rss.ready ?? 0)} ready, ${mb(rs.rss.shards_awake ?? 0)} with every shard awake, ${mb(rs.rss.after_probes ?? 0)} after the reads, JS heap ${mb(rs.heap)}`
        : "not reached",
    ],
    ...b.paging.probes.map(
      (x) =>
        /** @type {[string, string]} */ ([
          `${x.name}`,
          `HTTP ${[...new Set(x.status)].join("/")}, ${x.bytes.map((y) => bytesOf(y)).join(" / ")}${x.count.some((c) => c !== null) ? ` (${x.count.join(" / ")} msgs)` : ""}, median ${x.median_ms.map((y) => Math.round(y)).join(" / ")} ms`,
        ]),
    ),
    [
      "pull, batch_size 100",
      `${n(p.all.pulls)} pulls: at most ${p.all.max_messages} messages and ${mb(p.all.max_bytes)} (mean ${mb(p.all.mean_bytes)}); p50/p99/max ${p.all.ms.p50}/${p.all.ms.p99}/${p.all.ms.max} ms; with ≥ 90 % of the backlog in place (${p.at_full.pulls} pulls) ${p.at_full.ms.p50}/${p.at_full.ms.p99}/${p.at_full.ms.max} ms, at most ${mb(p.at_full.max_bytes)}`,
    ],
    [
      "paging bound",
      `${b.paging.ok ? "held" : "BROKEN"}${b.paging.findings.length ? `; findings: ${b.paging.findings.join("; ")}` : ""}`,
    ],
    [
      "recovery: resume to empty",
      d.resume_to_empty_ms === null
        ? "did not empty"
        : `${(d.resume_to_empty_ms / 1000).toFixed(1)} s (both queues' backlogs at 0, every message acked or dead-lettered; ${n(d.deliveries)} deliveries)`,
    ],
    [
      "drain rate",
      d.resume_to_all_delivered_ms === null
        ? "not every message was delivered"
        : `every message delivered once ${(d.resume_to_all_delivered_ms / 1000).toFixed(1)} s after the resume: ${n(d.messages_per_second ?? 0)} msg/s, ${mb(d.bytes_per_second ?? 0)}/s of bodies`,
    ],
    ...keep.flatMap((k) =>
      checker.has(k) ? [/** @type {[string, string]} */ ([k, /** @type {string} */ (checker.get(k))])] : [],
    ),
    ["time", `fill ${meta.load_s} s, drain ${meta.drain_s} s, total ${meta.total_s} s`],
  ];
}

/** @param {import("./checker.mjs").CheckResult} r @param {BacklogFigures} b @param {import("./report.mjs").RunMeta} meta @param {boolean} ok */
export function formatBacklogTable(r, b, meta, ok) {
  const rows = backlogRows(r, b, meta, ok);
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n");
}

/** Writes report.json and report.md into meta.out. @param {import("./checker.mjs").CheckResult} r @param {BacklogFigures} b @param {import("./report.mjs").RunMeta} meta @param {boolean} ok */
export function writeBacklogReport(r, b, meta, ok) {
  const json = join(meta.out, "report.json");
  const md = join(meta.out, "report.md");
  writeFileSync(json, `${JSON.stringify({ meta, ok, backlog: b, ...r }, null, 2)}\n`);
  const esc = (/** @type {string} */ s) => s.replaceAll("|", "\\|");
  const lines = [
    `# shardq large-backlog run: ${meta.mode}, seed ${meta.seed}`,
    "",
    `Started ${meta.started_at}. ${n(meta.messages)} messages from ${meta.producers} producers with delivery paused, then drained by ${meta.consumers} pull consumers.`,
    `Replay: \`${meta.replay}\`. History: \`${meta.history}\` (check it again with \`node test/faults/run.mjs --check ${meta.history}\`).`,
    "",
    "| | |",
    "| --- | --- |",
    ...backlogRows(r, b, meta, ok).map(([k, v]) => `| ${esc(k)} | ${esc(v)} |`),
    "",
    "## Read answers at each fill level",
    "",
    `Bytes of the answer's body and median latency of 3 tries, at ${b.memory.at_levels.map((l) => pct(l.level)).join(" / ")} of the backlog${b.restart ? " / with all of it, after the SIGKILL and restart" : ""}.`,
    "",
    "| answer | request | HTTP | bytes | messages | median ms | max ms | page cap (bytes) |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ...b.paging.probes.map(
      (x) =>
        `| ${esc(x.name)} | \`${x.method} ${esc(x.path ?? "")}\` | ${x.status.join(" / ")} | ${x.bytes.map(n).join(" / ")} | ${x.count.map((c) => c ?? "–").join(" / ")} | ${x.median_ms.map((y) => y.toFixed(1)).join(" / ")} | ${x.max_ms} | ${n(x.cap_bytes)} |`,
    ),
    "",
    "## Memory",
    "",
    "| fill level | backlog (messages) | stored (MB) | workerd RSS (MB) | anon (MB) | file (MB) | JS heap (MB) |",
    "| --- | --- | --- | --- | --- | --- | --- |",
    ...b.memory.at_levels.map(
      (l) =>
        `| ${pct(l.level)} | ${n(l.backlog)} | ${(l.bytes / 1e6).toFixed(1)} | ${(l.rss / 1e6).toFixed(1)} | ${(l.anon / 1e6).toFixed(1)} | ${(l.file / 1e6).toFixed(1)} | ${(l.heap / 1e6).toFixed(1)} |`,
    ),
    "",
    `RSS sampled every second (${b.memory.samples} samples, in report.json with the backlog at each).`,
    "",
  ];
  if (!ok)
    lines.push(
      "## Failures",
      "",
      ...[...(r.valid ? [] : r.failures), ...b.memory.failures, ...b.paging.failures].map((f) => `- ${f}`),
      "",
    );
  writeFileSync(md, `${lines.join("\n")}\n`);
  return { json, md };
}

const n = (/** @type {number} */ x) => x.toLocaleString("en-US");
const mb = (/** @type {number} */ b) => `${(b / 1e6).toFixed(b < 10e6 ? 2 : 0)} MB`;
const kb = (/** @type {number} */ b) => `${Math.round(b / 1000)} KB`;
const bytesOf = (/** @type {number} */ b) => (b >= 100_000 ? mb(b) : `${n(b)} B`);
const pct = (/** @type {number | undefined} */ l) => `${Math.round((l ?? 0) * 100)} %`;

/** @param {number[]} xs */
function median(xs) {
  const v = [...xs].sort((a, b) => a - b);
  return v.length ? /** @type {number} */ (v[Math.floor((v.length - 1) / 2)]) : 0;
}

/** @param {number[]} xs */
function percentiles(xs) {
  const v = [...xs].sort((a, b) => a - b);
  const at = (/** @type {number} */ q) =>
    v.length ? /** @type {number} */ (v[Math.min(v.length - 1, Math.floor(q * v.length))]) : 0;
  return { p50: at(0.5), p99: at(0.99), max: at(1) };
}

/** The least-squares slope of y over x. @param {Array<[number, number]>} pts */
function slope(pts) {
  if (pts.length < 2) return 0;
  const mx = pts.reduce((s, [x]) => s + x, 0) / pts.length;
  const my = pts.reduce((s, [, y]) => s + y, 0) / pts.length;
  const sxx = pts.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  return sxx ? pts.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0) / sxx : 0;
}
