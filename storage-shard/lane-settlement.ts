/**
 * Settling ordered lanes' messages (lanes.ts holds the lanes and their leases): acks,
 * dead-letterings and drops delete, retries leave a message in its place; a lane none of
 * whose leased messages is left unsettled ends its lease. Also the extension of lane
 * leases and the reading of leased lane messages for a dead-letter move. Every function
 * runs inside the caller's transactionSync.
 */
import { crc32 } from "../src/kernel/checksum";
import type { ContentType, LeasedMessage, LeaseRef } from "../src/kernel/protocol";
import { bridgedKeys, copyOfLane, reopen, UPTO, type BacklogDelta, type Lane, type Row } from "./lanes";

/** A lane lease id: `L<lseq>-<lease>`. Segment lease ids have three parts (segment.ts). */
const LANE_LEASE = /^L(\d+)-([0-9a-f]+)$/;

/** What a lane lease id names, when it can be current: the message's row and its lane. */
function resolve(sql: SqlStorage, ref: LeaseRef, lanes: Map<string, Lane | undefined> = new Map()): { row: Row; lane: Lane; live: boolean } | null {
  const m = LANE_LEASE.exec(ref.leaseId);
  if (!m) return null;
  const row = sql.exec<Row>("SELECT lseq, key, id, content_type, checksum, enqueued_at, due_at, attempts, sent_at, leased, length(body) AS size, x'' AS body FROM lane_messages WHERE lseq = ?", Number(m[1])).toArray()[0];
  if (!row || row.id !== ref.id) return null;
  // One read of a lane for all the messages of one call that are in it.
  if (!lanes.has(row.key)) lanes.set(row.key, sql.exec<Lane>("SELECT key, ready_at, lease, lease_until, last_lease FROM lanes WHERE key = ?", row.key).toArray()[0]);
  const lane = lanes.get(row.key);
  if (!lane) return null;
  // Held now under this lease; or the lease ran out and nobody has leased the lane since.
  if (lane.lease === m[2] && row.leased === 1) return { row, lane, live: true };
  if (lane.lease === null && lane.last_lease === m[2]) return { row, lane, live: false };
  return null;
}

export type LaneSettleKind = "ack" | "dead_letter" | "drop" | "retry";

/**
 * Settles lane messages: an ack, a dead-lettering or a drop deletes the message; a retry
 * leaves it where it is with one more attempt, due after its delay, so it holds the rest
 * of its key until then. A lane none of whose leased messages is left unsettled ends its
 * lease and is ready again at its head.
 */
export function settleLanes(sql: SqlStorage, now: number, refs: ReadonlyArray<{ ref: LeaseRef; kind: LaneSettleKind; delayMs?: number }>, stale: string[]): { tally: Record<LaneSettleKind, number>; delta: BacklogDelta; ready: number } {
  const tally: Record<LaneSettleKind, number> = { ack: 0, dead_letter: 0, drop: 0, retry: 0 };
  if (refs.length === 0) return { tally, delta: { count: 0, bytes: 0 }, ready: 0 };
  // Every message and every lane the call names, in one read each.
  const named = refs.map((r) => ({ ...r, m: LANE_LEASE.exec(r.ref.leaseId) }));
  const lseqs = named.flatMap((r) => (r.m ? [Number(r.m[1])] : []));
  const rows = new Map(
    sql
      .exec<Row & { size: number }>("SELECT lseq, key, id, leased, attempts, length(body) AS size FROM lane_messages WHERE lseq IN (SELECT value FROM json_each(?))", JSON.stringify(lseqs))
      .toArray()
      .map((r) => [r.lseq, r]),
  );
  const laneKeys = [...new Set([...rows.values()].map((r) => r.key))];
  const lanes = new Map(
    sql.exec<Lane>("SELECT key, ready_at, lease, lease_until, last_lease FROM lanes WHERE key IN (SELECT value FROM json_each(?))", JSON.stringify(laneKeys)).toArray().map((l) => [l.key, l]),
  );
  let count = 0;
  let bytes = 0;
  const deletes: number[] = [];
  const touched = new Map<string, Lane>();
  for (const { ref, kind, delayMs, m } of named) {
    const row = m ? rows.get(Number(m[1])) : undefined;
    const lane = row && row.id === ref.id ? lanes.get(row.key) : undefined;
    // Held now under this lease; or the lease ran out and nobody has leased the lane since.
    const live = !!lane && lane.lease === m![2] && row!.leased === 1;
    const lapsed = !!lane && lane.lease === null && lane.last_lease === m![2];
    if (!row || !lane || !(live || lapsed) || deletes.includes(row.lseq)) {
      stale.push(ref.id);
      continue;
    }
    touched.set(lane.key, lane);
    tally[kind]++;
    if (kind === "retry") {
      // A lease that ran out counted its delivery when it did.
      sql.exec("UPDATE lane_messages SET attempts = attempts + ?, leased = 0, due_at = ? WHERE lseq = ?", live ? 1 : 0, now + (delayMs ?? 0), row.lseq);
    } else {
      deletes.push(row.lseq);
      count++;
      bytes += row.size;
    }
  }
  if (deletes.length > 0) sql.exec("DELETE FROM lane_messages WHERE lseq IN (SELECT value FROM json_each(?))", JSON.stringify(deletes));
  // Lanes whose lease has nothing left unsettled end it; a lapsed settle only moves the head.
  const leasedKeys = [...touched.values()].filter((l) => l.lease !== null).map((l) => l.key);
  const still = new Set(
    leasedKeys.length === 0
      ? []
      : sql
          .exec<{ key: string }>(
            `SELECT DISTINCT m.key FROM lanes l JOIN lane_messages m ON m.key = l.key AND m.lseq <= ${UPTO}
             WHERE l.key IN (SELECT value FROM json_each(?)) AND m.leased = 1`,
            JSON.stringify(leasedKeys),
          )
          .toArray()
          .map((r) => r.key),
  );
  const done = [...touched.keys()].filter((key) => !still.has(key));
  return { tally, delta: { count: -count, bytes: -bytes }, ready: reopenAll(sql, now, done) };
}

