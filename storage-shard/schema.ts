/**
 * The storage shard's SQLite schema. Applied synchronously in the constructor;
 * SQLite calls in a Durable Object are synchronous, so no request can run before it.
 *
 * `seq` (the rowid) orders messages by arrival, so the oldest message is the first
 * row and needs no index of its own. `visible_at` is QuiCK's vesting time: a lease
 * moves it forward instead of removing the row, and nothing is removed until acked.
 */
const MIGRATIONS: string[] = [
  `CREATE TABLE IF NOT EXISTS messages (
     seq          INTEGER PRIMARY KEY,
     id           TEXT    NOT NULL,
     body         BLOB    NOT NULL,
     content_type TEXT    NOT NULL,
     size         INTEGER NOT NULL,
     enqueued_at  INTEGER NOT NULL,
     visible_at   INTEGER NOT NULL,
     attempts     INTEGER NOT NULL DEFAULT 0,
     lease_id     TEXT,
     checksum     INTEGER NOT NULL
   );
   CREATE UNIQUE INDEX IF NOT EXISTS messages_id ON messages(id);
   CREATE INDEX IF NOT EXISTS messages_visible ON messages(visible_at);
   CREATE TABLE IF NOT EXISTS counters (
     one           INTEGER PRIMARY KEY CHECK (one = 1),
     backlog_count INTEGER NOT NULL,
     backlog_bytes INTEGER NOT NULL
   );
   INSERT OR IGNORE INTO counters (one, backlog_count, backlog_bytes) VALUES (1, 0, 0);
   CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);`,
];

export function migrate(sql: SqlStorage): void {
  sql.exec("CREATE TABLE IF NOT EXISTS schema_version (one INTEGER PRIMARY KEY CHECK (one = 1), version INTEGER NOT NULL)");
  const row = sql.exec<{ version: number }>("SELECT version FROM schema_version").toArray()[0];
  const from = row?.version ?? 0;
  for (let v = from; v < MIGRATIONS.length; v++) {
    sql.exec(MIGRATIONS[v]!);
  }
  if (from !== MIGRATIONS.length) {
    sql.exec("INSERT OR REPLACE INTO schema_version (one, version) VALUES (1, ?)", MIGRATIONS.length);
  }
}
