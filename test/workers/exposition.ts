/**
 * A strict reader of the Prometheus text format (0.0.4), for the tests: it throws on
 * anything a scraper would reject or misread, and on what shardq promises beyond the
 * format (every family has HELP and TYPE, counters end in _total, histograms are whole).
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Family {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram" | "summary" | "untyped";
  samples: Sample[];
}

const NAME = "[a-zA-Z_:][a-zA-Z0-9_:]*";
const HELP_LINE = new RegExp(`^# HELP (${NAME}) (.*)$`);
const TYPE_LINE = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`);
const SAMPLE_LINE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (\\S+)(?: (-?\\d+))?$`);

export function parseExposition(text: string): Map<string, Family> {
  if (text !== "" && !text.endsWith("\n")) throw new Error("the text must end with a line feed");
  const families = new Map<string, Family>();
  const seen = new Set<string>();
  let current: Family | null = null;
  let pendingHelp: { name: string; help: string } | null = null;
  const lines = text === "" ? [] : text.slice(0, -1).split("\n");
  lines.forEach((line, i) => {
    const at = `line ${i + 1} (${JSON.stringify(line)})`;
    if (line.startsWith("#")) {
      const help = HELP_LINE.exec(line);
      const type = TYPE_LINE.exec(line);
      if (help) {
        if (families.has(help[1]!) || pendingHelp) throw new Error(`${at}: HELP repeated or out of place`);
        pendingHelp = { name: help[1]!, help: unescapeHelp(help[2]!) };
      } else if (type) {
        if (!pendingHelp || pendingHelp.name !== type[1])
          throw new Error(`${at}: TYPE without its HELP just before it`);
        if (families.has(type[1]!)) throw new Error(`${at}: family ${type[1]} appears twice`);
        current = { name: type[1]!, help: pendingHelp.help, type: type[2] as Family["type"], samples: [] };
        families.set(current.name, current);
        pendingHelp = null;
      } else if (line.startsWith("# HELP") || line.startsWith("# TYPE")) {
        throw new Error(`${at}: malformed HELP or TYPE line`);
      }
      return;
    }
    if (line.trim() === "") throw new Error(`${at}: blank line`);
    const m = SAMPLE_LINE.exec(line);
    if (!m) throw new Error(`${at}: not a sample line`);
    const family: Family | null = current;
    if (!family || pendingHelp) throw new Error(`${at}: sample before its family's HELP and TYPE`);
    const name = m[1]!;
    const allowed =
      family.type === "histogram" ? ["_bucket", "_sum", "_count"].map((s) => family.name + s) : [family.name];
    if (!allowed.includes(name)) throw new Error(`${at}: sample ${name} outside its family (current: ${family.name})`);
    const labels = parseLabels(m[2] ?? "", at);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(key)) throw new Error(`${at}: duplicate sample`);
    seen.add(key);
    family.samples.push({ name, labels, value: parseValue(m[3]!, at) });
  });
  if (pendingHelp) throw new Error("HELP without TYPE at the end");
  for (const f of families.values()) {
    if (f.type === "counter" && !f.name.endsWith("_total")) throw new Error(`counter ${f.name} does not end in _total`);
    if (f.type === "histogram") checkHistogram(f);
  }
  return families;
}

/** Buckets ascending by le, cumulative, +Inf present and equal to _count; _sum present. */
function checkHistogram(f: Family): void {
  const series = new Map<string, { buckets: Array<[number, number]>; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const h = series.get(key) ?? { buckets: [] };
    series.set(key, h);
    if (s.name.endsWith("_bucket")) {
      if (le === undefined) throw new Error(`${f.name}: bucket without le`);
      h.buckets.push([parseValue(le, `${f.name} le`), s.value]);
    } else if (s.name.endsWith("_sum")) h.sum = s.value;
    else h.count = s.value;
  }
  for (const [key, h] of series) {
    if (h.sum === undefined || h.count === undefined) throw new Error(`${f.name}${key}: _sum or _count missing`);
    const last = h.buckets[h.buckets.length - 1];
    if (!last || last[0] !== Infinity) throw new Error(`${f.name}${key}: the last bucket is not le="+Inf"`);
    if (last[1] !== h.count) throw new Error(`${f.name}${key}: +Inf bucket ${last[1]} != _count ${h.count}`);
    for (let i = 1; i < h.buckets.length; i++) {
      if (!(h.buckets[i]![0] > h.buckets[i - 1]![0])) throw new Error(`${f.name}${key}: le not ascending`);
      if (h.buckets[i]![1] < h.buckets[i - 1]![1]) throw new Error(`${f.name}${key}: buckets not cumulative`);
    }
  }
}

function parseLabels(s: string, at: string): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < s.length) {
    const name = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(s.slice(i))?.[0];
    if (!name || s[i + name.length] !== "=" || s[i + name.length + 1] !== '"')
      throw new Error(`${at}: bad label at ${i}`);
    i += name.length + 2;
    let value = "";
    for (;;) {
      const c = s[i];
      if (c === undefined) throw new Error(`${at}: unterminated label value`);
      if (c === '"') break;
      if (c === "\n") throw new Error(`${at}: raw line feed in a label value`);
      if (c === "\\") {
        const e = s[i + 1];
        if (e === "\\") value += "\\";
        else if (e === '"') value += '"';
        else if (e === "n") value += "\n";
        else throw new Error(`${at}: bad escape \\${e}`);
        i += 2;
        continue;
      }
      value += c;
      i++;
    }
    i++; // the closing quote
    if (name in out) throw new Error(`${at}: label ${name} twice`);
    out[name] = value;
    if (i < s.length) {
      if (s[i] !== ",") throw new Error(`${at}: expected a comma at ${i}`);
      i++;
    }
  }
  return out;
}

function parseValue(v: string, at: string): number {
  if (v === "+Inf" || v === "Inf") return Infinity;
  if (v === "-Inf") return -Infinity;
  if (v === "NaN") return NaN;
  if (!/^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/.test(v)) throw new Error(`${at}: bad value ${v}`);
  return Number(v);
}

function unescapeHelp(s: string): string {
  return s.replace(/\\(\\|n)/g, (_, c: string) => (c === "n" ? "\n" : "\\"));
}

/** The value of the one sample of `family` whose labels include `labels`; throws unless exactly one. */
export function valueOf(
  families: Map<string, Family>,
  family: string,
  labels: Record<string, string>,
  name = family,
): number {
  const f = families.get(family);
  if (!f) throw new Error(`no family ${family}`);
  const hits = f.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (hits.length !== 1) throw new Error(`${name}${JSON.stringify(labels)}: ${hits.length} samples`);
  return hits[0]!.value;
}
