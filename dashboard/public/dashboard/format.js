// Formatting for the dashboard's tables and figures: text only (textContent), never HTML.

export function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.append(td);
  return td;
}

export const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
export function age(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  return s < 120 ? `${s} s` : s < 7200 ? `${Math.round(s / 60)} min` : `${Math.round(s / 3600)} h`;
}
export const time = (ms) => new Date(ms).toLocaleTimeString();

/** Sums the shards' heartbeats: rates per second and the dead-lettered total. */
export function sumBeats(metrics) {
  let inPerS = 0,
    outPerS = 0,
    dead = 0;
  for (const s of metrics.shards) {
    if (!s.heartbeat) continue;
    inPerS += s.heartbeat.messages_in_per_second;
    outPerS += s.heartbeat.messages_out_per_second;
    dead += s.heartbeat.totals?.deadLettered ?? 0;
  }
  return { inPerS, outPerS, dead };
}

/** The API sends non-text bodies as base64 of the stored bytes; JSON is shown as its text. */
export function readableBody(m) {
  if (m.content_type !== "json") return m.body;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(Uint8Array.from(atob(m.body), (c) => c.charCodeAt(0)));
  } catch {
    return m.body;
  }
}
