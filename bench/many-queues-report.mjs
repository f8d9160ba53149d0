// What `npm run bench -- many` prints at the end: each phase, the delivery, workerd's memory
// and the quiet window's figures against their goals.

/** @param {Record<string, any>} r */
export function printReport(r) {
  const lines = [`many queues: ${r.queues} (${r.push} push, ${r.pull} pull)`];
  for (const [name, p] of Object.entries(r.phases))
    lines.push(
      `  ${name.padEnd(13)} ${String(p.ok).padStart(6)} ok ${String(p.failed).padStart(6)} failed  ${secs(p.ms).padStart(7)} s${p.errors.length ? `  first errors: ${p.errors.join(" | ")}` : ""}`,
    );
  if (r.delivery) {
    const d = r.delivery;
    lines.push(
      `  delivered once: ${d.every_message_once ? "yes" : "NO"}; push ${d.push.received} received, ${d.push.distinct} distinct, ${d.push.duplicates} duplicates of ${d.push.sent}${d.push.latency_ms ? ` (latency p50 ${d.push.latency_ms.p50} ms, p99 ${d.push.latency_ms.p99} ms)` : ""}; pull ${d.pull.acked} acked, ${d.pull.duplicates} duplicates of ${r.pull}; backlog left ${d.backlog_left.messages}`,
    );
  }
  if (r.memory_after_setup)
    lines.push(
      `  workerd after set-up: RSS ${mb(r.memory_after_setup.rss_bytes)} MB (at start ${mb(r.memory_at_start.rss_bytes)} MB)`,
    );
  if (r.quiet) {
    const q = r.quiet;
    lines.push(
      `  quiet ${q.seconds} s (after ${r.settle_seconds} s settling): ${q.do_requests} Durable Object requests (${q.do_requests_per_hour} /h; the count read in at most ${q.count_read_ms.max} ms)`,
    );
    lines.push(
      `  workerd: ${q.workerd.cpu_percent_of_core} % of a core (${q.workerd.cpu_seconds} CPU s), RSS ${mb(q.workerd.rss_bytes_start)} -> ${mb(q.workerd.rss_bytes_end)} MB (max ${mb(q.workerd.rss_bytes_max)} MB), ${q.workerd.processes} process(es)`,
    );
    lines.push(
      `    ${q.workerd.each.map((/** @type {any} */ p) => `${p.role}: ${p.cpu_percent_of_core} %, ${mb(p.rss_bytes)} MB`).join("; ")}`,
    );
    lines.push(
      `  producer's workerd: ${q.producer_workerd.cpu_percent_of_core} % of a core, RSS ${mb(q.producer_workerd.rss_bytes)} MB`,
    );
    lines.push(
      `  goals: 0 requests ${q.do_requests === 0 ? "met" : "NOT met"}; under 2 % of a core ${q.workerd.cpu_percent_of_core < 2 ? "met" : "NOT met"}`,
    );
  }
  if (r.state_bytes !== undefined) lines.push(`  state on disk: ${mb(r.state_bytes)} MB`);
  if (r.error) lines.push(`  stopped by an error: ${r.error}`);
  console.log(lines.join("\n"));
}

export const secs = (/** @type {number} */ ms) => (ms / 1000).toFixed(1);
export const mb = (/** @type {number} */ bytes) => (bytes / 1024 / 1024).toFixed(0);
