/**
 * Keyed messages in a redrive, a peek and a purge (operations.ts does the same for
 * segments). A queue's keyed messages are in lanes (lanes.ts), and a dead-letter queue
 * holds them there too: dead-lettering keeps a message's key. A redrive leases a lane's
 * matching messages under one lane lease, in their key's order, so the move writes them to
 * the target in that order, and acks them through settle() like any lane lease; a lease
 * given back (a failed write, a release that could not move its head) reopens the lane. A
 * purge leaves the messages a move holds to that move: they leave for its target, and are
 * counted in its answer, not the purge's. Every function runs inside the caller's
 * transactionSync.
 */
import { crc32 } from "../src/kernel/checksum";
import type { ContentType, LeasedMessage, LeaseRef, MessageFilter, MessageStatus } from "../src/kernel/protocol";
import { blockedFrom, expireLaneLeases, lanesInUse, reopen, takeLanes, type BacklogDelta, type LaneCandidate } from "./lanes";

/** A lane lease id: `L<lseq>-<lease>` (lane-settlement.ts). */
const LANE_LEASE = /^L(\d+)-([0-9a-f]+)$/;
const LANES_PER_PAGE = 64;

/**
 * Per shard (its SqlStorage), the lane leases a move holds. Kept in memory, as a segment's
 * move lease is (delivery-state.ts, `counts: false`): a restart forgets both, and a purge
 * then takes what the move had not acked yet, whose ack then comes back stale.
 */
const moveLeases = new WeakMap<SqlStorage, Set<string>>();

/** The move leases still held now: those whose lane no longer holds them are forgotten. */
function liveMoveLeases(sql: SqlStorage, now: number): string[] {
  const held = moveLeases.get(sql);
  if (!held || held.size === 0) return [];
  const live = sql
    .exec<{ lease: string }>("SELECT lease FROM lanes WHERE lease IN (SELECT value FROM json_each(?)) AND lease_until > ?", JSON.stringify([...held]), now)
    .toArray()
    .map((r) => r.lease);
  moveLeases.set(sql, new Set(live));
  return live;
}

/** The filter as SQL over lane_messages; ages on this shard's clock, as operations.ts measures a segment's. */
function filterSql(now: number, f: MessageFilter): { where: string; args: SqlStorageValue[] } {
  const parts: string[] = [];
  const args: SqlStorageValue[] = [];
  if (f.minAgeMs !== undefined) parts.push("enqueued_at <= ?"), args.push(now - f.minAgeMs);
  if (f.maxAgeMs !== undefined) parts.push("enqueued_at >= ?"), args.push(now - f.maxAgeMs);
  if (f.minAttempts !== undefined) parts.push("attempts >= ?"), args.push(f.minAttempts);
  if (f.maxAttempts !== undefined) parts.push("attempts <= ?"), args.push(f.maxAttempts);
  return { where: parts.length === 0 ? "1" : parts.join(" AND "), args };
}

/**
 * Up to `want` keyed messages matching the filter, leased for a move: of each lane that is
 * ready now, the matching messages among those deliverable from its head on (up to the
 * first not due, or held by a hand-off), in their key's order. A message the filter skips
 * stays; the ones after it go ahead of it. Attempts are not counted, as a segment's move
 * lease counts none; a move lease that runs out is a delivery that failed, as every lane
 * lease's is (lanes.ts expireLaneLeases).
 */
export function leaseMatchingLanes(sql: SqlStorage, now: number, filter: MessageFilter, want: number, leaseMs: number): { messages: LeasedMessage[]; delta: BacklogDelta } {
  if (want <= 0 || !lanesInUse(sql)) return { messages: [], delta: { count: 0, bytes: 0 } };
  // A move lease that ran out (a redrive that stopped) gives its lane back first.
  expireLaneLeases(sql, now);
  const { where, args } = filterSql(now, filter);
  const candidates: LaneCandidate[] = [];
  for (let page = 0; candidates.length < want; page++) {
    const keys = sql
      .exec<{ key: string }>("SELECT key FROM lanes WHERE ready_at IS NOT NULL AND ready_at <= ? ORDER BY ready_at, key LIMIT ? OFFSET ?", now, LANES_PER_PAGE, page * LANES_PER_PAGE)
      .toArray();
    if (keys.length === 0) break;
    for (const { key } of keys) {
      if (candidates.length >= want) break;
      const from = blockedFrom(sql, key) ?? Number.MAX_SAFE_INTEGER;
      const stop = sql.exec<{ s: number | null }>("SELECT MIN(lseq) AS s FROM lane_messages WHERE key = ? AND (due_at > ? OR gen >= ?)", key, now, from).one().s ?? Number.MAX_SAFE_INTEGER;
      const rows = sql
        .exec<{ lseq: number; id: string; content_type: string; checksum: number; enqueued_at: number; sent_at: number; attempts: number; body: ArrayBuffer }>(
          `SELECT lseq, id, content_type, checksum, enqueued_at, sent_at, attempts, body FROM lane_messages WHERE key = ? AND lseq < ? AND ${where} ORDER BY lseq LIMIT ?`,
          key, stop, ...args, want - candidates.length,
        )
        .toArray();
      for (const r of rows) {
        candidates.push({ key, lseq: r.lseq, id: r.id, contentType: r.content_type as ContentType, checksum: r.checksum, enqueuedAt: r.enqueued_at, sentAt: r.sent_at, attempts: r.attempts, body: new Uint8Array(r.body) });
      }
    }
  }
  if (candidates.length === 0) return { messages: [], delta: { count: 0, bytes: 0 } };
  const { messages, delta } = takeLanes(sql, now, candidates, leaseMs);
  const lease = LANE_LEASE.exec(messages[0]?.leaseId ?? "")?.[2];
  if (lease) {
    liveMoveLeases(sql, now);
    moveLeases.set(sql, (moveLeases.get(sql) ?? new Set()).add(lease));
  }
  // takeLanes counts the delivery a consumer's lease is; a move's is none.
  return { messages: messages.map((m) => ({ ...m, attempts: m.attempts - 1 })), delta };
}

