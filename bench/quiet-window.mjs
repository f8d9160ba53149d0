// The quiet window of `npm run bench -- many` (many-queues.mjs): the Durable Object requests
// the stack makes in it, and the CPU and memory of its workerd processes.
import { readFileSync } from "node:fs";
import { groupPids } from "./scaling.mjs";
import { sleep } from "../src/kernel/sleep.ts";

/** How often the quiet window is sampled (the timeline in the JSON). */
const SAMPLE_MS = 5000;

/**
 * The quiet window: the isolate's Durable Object request count (`readRequests`: the test hooks'
 * route, which asks no object) and workerd's CPU ticks and RSS at its start and end, sampled every
 * SAMPLE_MS for the timeline. The producer stack's workerd apart: it is `npm start`'s too,
 * but holds no queue.
 * @param {() => Promise<number>} readRequests @param {number} servicePid @param {number} producerPid @param {number} seconds
 */
export async function quietWindow(readRequests, servicePid, producerPid, seconds) {
  /** How long each read of the count took: the window's edges are known to within it. */
  const readMs = /** @type {number[]} */ ([]);
  const requests = async () => {
    const started = performance.now();
    const n = await readRequests();
    readMs.push(Math.round(performance.now() - started));
    return n;
  };
  const r0 = await requests();
  const s0 = workerdFigures(servicePid);
  const p0 = workerdFigures(producerPid);
  const t0 = performance.now();
  const samples = [];
  let rssMax = s0.rss_bytes;
  // A sample that came late (a busy machine) moves the next ones, never the window's end.
  for (
    let t = SAMPLE_MS;
    t < seconds * 1000;
    t = Math.max(t + SAMPLE_MS, Math.ceil((performance.now() - t0) / SAMPLE_MS) * SAMPLE_MS)
  ) {
    await sleep(t0 + t - performance.now());
    const s = workerdFigures(servicePid);
    rssMax = Math.max(rssMax, s.rss_bytes);
    samples.push({
      t_s: Math.round(t / 1000),
      do_requests: (await requests()) - r0,
      cpu_seconds: round(s.cpu_seconds - s0.cpu_seconds, 2),
      rss_bytes: s.rss_bytes,
    });
  }
  await sleep(t0 + seconds * 1000 - performance.now());
  const r1 = await requests();
  const elapsed = (performance.now() - t0) / 1000;
  const s1 = workerdFigures(servicePid);
  const p1 = workerdFigures(producerPid);
  rssMax = Math.max(rssMax, s1.rss_bytes);
  const cpu = s1.cpu_seconds - s0.cpu_seconds;
  return {
    seconds: round(elapsed, 1),
    do_requests: r1 - r0,
    do_requests_per_hour: Math.round(((r1 - r0) * 3600) / elapsed),
    count_read_ms: { first: readMs[0], last: readMs[readMs.length - 1], max: Math.max(...readMs) },
    workerd: {
      processes: s1.processes,
      cpu_seconds: round(cpu, 2),
      cpu_percent_of_core: round((100 * cpu) / elapsed, 2),
      rss_bytes_start: s0.rss_bytes,
      rss_bytes_end: s1.rss_bytes,
      rss_bytes_max: rssMax,
      // Which of the two does the work: the runtime's own figures beside the sum.
      each: s1.each.map((p) => ({
        role: p.role,
        cpu_percent_of_core: round(
          (100 * (p.cpu_seconds - (s0.each.find((q) => q.pid === p.pid)?.cpu_seconds ?? 0))) / elapsed,
          2,
        ),
        rss_bytes: p.rss_bytes,
      })),
    },
    producer_workerd: {
      cpu_percent_of_core: round((100 * (p1.cpu_seconds - p0.cpu_seconds)) / elapsed, 2),
      rss_bytes: p1.rss_bytes,
    },
    samples,
  };
}

/**
 * The workerd processes of a `wrangler dev` (its process group): CPU seconds so far (utime +
 * stime) and RSS, summed, and per process. wrangler runs two: its proxy, listening on the
 * port given (`--socket-addr=entry=...:<port>`), and the runtime behind it, on a port of its
 * own choosing (`entry=...:0`), which holds the Workers and every Durable Object.
 * @param {number} pgid
 */
export function workerdFigures(pgid) {
  let ticks = 0;
  let rss = 0;
  /** @type {Array<{ pid: number, role: string, cpu_seconds: number, rss_bytes: number }>} */
  const each = [];
  for (const pid of groupPids(pgid)) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() !== "workerd") continue;
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const t = Number(f[11]) + Number(f[12]);
      const r = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0) * 1024;
      const runtime = /--socket-addr=entry=[^ \0]*:0(?:\0|$)/.test(readFileSync(`/proc/${pid}/cmdline`, "utf8"));
      ticks += t;
      rss += r;
      each.push({ pid, role: runtime ? "runtime" : "proxy", cpu_seconds: t / 100, rss_bytes: r }); // USER_HZ is 100 on Linux
    } catch {
      // gone since the listing
    }
  }
  return { processes: each.length, cpu_seconds: ticks / 100, rss_bytes: rss, each };
}

const round = (/** @type {number} */ x, /** @type {number} */ digits) => Number(x.toFixed(digits));
