// The checker's part for the control-plane faults (control-faults.mjs): each must have
// fired (or been skipped for a stated reason) and recovered within its time; and what
// the producers saw while it played out: sends answered ok, refused or left unknown.
// None of these faults ends a lease or loses a write, so the checker's other rules
// (lost, lease overlaps, after ack) apply to them without exceptions.

import { statOf } from "./figures.mjs";

/** @typedef {import("./history.mjs").Op} Op */

/**
 * @param {Op[]} ops
 * @returns {{ figures: ReturnType<typeof summarize> | null, failures: string[] }}
 */
export function controlFaults(ops) {
  /** @type {Map<number, Op>} */
  const invoked = new Map();
  /** @type {Array<{ kind: string, value: any, inv: number, end: number | null, type: string | null, result: any }>} */
  const faults = [];
  /** @type {Array<{ inv: number, end: number, type: string, n: number, down: boolean, keyed: number, unavailable: boolean }>} */
  const sends = [];
  /** @type {Map<number, Op>} */
  const sendInvokes = new Map();
  for (const o of ops) {
    if (o.f === "control" && o.p === "nemesis") {
      if (o.type === "invoke") {
        invoked.set(o.op, o);
        faults.push({
          kind: o.value?.kind ?? "control",
          value: o.value,
          inv: o.t,
          end: null,
          type: null,
          result: null,
        });
      } else {
        const inv = invoked.get(o.op);
        const f = inv && faults.find((x) => x.inv === inv.t && x.end === null);
        if (f) Object.assign(f, { end: o.t, type: o.type, result: o.value ?? null });
      }
    } else if (o.f === "send") {
      if (o.type === "invoke") sendInvokes.set(o.op, o);
      else {
        const inv = sendInvokes.get(o.op);
        sendInvokes.delete(o.op);
        // A connection refused: nothing listened, the service was down for a kill.
        // keyed: its messages with an ordering key; unavailable: answered 503 (no shard took it).
        if (inv)
          sends.push({
            inv: inv.t,
            end: o.t,
            type: o.type,
            n: inv.value?.hs?.length ?? 0,
            down: /ECONNREFUSED/.test(String(o.value?.error ?? "")),
            keyed: inv.value?.ord?.length ?? 0,
            unavailable: o.value?.status === 503,
          });
      }
    }
  }
  if (faults.length === 0) return { figures: null, failures: [] };
  /** @type {string[]} */
  const failures = [];
  for (const f of faults) {
    const what = `${f.kind}${f.value?.point ? ` (${f.value.point})` : ""}${f.value?.target ? ` of the ${f.value.target}` : ""}`;
    if (f.end === null) failures.push(`${what} never completed`);
    else if (f.result?.skipped) continue;
    else if (!f.result?.fired) failures.push(`${what} did not fire: ${f.result?.error ?? "no reason logged"}`);
    else if (!f.result?.recovered) failures.push(`${what} fired and the service did not recover from it in time`);
  }
  return { figures: summarize(faults, sends), failures };
}

/**
 * Per kind: how many ran, fired, were skipped and recovered, the time to recover
 * (median, max), and the sends invoked while a fault played out, by outcome.
 * @param {Array<{ kind: string, value: any, inv: number, end: number | null, type: string | null, result: any }>} faults
 * @param {Array<{ inv: number, end: number, type: string, n: number, down: boolean, keyed: number, unavailable: boolean }>} sends
 */
function summarize(faults, sends) {
  // Keyed messages answered 503 while a Coordinator reset played out, by the point it cut
  // (a keyed send refused not_owner waits for the map that goes with a half-done change).
  const keyed503 = (/** @type {string} */ point) =>
    faults
      .filter((f) => f.kind === "abort-coordinator" && f.value?.point === point)
      .reduce(
        (n, f) =>
          n +
          sends
            .filter((s) => s.inv >= f.inv && s.inv <= (f.end ?? Infinity) && s.unavailable)
            .reduce((m, s) => m + s.keyed, 0),
        0,
      );
  const kinds = [...new Set(faults.map((f) => f.kind))];
  const byKind = Object.fromEntries(
    kinds.map((k) => {
      const of = faults.filter((f) => f.kind === k);
      const during = { ok: 0, refused: 0, down: 0, unknown: 0 };
      for (const f of of) {
        for (const s of sends) {
          if (s.inv < f.inv || s.inv > (f.end ?? Infinity)) continue;
          if (s.type === "ok") during.ok += s.n;
          else if (s.type === "unknown") during.unknown += s.n;
          else if (s.down) during.down += s.n;
          else during.refused += s.n;
        }
      }
      return [
        k,
        {
          count: of.length,
          fired: of.filter((f) => f.result?.fired).length,
          skipped: of.filter((f) => f.result?.skipped).length,
          recovered: of.filter((f) => f.result?.recovered).length,
          recovered_ms: statOf(of.map((f) => f.result?.recovered_ms ?? null)),
          ...(k === "throw-alarm"
            ? {
                alarms_thrown: of.reduce((n, f) => n + (f.result?.thrown ?? 0), 0),
                most_in_a_row: Math.max(0, ...of.map((f) => f.value?.times ?? 0)),
              }
            : {}),
          ...(k === "abort-coordinator"
            ? {
                keyed_answered_503: {
                  "abort-scale-out": keyed503("abort-scale-out"),
                  "abort-drain": keyed503("abort-drain"),
                },
              }
            : {}),
          ...(k === "stale-map"
            ? {
                retired_ms: statOf(of.map((f) => f.result?.retired_ms ?? null)),
                map_published_ms: statOf(of.map((f) => f.result?.published_ms ?? null)),
              }
            : {}),
          messages_sent_meanwhile: during,
        },
      ];
    }),
  );
  return {
    count: faults.length,
    by_kind: byKind,
    each: faults.map((f) => ({ kind: f.kind, at_ms: Math.round(f.inv), ...f.value, ...(f.result ?? {}) })),
  };
}

