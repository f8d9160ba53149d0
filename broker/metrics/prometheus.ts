/**
 * The Prometheus text exposition format, version 0.0.4: pure, no I/O.
 * https://prometheus.io/docs/instrumenting/exposition_formats/
 *
 * Families are written in the order they were declared, each as one contiguous block
 * (`# HELP`, `# TYPE`, then its samples): the format requires a family's lines to stay
 * together, and a scraper rejects a family that appears twice.
 */

export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type MetricType = "counter" | "gauge" | "histogram";
export type Labels = Readonly<Record<string, string>>;

/** One histogram's figures: per-bucket counts already cumulative, by upper bound (+Inf last). */
export interface HistogramValue {
  buckets: ReadonlyArray<{ le: number; count: number }>;
  sum: number;
  count: number;
}

interface Family {
  type: MetricType;
  help: string;
  lines: string[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

export class Exposition {
  private readonly families = new Map<string, Family>();

  /** Declares a family; its HELP and TYPE are written even when it gets no sample. */
  declare(name: string, type: MetricType, help: string): this {
    if (!METRIC_NAME.test(name)) throw new Error(`invalid metric name "${name}"`);
    const known = this.families.get(name);
    if (known && known.type !== type) throw new Error(`metric ${name} declared as ${known.type} and ${type}`);
    if (!known) this.families.set(name, { type, help, lines: [] });
    return this;
  }

  gauge(name: string, labels: Labels, value: number): this {
    this.family(name, "gauge").lines.push(sample(name, labels, value));
    return this;
  }

  /** A counter's name ends in `_total`, by convention and as OpenMetrics requires. */
  counter(name: string, labels: Labels, value: number): this {
    if (!name.endsWith("_total")) throw new Error(`counter ${name} must end in _total`);
    this.family(name, "counter").lines.push(sample(name, labels, value));
    return this;
  }

  /** Writes `_bucket` lines (with `le`, ending at +Inf = count), `_sum` and `_count`. */
  histogram(name: string, labels: Labels, h: HistogramValue): this {
    if ("le" in labels) throw new Error(`histogram ${name}: "le" is reserved`);
    const f = this.family(name, "histogram");
    let previous = 0;
    for (const b of h.buckets) {
      if (b.le === Infinity) continue;
      if (b.count < previous || b.count > h.count)
        throw new Error(`histogram ${name}: buckets must be cumulative and at most count`);
      previous = b.count;
      f.lines.push(sample(`${name}_bucket`, { ...labels, le: formatBound(b.le) }, b.count));
    }
    f.lines.push(sample(`${name}_bucket`, { ...labels, le: "+Inf" }, h.count));
    f.lines.push(sample(`${name}_sum`, labels, h.sum));
    f.lines.push(sample(`${name}_count`, labels, h.count));
    return this;
  }

  text(): string {
    const out: string[] = [];
    for (const [name, f] of this.families) {
      out.push(`# HELP ${name} ${escapeHelp(f.help)}`, `# TYPE ${name} ${f.type}`, ...f.lines);
    }
    // The format wants every line, the last one too, ended by a line feed.
    return out.length ? `${out.join("\n")}\n` : "";
  }

  private family(name: string, type: MetricType): Family {
    const f = this.families.get(name);
    if (!f) throw new Error(`metric ${name} was not declared`);
    if (f.type !== type) throw new Error(`metric ${name} is a ${f.type}, not a ${type}`);
    return f;
  }
}

function sample(name: string, labels: Labels, value: number): string {
  const pairs = Object.entries(labels).map(([k, v]) => {
    if (!LABEL_NAME.test(k) || k.startsWith("__")) throw new Error(`invalid label name "${k}"`);
    return `${k}="${escapeLabelValue(v)}"`;
  });
  return `${name}${pairs.length ? `{${pairs.join(",")}}` : ""} ${formatValue(value)}`;
}

/** In label values: backslash, double quote and line feed are escaped. */
export function escapeLabelValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** In HELP text: backslash and line feed are escaped (a quote is not). */
export function escapeHelp(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/** Go's float formatting as Prometheus parses it: NaN, +Inf, -Inf, else the shortest decimal. */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

/** A bucket bound as an `le` label value: "0.005", "1", "2.5", "+Inf". */
export function formatBound(le: number): string {
  return formatValue(le);
}
