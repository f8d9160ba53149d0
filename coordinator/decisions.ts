/** What the Coordinator remembers of its scaling: the decision log and the autoscaler's memory. */
import type { Figures, ScalingMemory } from "./autoscaler";

const KEEP_DECISIONS = 200;

export interface Decision {
  at: number;
  kind: string;
  region: string | null;
  target: string | null;
  reason: string;
  figures: Figures | Record<string, number>;
}

export function logDecision(sql: SqlStorage, d: Decision): void {
  sql.exec(
    "INSERT INTO decisions (at, kind, region, target, reason, figures) VALUES (?, ?, ?, ?, ?, ?)",
    d.at,
    d.kind,
    d.region,
    d.target,
    d.reason,
    JSON.stringify(d.figures),
  );
  sql.exec("DELETE FROM decisions WHERE id <= (SELECT MAX(id) FROM decisions) - ?", KEEP_DECISIONS);
  console.log(
    `[coordinator] ${d.kind}${d.region ? ` ${d.region}` : ""}${d.target ? ` ${d.target}` : ""}: ${d.reason} ${JSON.stringify(d.figures)}`,
  );
}

export function recentDecisions(sql: SqlStorage, limit = 50): Decision[] {
  const rows = sql
    .exec("SELECT at, kind, region, target, reason, figures FROM decisions ORDER BY id DESC LIMIT ?", limit)
    .toArray() as unknown as Array<Omit<Decision, "figures"> & { figures: string }>;
  return rows.map((r) => ({ ...r, figures: JSON.parse(r.figures) as Decision["figures"] }));
}

export function loadMemory(sql: SqlStorage): ScalingMemory {
  const row = sql.exec<{ memory: string }>("SELECT memory FROM autoscale WHERE one = 1").toArray()[0];
  return row ? (JSON.parse(row.memory) as ScalingMemory) : { lowSince: {}, lastChange: {} };
}

export function saveMemory(sql: SqlStorage, memory: ScalingMemory): void {
  sql.exec("INSERT OR REPLACE INTO autoscale (one, memory) VALUES (1, ?)", JSON.stringify(memory));
}
