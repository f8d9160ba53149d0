/**
 * Versioned schema migrations for a Durable Object's SQLite. Run synchronously in
 * the constructor: SQLite calls are synchronous, so no request sees an old schema.
 * Append to a list; never edit a step that has shipped.
 */
export type MigrationStep = string | ((sql: SqlStorage) => void);

/** Runs the steps not yet applied: SQL text, or a function for a conversion SQL alone cannot express. */
export function runMigrations(sql: SqlStorage, steps: readonly MigrationStep[]): void {
  sql.exec(
    "CREATE TABLE IF NOT EXISTS schema_version (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL)",
  );
  const from = sql.exec<{ version: number }>("SELECT version FROM schema_version").toArray()[0]?.version ?? 0;
  for (let v = from; v < steps.length; v++) {
    const step = steps[v]!;
    if (typeof step === "string") sql.exec(step);
    else step(sql);
  }
  if (from !== steps.length)
    sql.exec("INSERT OR REPLACE INTO schema_version (one, version) VALUES (1, ?)", steps.length);
}
