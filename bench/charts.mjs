// The benchmark report's SVG charts, drawn by hand (no dependency): throughput per
// workload, latency distributions, and shards and throughput over time while autoscaling.

const SQ = "#f6821f";
const SIM = "#6b7280";
const esc = (/** @type {string} */ s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");

/**
 * Bars of delivered (or, for HTTP, sent) messages/s per workload and system (medians).
 * @param {Array<{ workload: string, metric: string, simulator: { median: number } | null, shardq: { median: number } | null }>} rows
 */
export function throughputChart(rows) {
  const bars = /** @type {Array<{ label: string, system: string, value: number }>} */ ([]);
  for (const r of rows) {
    if (r.metric !== "delivered_msgs_per_s" && !(r.workload === "w3" && r.metric === "send_msgs_per_s")) continue;
    if (r.simulator) bars.push({ label: r.workload, system: "simulator", value: r.simulator.median });
    if (r.shardq) bars.push({ label: r.workload, system: "shardq", value: r.shardq.median });
  }
  const max = Math.max(1, ...bars.map((b) => b.value));
  const w = 60 + bars.length * 70;
  const body = bars
    .map((b, i) => {
      const bh = Math.round((b.value / max) * 180);
      const x = 50 + i * 70;
      return `<rect x="${x}" y="${210 - bh}" width="50" height="${bh}" fill="${b.system === "shardq" ? SQ : SIM}"/><text x="${x + 25}" y="${205 - bh}" font-size="11" text-anchor="middle">${b.value}</text><text x="${x + 25}" y="228" font-size="11" text-anchor="middle">${b.label} ${b.system === "shardq" ? "sq" : "sim"}</text>`;
    })
    .join("");
  return svg(
    w,
    260,
    `<text x="10" y="20" font-size="13">messages/s (median): shardq (orange) vs simulator (grey)</text><line x1="40" y1="210" x2="${w - 10}" y2="210" stroke="#999"/>${body}`,
  );
}

/**
 * Latency distributions as CDFs on a log axis: one line per system and kind (send,
 * end-to-end), from the percentile points a run recorded.
 * @param {string} title
 * @param {Array<{ label: string, system: string, dashed?: boolean, points: Array<[number, number]> }>} series  [percentile, ms]
 */
export function latencyChart(title, series) {
  const W = 560;
  const H = 300;
  const left = 50;
  const bottom = 250;
  const all = series.flatMap((s) => s.points.map(([, ms]) => Math.max(0.5, ms)));
  const lo = Math.log10(0.5);
  const hi = Math.log10(Math.max(10, ...all) * 1.2);
  const x = (/** @type {number} */ ms) => left + ((Math.log10(Math.max(0.5, ms)) - lo) / (hi - lo)) * (W - left - 20);
  const y = (/** @type {number} */ p) => bottom - (p / 100) * 210;
  const ticks = [1, 10, 100, 1000, 10000].filter((t) => Math.log10(t) <= hi);
  const grid = ticks
    .map(
      (t) =>
        `<line x1="${x(t)}" y1="${y(100)}" x2="${x(t)}" y2="${bottom}" stroke="#eee"/><text x="${x(t)}" y="${bottom + 14}" font-size="10" text-anchor="middle">${t} ms</text>`,
    )
    .join("");
  const pgrid = [50, 90, 99]
    .map(
      (p) =>
        `<line x1="${left}" y1="${y(p)}" x2="${W - 20}" y2="${y(p)}" stroke="#eee"/><text x="${left - 4}" y="${y(p) + 3}" font-size="10" text-anchor="end">p${p}</text>`,
    )
    .join("");
  const lines = series
    .map((s, i) => {
      const color = s.system === "shardq" ? SQ : SIM;
      const pts = s.points.map(([p, ms]) => `${x(ms).toFixed(1)},${y(p).toFixed(1)}`).join(" ");
      const legend = `<line x1="${left + 10}" y1="${30 + i * 14}" x2="${left + 34}" y2="${30 + i * 14}" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="4 3"' : ""}/><text x="${left + 40}" y="${34 + i * 14}" font-size="11">${esc(s.label)}</text>`;
      return `<polyline fill="none" stroke="${color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="4 3"' : ""} points="${pts}"/>${legend}`;
    })
    .join("");
  return svg(
    W,
    H,
    `<text x="10" y="16" font-size="13">${esc(title)}</text>${grid}${pgrid}<line x1="${left}" y1="${bottom}" x2="${W - 20}" y2="${bottom}" stroke="#999"/>${lines}`,
  );
}

/**
 * The autoscaling workload over time, in two panels on one time axis. Above, messages/s:
 * offered (when a run recorded it), accepted (send() resolved) and delivered. Below, storage
 * shards: active, draining, the count the offered rate needs and 1.5x it, the most the goal
 * allows. A grey bar marks when the load stopped.
 * @param {string} title
 * @param {Array<{ t: number, shards: number, draining?: number, offered_per_s?: number, sent_per_s: number, delivered_per_s: number }>} samples
 * @param {{ rate?: number, needed?: number, stoppedAt?: number | null }} [opts]  the offered rate and the shards it needs
 */
export function timelineChart(title, samples, opts = {}) {
  const W = 640;
  const H = 420;
  const left = 55;
  const right = 70;
  const BLUE = "#2563eb";
  const rates = { top: 45, bottom: 195 };
  const counts = { top: 235, bottom: 385 };
  const tMax = Math.max(1, ...samples.map((s) => s.t));
  const rMax = Math.max(
    1,
    opts.rate ?? 0,
    ...samples.map((s) => Math.max(s.offered_per_s ?? 0, s.sent_per_s, s.delivered_per_s)),
  );
  const allowed = opts.needed ? Math.floor(opts.needed * 1.5) : 0;
  const sMax = Math.max(1, allowed + 1, ...samples.map((s) => Math.max(s.shards, s.draining ?? 0)));
  const x = (/** @type {number} */ t) => left + (t / tMax) * (W - left - right);
  const yr = (/** @type {number} */ v) => rates.bottom - (v / rMax) * (rates.bottom - rates.top);
  const ys = (/** @type {number} */ v) => counts.bottom - (v / sMax) * (counts.bottom - counts.top);
  const line = (
    /** @type {(s: typeof samples[0]) => number} */ f,
    /** @type {(v: number) => number} */ yf,
    /** @type {string} */ color,
    dash = "",
  ) =>
    `<polyline fill="none" stroke="${color}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ""} points="${samples.map((s) => `${x(s.t).toFixed(1)},${yf(f(s)).toFixed(1)}`).join(" ")}"/>`;
  const level = (/** @type {number} */ y, /** @type {string} */ color, /** @type {string} */ label) =>
    `<line x1="${left}" y1="${y.toFixed(1)}" x2="${W - right}" y2="${y.toFixed(1)}" stroke="${color}" stroke-dasharray="2 3"/><text x="${W - right + 4}" y="${(y + 4).toFixed(1)}" font-size="10" fill="${color}">${esc(label)}</text>`;
  const panel = (/** @type {{ top: number, bottom: number }} */ p, /** @type {string} */ label) =>
    `<line x1="${left}" y1="${p.bottom}" x2="${W - right}" y2="${p.bottom}" stroke="#999"/><line x1="${left}" y1="${p.top}" x2="${left}" y2="${p.bottom}" stroke="#999"/><text x="${left - 4}" y="${p.top + 4}" font-size="10" text-anchor="end">${label}</text><text x="${left - 4}" y="${p.bottom + 4}" font-size="10" text-anchor="end">0</text>`;
  const offered = samples.some((s) => s.offered_per_s !== undefined);
  const draining = samples.some((s) => s.draining);
  const legend = (/** @type {number} */ y, /** @type {string[][]} */ items) =>
    items
      .map(
        ([color, dash, label], i) =>
          `<line x1="${left + 10 + i * 110}" y1="${y}" x2="${left + 28 + i * 110}" y2="${y}" stroke="${color}" stroke-width="2"${dash ? ` stroke-dasharray="${dash}"` : ""}/><text x="${left + 32 + i * 110}" y="${y + 4}" font-size="11">${label}</text>`,
      )
      .join("");
  const stop = opts.stoppedAt
    ? [rates, counts]
        .map(
          (p) =>
            `<rect x="${(x(opts.stoppedAt ?? 0) - 2).toFixed(1)}" y="${p.top}" width="4" height="${p.bottom - p.top}" fill="#bbb" opacity="0.6"/>`,
        )
        .join("") +
      `<text x="${x(opts.stoppedAt).toFixed(1)}" y="${counts.bottom + 14}" font-size="10" text-anchor="middle">load stops</text>`
    : "";
  const body = [
    `<text x="10" y="16" font-size="13">${esc(title)}</text>`,
    panel(rates, `${Math.round(rMax)}/s`),
    panel(counts, `${sMax}`),
    legend(rates.top - 12, [
      [SQ, "", "delivered/s"],
      [SIM, "", "accepted/s"],
      ...(offered ? [[SIM, "4 3", "offered/s"]] : []),
    ]),
    legend(counts.top - 12, [[BLUE, "", "active shards"], ...(draining ? [[BLUE, "4 3", "draining"]] : [])]),
    opts.rate ? level(yr(opts.rate), SIM, `${opts.rate}/s offered`) : "",
    opts.needed ? level(ys(opts.needed), BLUE, `${opts.needed} needed`) : "",
    allowed ? level(ys(allowed), "#dc2626", `${allowed} = 1.5x`) : "",
    stop,
    `<text x="${W - right}" y="${counts.bottom + 14}" font-size="10" text-anchor="end">${Math.round(tMax)} s</text>`,
    line((s) => s.delivered_per_s, yr, SQ),
    line((s) => s.sent_per_s, yr, SIM),
    offered ? line((s) => s.offered_per_s ?? 0, yr, SIM, "4 3") : "",
    line((s) => s.shards, ys, BLUE),
    draining ? line((s) => s.draining ?? 0, ys, BLUE, "4 3") : "",
  ];
  return svg(W, H, body.join(""));
}

/** @param {number} w @param {number} h @param {string} body */
const svg = (w, h, body) =>
  `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif">${body}</svg>\n`;

/**
 * A queue's monthly bill against its traffic, both axes logarithmic: shardq (orange) and
 * Cloudflare Queues (grey) at each rate, and the idle bill as a level line. A bill of $0 has
 * no place on a log axis: it is said in the legend instead.
 * @param {string} title
 * @param {Array<{ rate: number, usd: number, cq_usd: number }>} levels
 * @param {{ usd: number, cq_usd: number }} idle
 * @param {string} [note] a smaller line under the title (the stack it ran on)
 */
export function costRateChart(title, levels, idle, note = "") {
  const W = 600;
  const H = 350;
  const left = 70;
  const right = 90;
  const top = 62;
  const bottom = 300;
  const rates = levels.map((l) => l.rate);
  const dollars = [...levels.flatMap((l) => [l.usd, l.cq_usd]), idle.usd].filter((v) => v > 0);
  const decade = (/** @type {number} */ v, /** @type {(x: number) => number} */ f) => 10 ** f(Math.log10(v));
  const xLo = decade(Math.min(1, ...rates), Math.floor);
  const xHi = Math.max(xLo * 10, decade(Math.max(1, ...rates), Math.ceil));
  const yLo = decade(dollars.length ? Math.min(...dollars) : 0.01, Math.floor);
  const yHi = Math.max(yLo * 10, decade(Math.max(1, ...dollars), Math.ceil));
  const x = (/** @type {number} */ r) =>
    left + ((Math.log10(r) - Math.log10(xLo)) / (Math.log10(xHi) - Math.log10(xLo))) * (W - left - right);
  const y = (/** @type {number} */ v) =>
    bottom - ((Math.log10(v) - Math.log10(yLo)) / (Math.log10(yHi) - Math.log10(yLo))) * (bottom - top);
  const ticks = (/** @type {number} */ lo, /** @type {number} */ hi) =>
    Array.from({ length: Math.round(Math.log10(hi / lo)) + 1 }, (_, i) => lo * 10 ** i);
  const money = (/** @type {number} */ v) => (v >= 1 ? `$${v.toLocaleString("en-US")}` : `$${v}`);
  const grid = [
    ...ticks(xLo, xHi).map(
      (t) =>
        `<line x1="${x(t).toFixed(1)}" y1="${top}" x2="${x(t).toFixed(1)}" y2="${bottom}" stroke="#eee"/><text x="${x(t).toFixed(1)}" y="${bottom + 14}" font-size="10" text-anchor="middle">${t.toLocaleString("en-US")}/s</text>`,
    ),
    ...ticks(yLo, yHi).map(
      (t) =>
        `<line x1="${left}" y1="${y(t).toFixed(1)}" x2="${W - right}" y2="${y(t).toFixed(1)}" stroke="#eee"/><text x="${left - 4}" y="${(y(t) + 3).toFixed(1)}" font-size="10" text-anchor="end">${money(t)}</text>`,
    ),
  ].join("");
  const series = (/** @type {string} */ color, /** @type {(l: typeof levels[0]) => number} */ f) => {
    const pts = levels.filter((l) => f(l) > 0);
    return (
      `<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.map((l) => `${x(l.rate).toFixed(1)},${y(f(l)).toFixed(1)}`).join(" ")}"/>` +
      pts.map((l) => `<circle cx="${x(l.rate).toFixed(1)}" cy="${y(f(l)).toFixed(1)}" r="3" fill="${color}"/>`).join("")
    );
  };
  const idleLine =
    idle.usd > 0
      ? `<line x1="${left}" y1="${y(idle.usd).toFixed(1)}" x2="${W - right}" y2="${y(idle.usd).toFixed(1)}" stroke="${SQ}" stroke-dasharray="4 3"/><text x="${W - right + 4}" y="${(y(idle.usd) + 4).toFixed(1)}" font-size="10" fill="${SQ}">idle $${idle.usd.toFixed(2)}</text>`
      : "";
  const legend = [
    [SQ, `shardq (idle: $${idle.usd.toFixed(2)}${idle.usd > 0 ? ", dashed" : ", off the log axis"})`],
    [SIM, `Cloudflare Queues (idle: $${idle.cq_usd.toFixed(2)}${idle.cq_usd > 0 ? "" : ", off the log axis"})`],
  ]
    .map(
      ([color, label], i) =>
        `<line x1="${left + 10}" y1="${42 + i * 14}" x2="${left + 34}" y2="${42 + i * 14}" stroke="${color}" stroke-width="2"/><text x="${left + 40}" y="${46 + i * 14}" font-size="11">${esc(/** @type {string} */ (label))}</text>`,
    )
    .join("");
  return svg(
    W,
    H,
    `<text x="10" y="16" font-size="13">${esc(title)}</text><text x="10" y="30" font-size="10">${esc(note)}</text>${grid}<line x1="${left}" y1="${bottom}" x2="${W - right}" y2="${bottom}" stroke="#999"/><line x1="${left}" y1="${top}" x2="${left}" y2="${bottom}" stroke="#999"/>` +
      `<text x="${(W - right + left) / 2}" y="${bottom + 30}" font-size="11" text-anchor="middle">single send()s per second</text><text x="12" y="${(top + bottom) / 2}" font-size="11" transform="rotate(-90 12 ${(top + bottom) / 2})" text-anchor="middle">$ per queue-month</text>` +
      `${idleLine}${series(SIM, (l) => l.cq_usd)}${series(SQ, (l) => l.usd)}${legend}`,
  );
}
