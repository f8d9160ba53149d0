import type { ContentType } from "../src/kernel/protocol";
import { runMigrations, type MigrationStep } from "../src/kernel/sqlite-migrations";
import { encodeHeaders, nextSegment, packBodies, SEGMENT_MAX_BYTES, Settled, type Header } from "./segments/segment";
import type { NewMessage } from "./segments/segment-placement";
import { LANE_LEASES_V16, LANES_SCHEMA, LOCATED_LANE_IDS, neverReuseLseq } from "./keyed/lanes-schema";
import { HELD_LEASES_SCHEMA } from "./segments/held-leases";
import { HANDOFF_SCHEMA } from "./handoff/handoff-schema";
import { KEY_LEASES_SCHEMA } from "./keyed/keyed-leases";
import { convertLanesToSegments } from "./keyed/keyed-upgrade";

/** A row of the messages table of schema versions 4 to 9, as the conversion to segments reads it. */
interface MessageRow {
  seq: number;
  id: string;
  size: number;
  enqueued_at: number;
  due_at: number | null;
  attempts: number;
  lease_id: string | null;
  checksum: number;
  content_type: ContentType;
  body: ArrayBuffer;
  nonce: number | null;
  sent_at: number | null;
}

/**
 * The storage shard's SQLite schema. Applied synchronously in the constructor;
 * SQLite calls in a Durable Object are synchronous, so no request can run before it.
 *
 * Since versions 10 and 11 (the table, then the conversion) messages live in segments, one row per batch that arrived together
 * (segment.ts, docs/segments.md); versions 1 to 9 below are the one-row-per-message
 * schema they replaced, kept so that a shard of any age converts on start.
 *
 * Versions 4 to 9 made a message delivered and acked the first time cost two row
 * writes, its insert and its delete; segments make a batch cost about two. The backlog
 * figures are counted from the segments when the object starts, and the running totals
 * are written at most once a second (delivery-state.ts), so neither costs a row per batch.
 */
export const MIGRATIONS: readonly MigrationStep[] = [
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
  // Stored leases, counted at each heartbeat (segment-leases.ts leasedCount): only rows leased from SQLite have one.
  `CREATE INDEX IF NOT EXISTS messages_leased ON messages(due_at) WHERE lease_id IS NOT NULL;`,
  // Moves are remembered by the copy they moved, never by message id (remembered-ids.ts): a nonce per row names it.
  `ALTER TABLE messages ADD COLUMN nonce INTEGER;
   CREATE TABLE IF NOT EXISTS remembered_moves (move TEXT PRIMARY KEY, at INTEGER NOT NULL);
   CREATE INDEX IF NOT EXISTS remembered_moves_at ON remembered_moves(at);`,
  // A moved message keeps the timestamp it was first sent with; its age here counts from enqueued_at.
  `ALTER TABLE messages ADD COLUMN sent_at INTEGER;`,
  // Segments: a batch is one row, its messages' headers and bodies packed, its settled slots a bitmap.
  // The columns a scan reads come first; headers and bodies last, so SQLite reads their overflow pages only when asked.
  `CREATE TABLE segments (
     seg         INTEGER PRIMARY KEY,
     enqueued_at INTEGER NOT NULL,
     due_at      INTEGER,
     count       INTEGER NOT NULL,
     live        INTEGER NOT NULL,
     live_bytes  INTEGER NOT NULL,
     settled     BLOB    NOT NULL,
     batch       TEXT,
     headers     TEXT    NOT NULL,
     bodies      BLOB    NOT NULL
   );
   CREATE INDEX segments_due ON segments(due_at) WHERE due_at IS NOT NULL;
   CREATE TABLE message_ids (id TEXT PRIMARY KEY, seg INTEGER NOT NULL) WITHOUT ROWID;
   CREATE TABLE legacy_rows (seq INTEGER PRIMARY KEY, seg INTEGER NOT NULL, slot INTEGER NOT NULL, lease TEXT);`,
  convertMessagesToSegments,
  // Ordered lanes: keyed messages one row each, in their key's order (converted to segments by keyed-upgrade.ts).
  LANES_SCHEMA,
  // Hand-offs of ordering keys between shards when the active shards change (handoff.ts).
  HANDOFF_SCHEMA,
  // A lane message's number names its copy for ever: never given out twice.
  neverReuseLseq,
  // Lane messages' ids say where they live, as segments' do: no index on every id.
  LOCATED_LANE_IDS,
  // A lane's lease names the last message it took, so its queries read only what it holds; its end is not indexed.
  LANE_LEASES_V16,
  // Memory leases written by a shard going quiet, for the instance after an eviction (held-leases.ts).
  HELD_LEASES_SCHEMA,
  // Keyed messages in segments, each segment counting its keyed slots; a keyed lease a row (keyed-leases.ts).
  `ALTER TABLE segments ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;
   ${KEY_LEASES_SCHEMA}`,
  // Lanes' messages and leases converted to those, the lane tables dropped (keyed-upgrade.ts).
  convertLanesToSegments,
  // Whether a shard has held keyed messages, kept across restarts (segment-writes.ts noteKeyed): one pass here, once.
  `INSERT OR REPLACE INTO meta (key, value) SELECT 'keyed', '1' WHERE EXISTS (SELECT 1 FROM segments WHERE keyed > 0)`,
  // A move remembered with the message it brought, forgotten when that message moves on (remembered-ids.ts forgetMovesOf).
  `ALTER TABLE remembered_moves ADD COLUMN id TEXT;
   CREATE INDEX IF NOT EXISTS remembered_moves_id ON remembered_moves(id) WHERE id IS NOT NULL;`,
];

