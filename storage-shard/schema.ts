import type { ContentType } from "../src/kernel/protocol";
import { runMigrations } from "../src/kernel/sqlite-migrations";

/** A row of the messages table, as SQLite returns it. */
export interface MessageRow {
  seq: number;
  id: string;
  size: number;
  enqueued_at: number;
  /** NULL for a fresh message (ready since it arrived); else when it is next ready. */
  due_at: number | null;
  attempts: number;
  /** The last stored lease (scheduled messages only); fresh messages are leased in memory. */
  lease_id: string | null;
  checksum: number;
  content_type: ContentType;
  body: ArrayBuffer;
  /** Drawn when this copy was written (NULL for rows older than version 8): see copyKey. */
  nonce: number | null;
  /** When the message was first sent, if it was moved here from another queue (else NULL: enqueued_at). */
  sent_at: number | null;
}

/** The timestamp consumers see: when the message was first sent, wherever it has moved since. */
export function timestampOf(r: { enqueued_at: number; sent_at: number | null }): number {
  return r.sent_at ?? r.enqueued_at;
}

/**
 * Names one stored copy of a message for ever, within its shard: seq values are reused
 * after a restart (the next seq is the largest stored plus one), the nonce is not. A
 * mover qualifies it with the shard's name; the target remembers the move under it
 * (remembered-ids.ts), so writing the same copy again stores nothing twice while a
 * later copy of the same message id is always stored.
 */
export function copyKey(seq: number, nonce: number | null): string {
  return `${seq}.${nonce ?? 0}`;
}

/** A nonce for a new row: never 0, the one rows written before version 8 read as. */
export function newNonce(): number {
  return 1 + Math.floor(Math.random() * (2 ** 52 - 1));
}

/**
 * The storage shard's SQLite schema. Applied synchronously in the constructor;
 * SQLite calls in a Durable Object are synchronous, so no request can run before it.
 *
 * `seq` (the rowid) orders messages by arrival, so the oldest message is the first
 * row and needs no index of its own.
 *
 * Since version 4 a message that is delivered and acked the first time costs two row
 * writes, its insert and its delete (the benchmark's target): no index covers fresh
 * messages, and their leases live in memory (delivery-state.ts). Only scheduled
 * messages, `due_at` set (delayed sends, retries, expired or stored leases), sit in the
 * partial index `messages_due`, where QuiCK's vesting time applies: a stored lease
 * moves `due_at` forward, and nothing is removed until acked.
 *
 * The backlog figures are counted from the table when the object starts, and the
 * running totals are written at most once a second (totals.ts), so neither costs a
 * row per batch.
 */
export const MIGRATIONS: readonly string[] = [
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
  // Two row writes per delivered message: no index over fresh messages (see above).
  `CREATE TABLE messages_v4 (
     seq          INTEGER PRIMARY KEY,
     id           TEXT    NOT NULL,
     size         INTEGER NOT NULL,
     enqueued_at  INTEGER NOT NULL,
     due_at       INTEGER,
     attempts     INTEGER NOT NULL DEFAULT 0,
     lease_id     TEXT,
     checksum     INTEGER NOT NULL,
     content_type TEXT    NOT NULL,
     body         BLOB    NOT NULL
   );
   INSERT INTO messages_v4 (seq, id, size, enqueued_at, due_at, attempts, lease_id, checksum, content_type, body)
     SELECT seq, id, size, enqueued_at,
            CASE WHEN lease_id IS NOT NULL OR visible_at <> enqueued_at THEN visible_at END,
            attempts, lease_id, checksum, content_type, body
     FROM messages;
   DROP TABLE messages;
   ALTER TABLE messages_v4 RENAME TO messages;
   CREATE INDEX messages_due ON messages(due_at) WHERE due_at IS NOT NULL;`,
  // Messages stored, a running total like the others (GET /metrics: shardq_messages_in_total).
  `ALTER TABLE counters ADD COLUMN stored INTEGER NOT NULL DEFAULT 0;`,
  // Ids written again by their sender after a lost reply must not be stored twice, even consumed (remembered-ids.ts).
  `CREATE TABLE IF NOT EXISTS remembered_ids (id TEXT PRIMARY KEY, at INTEGER NOT NULL);
   CREATE INDEX IF NOT EXISTS remembered_ids_at ON remembered_ids(at);`,
  // Stored leases, counted at each heartbeat (delivery.ts leasedCount): only rows leased from SQLite have one.
  `CREATE INDEX IF NOT EXISTS messages_leased ON messages(due_at) WHERE lease_id IS NOT NULL;`,
  // Moves are remembered by the copy they moved, never by message id (remembered-ids.ts): a nonce per row names it.
  `ALTER TABLE messages ADD COLUMN nonce INTEGER;
   CREATE TABLE IF NOT EXISTS remembered_moves (move TEXT PRIMARY KEY, at INTEGER NOT NULL);
   CREATE INDEX IF NOT EXISTS remembered_moves_at ON remembered_moves(at);`,
  // A moved message keeps the timestamp it was first sent with; its age here counts from enqueued_at.
  `ALTER TABLE messages ADD COLUMN sent_at INTEGER;`,
];

export function migrate(sql: SqlStorage): void {
  runMigrations(sql, MIGRATIONS);
}
