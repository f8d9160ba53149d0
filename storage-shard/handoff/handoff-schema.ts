/**
 * The tables of the hand-off of ordering keys (handoff.ts), and the trigger that wrote
 * releases while keyed messages lived in lanes (dropped with lane_messages: handoff.ts
 * releasesDue writes them now). Schema steps of storage-shard/schema.ts.
 */

/**
 * Writes the releases a holder owes as its messages of a handed-off key go: once it holds
 * no message of the key older than the epoch it registered the key in (handoff.ts).
 */
export const HANDOFF_TRIGGER = `CREATE TRIGGER lane_message_gone AFTER DELETE ON lane_messages
     WHEN EXISTS (SELECT 1 FROM registrations WHERE key = OLD.key)
   BEGIN
     INSERT OR IGNORE INTO releases (key, owner, gen)
       SELECT r.key, r.owner, r.gen FROM registrations r
       WHERE r.key = OLD.key AND NOT EXISTS (SELECT 1 FROM lane_messages m WHERE m.key = r.key AND m.gen < r.gen);
     DELETE FROM registrations
       WHERE key = OLD.key AND NOT EXISTS (SELECT 1 FROM lane_messages m WHERE m.key = registrations.key AND m.gen < registrations.gen);
   END;`;

/** Version 13 of the shard's schema (schema.ts). */
export const HANDOFF_SCHEMA = `ALTER TABLE lane_messages ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE epoch (one INTEGER PRIMARY KEY CHECK (one = 1), seq INTEGER NOT NULL, active TEXT NOT NULL);
   CREATE TABLE bridges (key TEXT NOT NULL, holder TEXT NOT NULL, gen INTEGER NOT NULL, released INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key, holder, gen)) WITHOUT ROWID;
   CREATE TABLE registrations (key TEXT NOT NULL, owner TEXT NOT NULL, gen INTEGER NOT NULL, PRIMARY KEY (key, owner, gen)) WITHOUT ROWID;
   CREATE TABLE releases (key TEXT NOT NULL, owner TEXT NOT NULL, gen INTEGER NOT NULL, PRIMARY KEY (key, owner, gen)) WITHOUT ROWID;
   ${HANDOFF_TRIGGER}`;
