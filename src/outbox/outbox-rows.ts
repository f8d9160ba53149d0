/**
 * The outbox's table in the object's SQLite: one row per recorded message, in record order.
 * `seq` is the rowid (INTEGER PRIMARY KEY, no other index), so recording a message writes one
 * row and nothing else, the oldest rows are read in order without a sort, and an answered batch
 * (a run of consecutive seqs, the oldest) is deleted by one DELETE over a rowid range. A new row
 * always gets a seq above every row present, so a range taken from the table's head never
 * catches a row recorded after it was read.
 */
import { LIMITS, type Recorded } from "./recorded-body";

export const OUTBOX_TABLE = "_shardq_outbox";

/** A batch read from the table's head: its rows in order and the seqs they span. */
export interface HeadBatch {
  rows: Recorded[];
  first: number;
  last: number;
}

type Row = {
  seq: number;
  id: string;
  content_type: string;
  body: string | ArrayBuffer;
  delay_seconds: number | null;
  ordering_key: string | null;
  size: number;
};

export class OutboxRows {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(
      `CREATE TABLE IF NOT EXISTS ${OUTBOX_TABLE} (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL,
        content_type TEXT NOT NULL,
        body BLOB,
        delay_seconds INTEGER,
        ordering_key TEXT,
        size INTEGER NOT NULL,
        recorded_at INTEGER NOT NULL
      )`,
    );
  }

  insert(r: Recorded, now: number): void {
    this.sql.exec(
      `INSERT INTO ${OUTBOX_TABLE} (id, content_type, body, delay_seconds, ordering_key, size, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
      r.id,
      r.contentType,
      typeof r.body === "string"
        ? r.body
        : (r.body.buffer as ArrayBuffer).slice(r.body.byteOffset, r.body.byteOffset + r.body.byteLength),
      r.delaySeconds,
      r.orderingKey,
      r.size,
      now,
    );
  }

  /**
   * The oldest rows, as many as one sendBatch() takes: at most 100, and at most 256 KB unless
   * the first alone is larger (it was recorded within the per-message limit). The cursor is left
   * as soon as the batch is full, so rows past it are not read.
   */
  head(): HeadBatch | null {
    const rows: Recorded[] = [];
    let first = 0;
    let last = 0;
    let bytes = 0;
    const cursor = this.sql.exec<Row>(
      `SELECT seq, id, content_type, body, delay_seconds, ordering_key, size FROM ${OUTBOX_TABLE} ORDER BY seq LIMIT ?`,
      LIMITS.batchMessages,
    );
    for (const row of cursor) {
      if (rows.length > 0 && bytes + row.size > LIMITS.batchBytes) break;
      if (rows.length === 0) first = row.seq;
      last = row.seq;
      bytes += row.size;
      rows.push({
        id: row.id,
        contentType: row.content_type as QueueContentType,
        body: typeof row.body === "string" ? row.body : new Uint8Array(row.body),
        delaySeconds: row.delay_seconds,
        orderingKey: row.ordering_key,
        size: row.size,
      });
    }
    return rows.length === 0 ? null : { rows, first, last };
  }

  /** Deletes an answered batch: one statement, however many rows. */
  remove(batch: HeadBatch): void {
    this.sql.exec(`DELETE FROM ${OUTBOX_TABLE} WHERE seq BETWEEN ? AND ?`, batch.first, batch.last);
  }

  /** How many messages wait, and when the oldest was recorded. */
  pending(): { count: number; oldestRecordedAt: number | null } {
    const row = this.sql
      .exec<{ n: number; oldest: number | null }>(
        `SELECT count(*) AS n, min(recorded_at) AS oldest FROM ${OUTBOX_TABLE}`,
      )
      .one();
    return { count: row.n, oldestRecordedAt: row.oldest };
  }

  isEmpty(): boolean {
    return this.sql.exec(`SELECT 1 FROM ${OUTBOX_TABLE} LIMIT 1`).toArray().length === 0;
  }
}