const secs = (/** @type {{ median: number, max: number } | null | undefined} */ s) =>
  s ? `${(s.median / 1000).toFixed(1)} s / ${(s.max / 1000).toFixed(1)} s` : "n/a";
const sentMeanwhile = (/** @type {{ ok: number, refused: number, down: number, unknown: number }} */ d) =>
  `${d.ok.toLocaleString("en-US")} ok, ${d.refused} refused by the service, ${d.unknown} unknown${d.down ? `, ${d.down} not sent (the service was down for a kill)` : ""}`;

/**
 * The report's summary rows for the control faults (none when the run had none).
 * @param {ReturnType<typeof summarize> | null | undefined} c
 * @returns {Array<[string, string]>}
 */
export function controlSummaryRows(c) {
  if (!c) return [];
  const k = c.by_kind;
  /** @type {Array<[string, string]>} */
  const rows = [];
  const counted = (/** @type {any} */ x) =>
    `${x.fired} of ${x.count} fired${x.skipped ? ` (${x.skipped} skipped)` : ""}, ${x.recovered} recovered`;
  if (k["abort-coordinator"]) {
    const x = k["abort-coordinator"];
    const keyed = x.keyed_answered_503
      ? `; keyed messages answered 503 meanwhile: ${x.keyed_answered_503["abort-scale-out"]} (scale-out), ${x.keyed_answered_503["abort-drain"]} (drain)`
      : "";
    rows.push([
      "Coordinator resets mid-autoscale",
      `${counted(x)}; recovered in ${secs(x.recovered_ms)} (median / max); messages sent meanwhile: ${sentMeanwhile(x.messages_sent_meanwhile)}${keyed}`,
    ]);
  }
  if (k["throw-alarm"]) {
    const x = k["throw-alarm"];
    rows.push([
      "alarms that throw",
      `${counted(x)}; ${x.alarms_thrown} alarms thrown (up to ${x.most_in_a_row} in a row); an alarm ran through again ${secs(x.recovered_ms)} after arming (median / max); messages sent meanwhile: ${sentMeanwhile(x.messages_sent_meanwhile)}`,
    ]);
  }
  if (k["stale-map"]) {
    const x = k["stale-map"];
    rows.push([
      "stale shard maps",
      `${counted(x)}; drained shard retired after ${secs(x.retired_ms)}, current map published after ${secs(x.map_published_ms)} (median / max); messages sent meanwhile: ${sentMeanwhile(x.messages_sent_meanwhile)}`,
    ]);
  }
  return rows;
}

/**
 * The report's section listing each control fault.
 * @param {ReturnType<typeof summarize> | null | undefined} c
 * @returns {string[]}
 */
export function controlSection(c) {
  if (!c) return [];
  const ms = (/** @type {unknown} */ x) => (typeof x === "number" ? String(x) : "–");
  return [
    "## Control-plane faults",
    "",
    "| kind | at (s) | what | fired | recovered after (ms) |",
    "| --- | --- | --- | --- | --- |",
    ...c.each.map((e) => {
      const x = /** @type {any} */ (e);
      const what =
        x.kind === "abort-coordinator"
          ? `${x.point}${x.shard ? ` of ${x.shard}` : ""}`
          : x.kind === "throw-alarm"
            ? `${x.times} alarm(s) of the ${x.target} ${x.shard ?? (x.consumer_shard !== undefined ? `consumer shard ${x.consumer_shard}` : "Coordinator")}${x.thrown !== undefined && x.thrown !== null ? `, ${x.thrown} thrown` : ""}`
            : `drain ${x.shard}, map held ${Math.round((x.hold_ms ?? 0) / 1000)} s; retired after ${ms(x.retired_ms)} ms, map published after ${ms(x.published_ms)} ms`;
      return `| ${x.kind} | ${(x.at_ms / 1000).toFixed(1)} | ${what} | ${x.skipped ? `skipped: ${x.why}` : x.fired ? "yes" : "**no**"} | ${x.recovered ? ms(x.recovered_ms) : x.skipped ? "–" : "**not recovered**"} |`;
    }),
    "",
  ];
}
