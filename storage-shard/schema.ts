import type { ContentType } from "../src/protocol";
import { runMigrations } from "../src/sqlite-migrations";

/** A row of the messages table, as SQLite returns it. */
export interface MessageRow {
  seq: number;
  id: string;
  body: ArrayBuffer;
  content_type: ContentType;
  size: number;
  enqueued_at: number;
  visible_at: number;
  attempts: number;
  lease_id: string | null;
  checksum: number;
}

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
  // Delivery: what left the backlog and why, and where unreadable bodies go.
  `ALTER TABLE counters ADD COLUMN leased INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE counters ADD COLUMN acked INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE counters ADD COLUMN retried INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE counters ADD COLUMN dead_lettered INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE counters ADD COLUMN dropped INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE counters ADD COLUMN expired INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE counters ADD COLUMN quarantined INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE IF NOT EXISTS quarantine (
     id          TEXT PRIMARY KEY,
     body        BLOB NOT NULL,
     checksum    INTEGER NOT NULL,
     reason      TEXT NOT NULL,
     detected_at INTEGER NOT NULL
   );`,
  // Queue operations: messages removed by a purge, and one by one by a cancel.
  `ALTER TABLE counters ADD COLUMN purged INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE counters ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0;`,
];

export function migrate(sql: SqlStorage): void {
  runMigrations(sql, MIGRATIONS);
}