/** Old rows converted per segment: a batch's worth, as a broker writes them. */
const CONVERT_PER_SEGMENT = 100;

/**
 * Version 11: every message of the one-row-per-message table becomes one slot of a
 * segment, in arrival order, nothing lost and nothing doubled: ready ones (due_at NULL)
 * in segments the cursor reads, scheduled ones (delayed, retried, under a stored lease)
 * in scheduled segments due when their row was. Each keeps its id (indexed: it does not
 * say where it lives now), attempts, arrival and first-sent times, and its copy key, so a
 * move begun before the upgrade is still recognised when it is written again. Each row's
 * number is kept beside its new place (legacy_rows), so an ack or retry under a lease id
 * handed out before the upgrade (`<seq>-<lease>`) still lands, as it would have: under its
 * stored lease, or a memory lease the restart ended (segment-settlement.ts legacyLease). Nobody holds
 * a lease after the upgrade: a message under a stored lease is due when that lease ends.
 */
function convertMessagesToSegments(sql: SqlStorage): void {
  let last = sql.exec<{ s: number | null }>("SELECT MAX(seg) AS s FROM segments").one().s ?? 0;
  const now = Date.now();
  /** Rows waiting for their segment, by kind: "ready", "scheduled", or "lease:<id>" (one stored lease's rows). */
  const pending = new Map<
    string,
    { messages: NewMessage[]; bytes: number; seqs: number[]; leases: Array<string | null>; dueAt: number | null }
  >();
  const flush = (kind: string) => {
    const group = pending.get(kind);
    if (!group || group.messages.length === 0) return;
    pending.delete(kind);
    const list = group.messages;
    const seg = nextSegment(last, now);
    last = seg;
    const headers: Header[] = list.map((m) => ({
      id: m.id!,
      contentType: m.contentType,
      size: m.body.byteLength,
      checksum: m.checksum,
      enqueuedAt: m.enqueuedAt,
      dueAt: m.dueAt,
      attempts: m.attempts,
      sentAt: m.sentAt,
      copy: m.copy,
      indexed: true,
    }));
    sql.exec(
      "INSERT INTO segments (seg, enqueued_at, due_at, count, live, live_bytes, settled, batch, headers, bodies) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
      seg,
      Math.min(...list.map((m) => m.enqueuedAt)),
      group.dueAt,
      list.length,
      list.length,
      group.bytes,
      Settled.none(list.length).blob(),
      encodeHeaders(headers),
      packBodies(list.map((m) => m.body)),
    );
    for (const h of headers) sql.exec("INSERT OR REPLACE INTO message_ids (id, seg) VALUES (?, ?)", h.id, seg);
    group.leases.forEach((lease, slot) => {
      if (lease !== null)
        sql.exec(
          "INSERT INTO legacy_rows (seq, seg, slot, lease) VALUES (?, ?, ?, ?)",
          group.seqs[slot]!,
          seg,
          slot,
          lease,
        );
    });
  };
  for (let after = 0; ;) {
    const rows = sql
      .exec(
        "SELECT seq, id, size, enqueued_at, due_at, attempts, lease_id, checksum, content_type, body, nonce, sent_at FROM messages WHERE seq > ? ORDER BY seq LIMIT 500",
        after,
      )
      .toArray() as unknown as MessageRow[];
    if (rows.length === 0) break;
    for (const r of rows) {
      after = r.seq;
      // A row under a stored lease that has not run out goes with the other rows of that lease: its
      // message is ready (due at arrival) in a segment due when the lease ends, which is how a
      // scheduled segment moved past a lease a restart lost looks (lookups call it leased).
      const held = r.lease_id !== null && r.due_at !== null && r.due_at > now;
      const kind = r.due_at === null ? "ready" : held ? `lease:${r.lease_id}` : "scheduled";
      const group = pending.get(kind);
      if (group && (group.messages.length >= CONVERT_PER_SEGMENT || group.bytes + r.size > SEGMENT_MAX_BYTES))
        flush(kind);
      const g = pending.get(kind) ?? { messages: [], bytes: 0, seqs: [], leases: [], dueAt: null };
      pending.set(kind, g);
      // A scheduled row is due when its row said; never 0, which means "ready on arrival".
      const dueAt = r.due_at === null ? 0 : held ? Math.max(1, r.enqueued_at) : Math.max(1, r.due_at);
      g.messages.push({
        id: r.id,
        contentType: r.content_type,
        checksum: r.checksum,
        enqueuedAt: r.enqueued_at,
        dueAt,
        attempts: r.attempts,
        sentAt: r.sent_at ?? 0,
        copy: `${r.seq}.${r.nonce ?? 0}`,
        body: new Uint8Array(r.body),
      });
      if (r.due_at !== null) g.dueAt = Math.min(g.dueAt ?? Infinity, held ? r.due_at : dueAt);
      g.bytes += r.size;
      g.seqs.push(r.seq);
      // The leases an ack could still name, as the old settle took them: the stored one, or
      // any ("*") on a row never scheduled, whose memory lease a restart ended; none on a
      // delayed or retried row without one.
      g.leases.push(r.lease_id ?? (r.due_at === null ? "*" : null));
    }
  }
  for (const kind of [...pending.keys()]) flush(kind);
  sql.exec("DROP TABLE messages");
}

export function migrate(sql: SqlStorage): void {
  runMigrations(sql, MIGRATIONS);
}
