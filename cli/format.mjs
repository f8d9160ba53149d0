// Human output of `shardq`: aligned tables and key-value lines, times, sizes and
// message bodies shortened to one line. Pure functions, no I/O.

/**
 * Columns padded to their widest cell, two spaces apart; the last column is not padded
 * so that lines carry no trailing blanks.
 * @param {string[]} headers
 * @param {string[][]} rows
 */
export function table(headers, rows) {
  const all = [headers, ...rows];
  const widths = headers.map((_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  return all
    .map((r) =>
      r
        .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

/**
 * "key  value" lines with the values aligned. Pairs whose value is undefined are left out.
 * @param {Array<[string, string | undefined]>} pairs
 */
export function keyValues(pairs) {
  const shown = /** @type {Array<[string, string]>} */ (pairs.filter(([, v]) => v !== undefined));
  const width = Math.max(0, ...shown.map(([k]) => k.length + 1));
  return shown.map(([k, v]) => `${`${k}:`.padEnd(width)}  ${v}`).join("\n");
}

/**
 * A timestamp (ms since the epoch, or an ISO string) as "2026-11-21 09:17:50Z".
 * @param {number | string | null | undefined} at
 */
export function time(at) {
  if (at === null || at === undefined || at === "") return "-";
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return String(at);
  return d
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d+Z$/, "Z");
}

/**
 * Seconds in words: 0 -> "0 s", 90 -> "90 s (1m 30s)", 345600 -> "345600 s (4d)".
 * @param {number} s
 */
export function seconds(s) {
  return s < 60 ? `${s} s` : `${s} s (${duration(s * 1000)})`;
}

/**
 * A duration in ms, in its two largest units: 1500 -> "1.5s", 5400000 -> "1h 30m".
 * @param {number} ms
 */
export function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${Math.round(ms / 100) / 10}s`;
  const units = /** @type {Array<[string, number]>} */ ([
    ["d", 86_400_000],
    ["h", 3_600_000],
    ["m", 60_000],
    ["s", 1000],
  ]);
  const parts = [];
  let rest = Math.round(ms / 1000) * 1000;
  for (const [unit, size] of units) {
    const n = Math.floor(rest / size);
    if (n > 0 || parts.length > 0) parts.push(`${n}${unit}`);
    rest -= n * size;
    if (parts.length === 2) break;
  }
  return parts.filter((p) => !/^0/.test(p)).join(" ");
}

/** @param {number} n */
export function bytes(n) {
  if (n < 1000) return `${n} B`;
  if (n < 1_000_000) return `${(n / 1000).toFixed(1)} kB`;
  return `${(n / 1_000_000).toFixed(1)} MB`;
}

/**
 * @param {number} n
 * @param {string} one
 * @param {string} [many]
 */
export function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * Text on one line, at most `max` characters: newlines and tabs escaped, the rest cut with "…".
 * @param {string} text
 * @param {number} [max]
 */
export function oneLine(text, max = 60) {
  const flat = text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t");
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/**
 * A pulled message's body as text. The pull API sends "text" bodies as they are and
 * every other content type as base64 of the stored bytes: JSON's bytes are its text,
 * the binary types are only described.
 * @param {{ body: string, metadata?: Record<string, string> }} message
 */
export function pulledBody(message) {
  const type = message.metadata?.["CF-Content-Type"] ?? "json";
  if (type === "text") return message.body;
  const raw = Buffer.from(message.body, "base64");
  if (type === "json") return raw.toString("utf8");
  return `<${bytes(raw.byteLength)} of ${type}>`;
}