/** Keyed messages matching the filter, in any state: an operator's count. */
export function countMatchingLanes(sql: SqlStorage, now: number, filter: MessageFilter): number {
  if (!lanesInUse(sql)) return 0;
  const { where, args } = filterSql(now, filter);
  return sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM lane_messages WHERE ${where}`, ...args).one().n;
}

/** Lane messages a peek reads at most, as operations.ts's PEEK_SCAN bounds a segment peek: an operator's look stays cheap. */
const PEEK_SCAN = 1000;

/**
 * Up to `limit` keyed messages a consumer could be given now (their lane ready, not
 * leased, due), oldest first, with their bodies and keys, untouched: the peek's keyed part.
 * Looks among the oldest PEEK_SCAN only, so a shard whose oldest keys are all held may show none.
 */
export function peekLanes(sql: SqlStorage, now: number, limit: number): Array<MessageStatus & { body: Uint8Array; orderingKey: string }> {
  if (limit <= 0 || !lanesInUse(sql)) return [];
  const rows = sql
    .exec<{ id: string; key: string; content_type: string; checksum: number; enqueued_at: number; sent_at: number; due_at: number; attempts: number; body: ArrayBuffer }>(
      `SELECT m.id, m.key, m.content_type, m.checksum, m.enqueued_at, m.sent_at, m.due_at, m.attempts, m.body
       FROM (SELECT lseq FROM lane_messages ORDER BY lseq LIMIT ?) f JOIN lane_messages m ON m.lseq = f.lseq JOIN lanes l ON l.key = m.key
       WHERE l.ready_at IS NOT NULL AND l.ready_at <= ? AND m.leased = 0 AND m.due_at <= ? ORDER BY m.lseq LIMIT ?`,
      PEEK_SCAN, now, now, limit,
    )
    .toArray();
  return rows.flatMap((r) => {
    const body = new Uint8Array(r.body);
    // A body that no longer matches its checksum is never shown (a lease quarantines it).
    if (crc32(body) !== r.checksum) return [];
    return [{ id: r.id, state: "ready" as const, attempts: r.attempts, enqueuedAt: r.sent_at || r.enqueued_at, visibleAt: Math.max(r.due_at, r.enqueued_at), size: body.byteLength, contentType: r.content_type as ContentType, body, orderingKey: r.key }];
  });
}

/**
 * Gives lane leases back at once (a move that could not write its messages): the leased
 * messages are as they were, the lane ready at its head's due time, as if never leased.
 * A ref whose lease is no longer its lane's is left alone. Answers how many were given back.
 */
export function releaseLaneLeases(sql: SqlStorage, now: number, refs: readonly LeaseRef[]): number {
  let released = 0;
  const lanes = new Map<string, string>();
  for (const ref of refs) {
    const m = LANE_LEASE.exec(ref.leaseId);
    if (!m) continue;
    const row = sql.exec<{ key: string; id: string }>("SELECT key, id FROM lane_messages WHERE lseq = ? AND leased = 1", Number(m[1])).toArray()[0];
    if (!row || row.id !== ref.id) continue;
    const lease = sql.exec<{ lease: string | null }>("SELECT lease FROM lanes WHERE key = ?", row.key).toArray()[0]?.lease;
    if (!lease || lease !== m[2]) continue;
    sql.exec("UPDATE lane_messages SET leased = 0 WHERE lseq = ?", Number(m[1]));
    lanes.set(row.key, lease);
    released++;
  }
  for (const key of lanes.keys()) reopen(sql, now, key, null);
  for (const lease of lanes.values()) moveLeases.get(sql)?.delete(lease);
  return released;
}

/**
 * Deletes up to `limit` lane messages of any state, oldest first, and the lanes left empty;
 * the messages a move holds are left to it.
 */
export function purgeLanes(sql: SqlStorage, now: number, limit: number, ids?: string[]): { count: number; bytes: number; held: number } {
  const moving = liveMoveLeases(sql, now);
  const rows = sql
    .exec<{ lseq: number; key: string; id: string; size: number; leased: number }>(
      `SELECT lseq, key, id, length(body) AS size, leased FROM lane_messages m
       WHERE NOT (leased = 1 AND key IN (SELECT key FROM lanes WHERE lease IN (SELECT value FROM json_each(?)))) ORDER BY lseq LIMIT ?`,
      JSON.stringify(moving), limit,
    )
    .toArray();
  let bytes = 0;
  let held = 0;
  const keys = new Set<string>();
  for (const r of rows) {
    sql.exec("DELETE FROM lane_messages WHERE lseq = ?", r.lseq);
    keys.add(r.key);
    ids?.push(r.id);
    bytes += r.size;
    held += r.leased;
  }
  for (const key of keys) if (sql.exec("SELECT 1 FROM lane_messages WHERE key = ? LIMIT 1", key).toArray().length === 0) sql.exec("DELETE FROM lanes WHERE key = ?", key);
  return { count: rows.length, bytes, held };
}
