/**
 * The tables of ordered lanes, where keyed messages lived before segments took them
 * (keyed-upgrade.ts converts them), and the step that made their numbers never given out
 * twice: schema steps of storage-shard/schema.ts, kept so that a shard of any age converts.
 */
import { HANDOFF_TRIGGER } from "../handoff/handoff-schema";

/** Version 12 of the shard's schema (schema.ts). */
export const LANES_SCHEMA = `CREATE TABLE lane_messages (
     lseq         INTEGER PRIMARY KEY,
     key          TEXT    NOT NULL,
     id           TEXT    NOT NULL,
     content_type TEXT    NOT NULL,
     checksum     INTEGER NOT NULL,
     enqueued_at  INTEGER NOT NULL,
     due_at       INTEGER NOT NULL,
     attempts     INTEGER NOT NULL,
     sent_at      INTEGER NOT NULL,
     leased       INTEGER NOT NULL DEFAULT 0,
     batch        TEXT,
     body         BLOB    NOT NULL
   );
   CREATE INDEX lane_messages_key ON lane_messages(key, lseq);
   CREATE INDEX lane_messages_id ON lane_messages(id);
   CREATE TABLE lanes (
     key         TEXT PRIMARY KEY,
     ready_at    INTEGER,
     lease       TEXT,
     lease_until INTEGER,
     last_lease  TEXT,
     reason      TEXT,
     blocker     TEXT,
     held_since  INTEGER
   ) WITHOUT ROWID;
   CREATE INDEX lanes_ready ON lanes(ready_at) WHERE ready_at IS NOT NULL;
   CREATE INDEX lanes_leased ON lanes(lease_until) WHERE lease IS NOT NULL;`;

/**
 * Version 14: lseq is never used twice. A lane message's lseq names its copy for ever (a
 * dead-letter move is remembered by it, storage-shard/segments/remembered-ids.ts), and a plain
 * INTEGER PRIMARY KEY hands out the largest deleted number again: the full fault run lost
 * 45 messages that way, each dead-lettered under a copy key a move of another message had
 * already used, so the dead-letter queue skipped it and the queue deleted it. AUTOINCREMENT
 * never goes back, and the count starts above the clock (as segment numbers do), above any
 * number the table gave out before.
 */
export function neverReuseLseq(sql: SqlStorage): void {
  const columns =
    "lseq, key, id, content_type, checksum, enqueued_at, due_at, attempts, sent_at, leased, batch, gen, body";
  sql.exec(`CREATE TABLE lane_messages_v14 (
     lseq         INTEGER PRIMARY KEY AUTOINCREMENT,
     key          TEXT    NOT NULL,
     id           TEXT    NOT NULL,
     content_type TEXT    NOT NULL,
     checksum     INTEGER NOT NULL,
     enqueued_at  INTEGER NOT NULL,
     due_at       INTEGER NOT NULL,
     attempts     INTEGER NOT NULL,
     sent_at      INTEGER NOT NULL,
     leased       INTEGER NOT NULL DEFAULT 0,
     batch        TEXT,
     gen          INTEGER NOT NULL DEFAULT 0,
     body         BLOB    NOT NULL
   )`);
  sql.exec(`INSERT INTO lane_messages_v14 (${columns}) SELECT ${columns} FROM lane_messages`);
  // Dropping the table drops its indexes and the hand-off trigger (handoff.ts): made again below.
  sql.exec("DROP TABLE lane_messages");
  sql.exec("ALTER TABLE lane_messages_v14 RENAME TO lane_messages");
  sql.exec("CREATE INDEX lane_messages_key ON lane_messages(key, lseq)");
  sql.exec("CREATE INDEX lane_messages_id ON lane_messages(id)");
  sql.exec(HANDOFF_TRIGGER);
  const floor = Date.now() * 1024;
  sql.exec("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'lane_messages'", floor);
  sql.exec(
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'lane_messages', ? WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'lane_messages')",
    floor,
  );
}

/**
 * Version 15: a lane message the shard draws the id of gets a located id that names its
 * lseq, so the index on every lane message's id goes; ids a sender
 * chose, or a move kept, are indexed in lane_ids, which a trigger keeps in step with deletes.
 */
export const LOCATED_LANE_IDS = `CREATE TABLE lane_ids (id TEXT NOT NULL, lseq INTEGER NOT NULL, PRIMARY KEY (id, lseq)) WITHOUT ROWID;
   INSERT INTO lane_ids (id, lseq) SELECT id, lseq FROM lane_messages;
   DROP INDEX lane_messages_id;
   CREATE TRIGGER lane_id_gone AFTER DELETE ON lane_messages BEGIN DELETE FROM lane_ids WHERE id = OLD.id AND lseq = OLD.lseq; END;`;

/**
 * Version 16: a lane's lease names the last lseq it took (`upto`). A lease holds a prefix of
 * its lane, so the queries that look for its messages (still leased? run out?) read that
 * prefix through the key's index instead of every message of a deep lane. And the index of
 * leases' ends goes: the shard keeps the earliest end in memory,
 * so a lease's end is not an index entry written and deleted with every lease.
 */
export const LANE_LEASES_V16 = `ALTER TABLE lanes ADD COLUMN upto INTEGER;
   DROP INDEX lanes_leased;`;