/**
 * reopen() for many lanes at once, the lease each holds ending: those a bridge holds (after a
 * map change) lane by lane, the others in three statements. Answers how many are ready now.
 */
function reopenAll(sql: SqlStorage, now: number, keys: readonly string[]): number {
  if (keys.length === 0) return 0;
  const held = bridgedKeys(sql, keys);
  let ready = 0;
  for (const key of held.keys()) {
    const lease = sql.exec<{ lease: string | null }>("SELECT lease FROM lanes WHERE key = ?", key).toArray()[0]?.lease ?? null;
    if (reopen(sql, now, key, lease)) ready++;
  }
  const rest = held.size === 0 ? keys : keys.filter((k) => !held.has(k));
  if (rest.length === 0) return ready;
  const list = JSON.stringify(rest);
  sql.exec("DELETE FROM lanes WHERE key IN (SELECT value FROM json_each(?)) AND NOT EXISTS (SELECT 1 FROM lane_messages m WHERE m.key = lanes.key)", list);
  sql.exec(
    `UPDATE lanes SET last_lease = COALESCE(lanes.lease, lanes.last_lease), lease = NULL, lease_until = NULL, ready_at = h.ready,
       reason = CASE WHEN h.ready > ? THEN CASE WHEN h.attempts > 0 THEN 'retry' ELSE 'delayed' END END,
       blocker = CASE WHEN h.ready > ? THEN h.id END,
       held_since = CASE WHEN h.ready > ? THEN ? END
     FROM (SELECT m.key, m.id, m.attempts, CASE WHEN m.due_at > 0 THEN m.due_at ELSE m.enqueued_at END AS ready
           FROM json_each(?) j JOIN lane_messages m ON m.lseq = (SELECT lseq FROM lane_messages WHERE key = j.value ORDER BY lseq LIMIT 1)) AS h
     WHERE lanes.key = h.key`,
    now, now, now, now, list,
  );
  return ready + sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM lanes WHERE key IN (SELECT value FROM json_each(?)) AND ready_at <= ?", list, now).one().n;
}

/** Moves the end of lane leases still held forward; returns the ids it extended. */
export function extendLanes(sql: SqlStorage, now: number, refs: readonly LeaseRef[], leaseMs: number): string[] {
  const extended: string[] = [];
  for (const ref of refs) {
    const found = resolve(sql, ref);
    if (!found?.live) continue;
    sql.exec("UPDATE lanes SET lease_until = MAX(lease_until, ?) WHERE key = ?", now + leaseMs, found.lane.key);
    extended.push(ref.id);
  }
  return extended;
}

/** The lane messages still held under these leases (or under one that ran out, unsettled), bodies checked: for a dead-letter move. */
export function readLeasedLanes(sql: SqlStorage, refs: readonly LeaseRef[]): LeasedMessage[] {
  const out: LeasedMessage[] = [];
  for (const ref of refs) {
    const found = resolve(sql, ref);
    if (!found) continue;
    const r = sql.exec<Row>("SELECT * FROM lane_messages WHERE lseq = ?", found.row.lseq).one();
    const body = new Uint8Array(r.body);
    if (crc32(body) !== r.checksum) continue;
    // The delivery the consumer saw is counted in the row only once its lease ran out.
    out.push({ id: r.id, body, contentType: r.content_type as ContentType, enqueuedAt: r.sent_at || r.enqueued_at, attempts: r.attempts + (found.live ? 1 : 0), leaseId: ref.leaseId, copyKey: copyOfLane(r.lseq), orderingKey: r.key });
  }
  return out;
}
