import { runMigrations } from "../src/kernel/sqlite-migrations";

/** The Coordinator's SQLite schema: the queue's record, its shards, their heartbeats, its consumer. */
export const MIGRATIONS: string[] = [
  `
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
    );`,
  `ALTER TABLE heartbeats ADD COLUMN totals TEXT NOT NULL DEFAULT '{}';
   CREATE TABLE IF NOT EXISTS consumers (
     consumer_id TEXT PRIMARY KEY,
     type        TEXT NOT NULL,
     script_name TEXT,
     settings    TEXT NOT NULL,
     dead_letter_queue TEXT,
     created_at  INTEGER NOT NULL,
     modified_at INTEGER NOT NULL
   );`,
  `ALTER TABLE heartbeats ADD COLUMN state TEXT NOT NULL DEFAULT 'active';
   ALTER TABLE heartbeats ADD COLUMN messages_out INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE heartbeats ADD COLUMN refusals INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE heartbeats ADD COLUMN leased_now INTEGER NOT NULL DEFAULT 0;`,
  // Autoscaling: its decisions, its memory, and what consumer shards report.
  `CREATE TABLE IF NOT EXISTS decisions (
     id      INTEGER PRIMARY KEY,
     at      INTEGER NOT NULL,
     kind    TEXT NOT NULL,
     region  TEXT,
     target  TEXT,
     reason  TEXT NOT NULL,
     figures TEXT NOT NULL
   );
   CREATE TABLE IF NOT EXISTS autoscale (one INTEGER PRIMARY KEY CHECK (one = 1), memory TEXT NOT NULL);
   CREATE TABLE IF NOT EXISTS consumer_shards (
     idx         INTEGER PRIMARY KEY,
     running     INTEGER NOT NULL,
     delivered   INTEGER NOT NULL,
     batches     INTEGER NOT NULL,
     errors      INTEGER NOT NULL,
     received_at INTEGER NOT NULL
   );
   ALTER TABLE queue ADD COLUMN consumer_shards_wanted INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE shards ADD COLUMN changed_at INTEGER NOT NULL DEFAULT 0;`,
  `ALTER TABLE heartbeats ADD COLUMN cost TEXT NOT NULL DEFAULT '{"rpcs":0,"rowsWritten":0}';`,
  // The dashboard's last hour (coordinator/time-series.ts).
  `CREATE TABLE IF NOT EXISTS series (
     at                      INTEGER PRIMARY KEY,
     backlog_count           INTEGER NOT NULL,
     backlog_bytes           INTEGER NOT NULL,
     messages_in_per_second  REAL    NOT NULL,
     messages_out_per_second REAL    NOT NULL,
     active_shards           INTEGER NOT NULL,
     consumer_shards_running INTEGER NOT NULL
   );`,
  // GET /metrics: the send latency histogram (send-latency.ts: per-bucket counts by `le`,
  // and the sum under "_sum") and what keeps the delivery counters from going down (counters.ts).
  `CREATE TABLE IF NOT EXISTS send_latency (le TEXT PRIMARY KEY, n REAL NOT NULL);
   CREATE TABLE IF NOT EXISTS counter_carry (name TEXT PRIMARY KEY, totals TEXT NOT NULL);`,
  // What each consumer shard was billed for (heartbeats.ts): its latest report, and its lives before.
  `ALTER TABLE consumer_shards ADD COLUMN cost TEXT;
   ALTER TABLE consumer_shards ADD COLUMN cost_carried TEXT;`,
  // Ordered lanes (docs/ordered-lanes.md): what a shard still owes of key hand-offs, and the
  // epochs pushed to the shards (control-loop.ts) against the one the committed map matches.
  `ALTER TABLE heartbeats ADD COLUMN handoffs INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE IF NOT EXISTS epochs (one INTEGER PRIMARY KEY CHECK (one = 1), pushed INTEGER NOT NULL, committed INTEGER NOT NULL);`,
  // A shard state change told to its shard and not recorded yet (control-loop.ts changeState):
  // a Coordinator that starts and finds one knows a reset cut it short, and undoes it at once.
  `CREATE TABLE IF NOT EXISTS state_changes (name TEXT PRIMARY KEY, state TEXT NOT NULL);`,
  // Sends a shard took from other regions (docs/cost.md, "Regions"), from its latest report.
  `ALTER TABLE heartbeats ADD COLUMN in_from TEXT;`,
  // A shard on a slow cadence says when it reports next (heartbeats.ts), and a
  // consumer shard reporting every ~30 s says until when it counts as delivering.
  `ALTER TABLE heartbeats ADD COLUMN next_report_at INTEGER;
   ALTER TABLE consumer_shards ADD COLUMN running_until INTEGER;`,
  // A shard's report that it sleeps after it (StorageHeartbeat.last): its traffic stopped.
  `ALTER TABLE heartbeats ADD COLUMN last INTEGER NOT NULL DEFAULT 0;`,
  // The send latency histogram in one row (send-latency.ts): a row per bucket was six rows
  // written with each broker's report, a tenth of a row a message at one send a second.
  `CREATE TABLE IF NOT EXISTS send_latency_histogram (one INTEGER PRIMARY KEY CHECK (one = 1), buckets TEXT NOT NULL, sum REAL NOT NULL);
   INSERT INTO send_latency_histogram (one, buckets, sum)
     SELECT 1, COALESCE((SELECT json_group_object(le, n) FROM send_latency WHERE le != '_sum'), '{}'), COALESCE((SELECT n FROM send_latency WHERE le = '_sum'), 0)
     WHERE EXISTS (SELECT 1 FROM send_latency);
   DROP TABLE send_latency;`,
];

export function migrateCoordinator(sql: SqlStorage): void {
  runMigrations(sql, MIGRATIONS);
}
