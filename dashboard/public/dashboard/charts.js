// SVG drawn in the page: line charts of the last hour and the shard map picture.
// No library and no network: a few hundred points at most.
const NS = "http://www.w3.org/2000/svg";

function el(name, attrs = {}, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

const fmt = (n) =>
  n >= 1e6
    ? `${(n / 1e6).toFixed(1)}M`
    : n >= 1e4
      ? `${Math.round(n / 1e3)}k`
      : n >= 1e3
        ? `${(n / 1e3).toFixed(1)}k`
        : String(Math.round(n * 10) / 10);

/**
 * A line chart: `series` is [{ label, color, values: [[t, y], ...] }]; the x axis spans
 * the last hour ending now.
 */
export function lineChart(container, series, { now = Date.now(), spanMs = 3600_000 } = {}) {
  const W = 520,
    H = 180,
    L = 48,
    R = 10,
    T = 12,
    B = 24;
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  const max = Math.max(1, ...series.flatMap((s) => s.values.map(([, y]) => y)));
  const x = (t) => L + ((t - (now - spanMs)) / spanMs) * (W - L - R);
  const y = (v) => H - B - (v / max) * (H - T - B);
  for (const f of [0, 0.5, 1]) {
    svg.append(el("line", { x1: L, x2: W - R, y1: y(max * f), y2: y(max * f), class: "grid" }));
    svg.append(el("text", { x: L - 4, y: y(max * f) + 4, "text-anchor": "end", class: "axis" }, fmt(max * f)));
  }
  for (const [i, label] of ["-60 min", "-30 min", "now"].entries()) {
    svg.append(
      el(
        "text",
        { x: L + (i / 2) * (W - L - R), y: H - 6, "text-anchor": ["start", "middle", "end"][i], class: "axis" },
        label,
      ),
    );
  }
  const described = [];
  for (const s of series) {
    const pts = s.values.filter(([t]) => t >= now - spanMs);
    described.push(`${s.label}: ${pts.length ? fmt(pts[pts.length - 1][1]) : "no data"} now`);
    if (pts.length === 0) continue;
    const d = pts.map(([t, v], i) => `${i ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    svg.append(el("path", { d, fill: "none", stroke: s.color, "stroke-width": 2 }));
  }
  const legend = el("g");
  series.forEach((s, i) => {
    legend.append(el("rect", { x: L + 8 + i * 110, y: T, width: 10, height: 10, fill: s.color }));
    legend.append(el("text", { x: L + 22 + i * 110, y: T + 9, class: "axis" }, s.label));
  });
  svg.append(legend);
  svg.setAttribute("aria-label", described.join("; "));
  container.replaceChildren(svg);
}

const STATE_COLORS = { active: "#2f855a", draining: "#b7791f", retired: "#a0aec0" };

/**
 * The shard map as a picture: a box per region, a tile per shard coloured by state,
 * its bar as tall as its share of the busiest shard's backlog.
 */
export function shardPicture(container, shards, version) {
  const regions = [...new Set(shards.map((s) => s.region))].sort();
  const tile = 34,
    gap = 6,
    perRow = 8,
    pad = 10,
    head = 20;
  const boxes = regions.map((r) => {
    const n = shards.filter((s) => s.region === r).length;
    const rows = Math.max(1, Math.ceil(n / perRow));
    return { region: r, w: pad * 2 + Math.min(n, perRow) * (tile + gap) - gap, h: head + pad + rows * (tile + gap) };
  });
  const W = Math.max(
    280,
    boxes.reduce((w, b) => w + Math.max(b.w, 90) + 12, 0),
  );
  const H = Math.max(60, ...boxes.map((b) => b.h)) + 22;
  const svg = el("svg", {
    viewBox: `0 0 ${W} ${H}`,
    width: W,
    height: H,
    role: "img",
    "aria-label": `shard map version ${version}: ${shards.length} shards in ${regions.length} region(s)`,
  });
  const busiest = Math.max(1, ...shards.map((s) => s.backlog ?? 0));
  let x0 = 0;
  for (const b of boxes) {
    const w = Math.max(b.w, 90);
    svg.append(el("rect", { x: x0, y: 0, width: w, height: b.h, rx: 6, class: "region" }));
    svg.append(el("text", { x: x0 + pad, y: 15, class: "axis" }, b.region));
    shards
      .filter((s) => s.region === b.region)
      .forEach((s, i) => {
        const tx = x0 + pad + (i % perRow) * (tile + gap);
        const ty = head + Math.floor(i / perRow) * (tile + gap);
        const g = el("g");
        g.append(
          el(
            "title",
            {},
            `${s.name}\n${s.state}, backlog ${s.backlog ?? "?"}${s.healthy === false ? ", missed heartbeats" : ""}`,
          ),
        );
        g.append(
          el("rect", {
            x: tx,
            y: ty,
            width: tile,
            height: tile,
            rx: 4,
            fill: STATE_COLORS[s.state] ?? "#718096",
            opacity: s.healthy === false ? 0.4 : 1,
          }),
        );
        const bar = Math.round(((s.backlog ?? 0) / busiest) * (tile - 6));
        if (bar > 0) g.append(el("rect", { x: tx + 3, y: ty + tile - 3 - bar, width: 5, height: bar, fill: "#fff" }));
        g.append(
          el(
            "text",
            { x: tx + tile / 2 + 3, y: ty + tile / 2 + 4, "text-anchor": "middle", class: "tile" },
            s.name.split(":").pop(),
          ),
        );
        svg.append(g);
      });
    x0 += w + 12;
  }
  Object.entries(STATE_COLORS).forEach(([state, color], i) => {
    svg.append(el("rect", { x: i * 90, y: H - 14, width: 10, height: 10, fill: color }));
    svg.append(el("text", { x: i * 90 + 14, y: H - 5, class: "axis" }, state));
  });
  container.replaceChildren(svg);
}
