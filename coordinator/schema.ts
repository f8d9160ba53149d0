/** The Coordinator's SQLite schema: the queue's record and its shard list. */
export function migrateCoordinator(sql: SqlStorage): void {
  sql.exec(`
    CREATE TABLE IF NOT EXISTS queue (
      one         INTEGER PRIMARY KEY CHECK (one = 1),
      queue_id    TEXT    NOT NULL,
      account_id  TEXT    NOT NULL,
      queue_name  TEXT    NOT NULL,
      created_at  INTEGER NOT NULL,
      modified_at INTEGER NOT NULL,
      settings    TEXT    NOT NULL,
      ready       INTEGER NOT NULL DEFAULT 0,
      map_version INTEGER NOT NULL DEFAULT 1,
      published_version INTEGER NOT NULL DEFAULT 0,
      published_at INTEGER NOT NULL DEFAULT 0,
      next_shard  INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE IF NOT EXISTS shards (
      name       TEXT PRIMARY KEY,
      region     TEXT NOT NULL,
      state      TEXT NOT NULL,
      created_at INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS heartbeats (
      name          TEXT PRIMARY KEY,
      backlog_count INTEGER NOT NULL,
      backlog_bytes INTEGER NOT NULL,
      oldest_at     INTEGER,
      messages_in   INTEGER NOT NULL,
      period_ms     INTEGER NOT NULL,
      sent_at       INTEGER NOT NULL,
      received_at   INTEGER NOT NULL
    );`);
}
