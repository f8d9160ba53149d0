/**
 * The schema step that moved keyed messages out of ordered lanes (one row per message, one
 * row per key: lanes-schema.ts) into segments (key-book.ts, docs/ordered-lanes.md). Every
 * lane message becomes a keyed slot, in lseq order, so each key's order is kept; each keeps
 * its id (indexed), attempts, times, epoch and its copy key (`L<lseq>`), so a move begun
 * before the upgrade is still recognised when it is written again. A message under a lane
 * lease that has not run out stays leased: its lease becomes a keyed lease row, and its
 * lease id from before (`L<lseq>-<lease>`) still settles it (legacy_lanes, segment-settlement.ts).
 * A retried or delayed message keeps its due time and so holds its key until then.
 */
import { encodeHeaders, nextSegment, packBodies, SEGMENT_MAX_BYTES, Settled, type Header } from "../segments/segment";
import type { ContentType } from "../../src/kernel/protocol";
import { writeKeyedLease, type LeasedSlot } from "./keyed-leases";

/** Lane messages per segment: a batch's worth. */
const PER_SEGMENT = 100;

interface LaneRow {
  lseq: number;
  key: string;
  id: string;
  content_type: ContentType;
  checksum: number;
  enqueued_at: number;
  due_at: number;
  attempts: number;
  sent_at: number;
  leased: number;
  gen: number;
  body: ArrayBuffer;
  lease: string | null;
  lease_until: number | null;
  upto: number | null;
}

export function convertLanesToSegments(sql: SqlStorage): void {
  let last = sql.exec<{ s: number | null }>("SELECT MAX(seg) AS s FROM segments").one().s ?? 0;
  const now = Date.now();
  const leases = new Map<string, { until: number; slots: LeasedSlot[] }>();
  let group: Array<{ r: LaneRow; header: Header }> = [];
  let bytes = 0;
  const flush = () => {
    if (group.length === 0) return;
    const seg = nextSegment(last, now);
    last = seg;
    const headers = group.map((g) => g.header);
    sql.exec(
      "INSERT INTO segments (seg, enqueued_at, due_at, count, live, live_bytes, settled, batch, headers, bodies, keyed) VALUES (?, ?, NULL, ?, ?, ?, ?, NULL, ?, ?, ?)",
      seg,
      Math.min(...headers.map((h) => h.enqueuedAt)),
      headers.length,
      headers.length,
      bytes,
      Settled.none(headers.length).blob(),
      encodeHeaders(headers),
      packBodies(group.map((g) => new Uint8Array(g.r.body))),
      headers.length,
    );
    group.forEach(({ r }, slot) => {
      sql.exec("INSERT OR REPLACE INTO message_ids (id, seg) VALUES (?, ?)", r.id, seg);
      if (
        r.lease === null ||
        r.leased !== 1 ||
        (r.lease_until ?? 0) <= now ||
        r.lseq > (r.upto ?? Number.MAX_SAFE_INTEGER)
      )
        return;
      const l = leases.get(r.lease) ?? { until: r.lease_until!, slots: [] };
      l.slots.push([seg, slot, r.id, 1]);
      leases.set(r.lease, l);
      sql.exec("INSERT INTO legacy_lanes (lseq, seg, slot) VALUES (?, ?, ?)", r.lseq, seg, slot);
    });
    group = [];
    bytes = 0;
  };
  sql.exec(
    "CREATE TABLE IF NOT EXISTS legacy_lanes (lseq INTEGER PRIMARY KEY, seg INTEGER NOT NULL, slot INTEGER NOT NULL)",
  );
  for (let after = 0; ;) {
    const rows = sql
      .exec(
        `SELECT m.lseq, m.key, m.id, m.content_type, m.checksum, m.enqueued_at, m.due_at, m.attempts, m.sent_at, m.leased, m.gen, m.body, l.lease, l.lease_until, l.upto
         FROM lane_messages m LEFT JOIN lanes l ON l.key = m.key WHERE m.lseq > ? ORDER BY m.lseq LIMIT 500`,
        after,
      )
      .toArray() as unknown as LaneRow[];
    if (rows.length === 0) break;
    for (const r of rows) {
      after = r.lseq;
      const size = r.body.byteLength;
      if (group.length >= PER_SEGMENT || (group.length > 0 && bytes + size > SEGMENT_MAX_BYTES)) flush();
      group.push({
        r,
        header: {
          id: r.id,
          contentType: r.content_type,
          size,
          checksum: r.checksum,
          enqueuedAt: r.enqueued_at,
          dueAt: r.due_at,
          // A lease that ran out was a delivery that failed, as the lanes counted it when they saw it had.
          attempts: r.attempts + (r.leased === 1 && (r.lease_until ?? 0) <= now ? 1 : 0),
          sentAt: r.sent_at,
          copy: `L${r.lseq}`,
          indexed: true,
          key: r.key,
          gen: r.gen,
          pos: "",
        },
      });
      bytes += size;
    }
  }
  flush();
  for (const [lease, l] of leases) writeKeyedLease(sql, lease, l.until, l.slots);
  // The last lseq drawn: a located id naming one up to it was this shard's (drawn-ids.ts), though the table goes.
  const lastLseq =
    sql.exec<{ seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'lane_messages'").toArray()[0]?.seq ?? 0;
  sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_lseq', ?)", String(lastLseq));
  sql.exec("DROP TABLE lane_ids");
  sql.exec("DROP TABLE lane_messages");
  sql.exec("DROP TABLE lanes");
}
