/**
 * Operations on a queue's stored messages that are not delivery: purge, look up and
 * cancel one message by id, and the filtered leases a dead-letter redrive moves
 * messages under. Plain functions over the shard's SQLite, like delivery.ts; every
 * function runs inside the caller's transactionSync, and each one that deletes rows
 * returns the backlog delta so the counters follow the rows in the same transaction.
 */
import type { LeasedMessage, LeaseRef, MessageFilter, MessageStatus } from "../src/protocol";
import { bump, leaseRows, type BacklogDelta } from "./delivery";
import type { MessageRow } from "./schema";

/**
 * Rows one purge call deletes at most. A single DELETE over a large backlog would hold
 * the object (and its output gate) for as long as it runs; bounded calls let sends,
 * leases and heartbeats in between.
 */
export const PURGE_PER_CALL = 5000;
/** A redrive batch: the most a filtered lease takes at once. */
export const MAX_MATCHING_LEASE = 100;

/** Deleted rows: how many, their bytes, and how many were held under a live lease. */
interface Removed {
  count: number;
  bytes: number;
  held: number;
}

export function purgeSome(sql: SqlStorage, now: number, limit: number): Removed & { more: boolean; delta: BacklogDelta } {
  const n = Math.max(1, Math.min(PURGE_PER_CALL, Math.floor(limit)));
  // Oldest first by seq (the rowid): each call walks the primary key, never the whole table.
  const rows = sql
    .exec<{ size: number; held: number }>(
      `DELETE FROM messages WHERE seq IN (SELECT seq FROM messages ORDER BY seq LIMIT ?)
       RETURNING size, (lease_id IS NOT NULL AND visible_at > ?) AS held`,
      n,
      now,
    )
    .toArray();
  const removed = tally(rows);
  if (removed.count) bump(sql, "purged", removed.count);
  const more = sql.exec("SELECT 1 FROM messages LIMIT 1").toArray().length > 0;
  return { ...removed, more, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/** One message by id (the unique index), without its body; null when this shard does not hold it. */
export function findMessage(sql: SqlStorage, now: number, id: string): MessageStatus | null {
  const r = sql
    .exec("SELECT id, content_type, size, enqueued_at, visible_at, attempts, lease_id FROM messages WHERE id = ?", id)
    .toArray()[0] as unknown as Omit<MessageRow, "seq" | "body" | "checksum"> | undefined;
  if (!r) return null;
  // An expired lease is no lease: delivery.ts leases by visible_at alone, so the message is ready.
  const state = r.visible_at <= now ? "ready" : r.lease_id !== null ? "leased" : "delayed";
  return { id: r.id, state, attempts: r.attempts, enqueuedAt: r.enqueued_at, visibleAt: r.visible_at, size: r.size, contentType: r.content_type };
}

/** Deletes one message whatever its state; a consumer's later ack for it finds nothing (stale). */
export function cancelMessage(sql: SqlStorage, now: number, id: string): Removed & { delta: BacklogDelta } {
  const rows = sql
    .exec<{ size: number; held: number }>("DELETE FROM messages WHERE id = ? RETURNING size, (lease_id IS NOT NULL AND visible_at > ?) AS held", id, now)
    .toArray();
  const removed = tally(rows);
  if (removed.count) bump(sql, "cancelled", removed.count);
  return { ...removed, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/**
 * Leases up to `limit` ready messages that match the filter, oldest first, for a
 * redrive. The same vesting-time lease as delivery.ts (visible_at forward, a lease id
 * that a settle must present), so the move is: lease, write to the target, ack here;
 * a crash in between leaves the message here to be moved again. Unlike a delivery it
 * does not count an attempt: the attempts stored are what a redrive filters on.
 */
export function leaseMatching(sql: SqlStorage, now: number, filter: MessageFilter, limit: number, leaseMs: number): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const m = matching(now, filter);
  const rows = sql
    .exec(
      `SELECT seq, id, body, content_type, size, enqueued_at, attempts, checksum FROM messages
       WHERE visible_at <= ? AND ${m.where} ORDER BY seq LIMIT ?`,
      now,
      ...m.args,
      Math.max(1, Math.min(MAX_MATCHING_LEASE, Math.floor(limit))),
    )
    .toArray() as unknown as Array<Omit<MessageRow, "visible_at" | "lease_id">>;
  return leaseRows(sql, rows, now, leaseMs, false);
}

/** Gives leased messages back at once (a redrive whose write failed), counting nothing. */
export function releaseLeases(sql: SqlStorage, now: number, refs: LeaseRef[]): number {
  let released = 0;
  for (const ref of refs) {
    released += sql.exec("UPDATE messages SET visible_at = ?, lease_id = NULL WHERE id = ? AND lease_id = ? RETURNING seq", now, ref.id, ref.leaseId).toArray().length;
  }
  return released;
}

/** Messages matching the filter in any state (leased and delayed ones too). */
export function countMatching(sql: SqlStorage, now: number, filter: MessageFilter): number {
  const m = matching(now, filter);
  return sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM messages WHERE ${m.where}`, ...m.args).one().n;
}

/** The filter as SQL; ages are measured on this shard's clock, the one that stamped enqueued_at. */
function matching(now: number, f: MessageFilter): { where: string; args: number[] } {
  const parts: string[] = [];
  const args: number[] = [];
  const add = (cond: string, value: number | undefined) => {
    if (value === undefined) return;
    parts.push(cond);
    args.push(value);
  };
  add("enqueued_at <= ?", f.minAgeMs === undefined ? undefined : now - f.minAgeMs);
  add("enqueued_at >= ?", f.maxAgeMs === undefined ? undefined : now - f.maxAgeMs);
  add("attempts >= ?", f.minAttempts);
  add("attempts <= ?", f.maxAttempts);
  return { where: parts.length ? parts.join(" AND ") : "1", args };
}

function tally(rows: Array<{ size: number; held: number }>): Removed {
  let bytes = 0;
  let held = 0;
  for (const r of rows) {
    bytes += r.size;
    held += r.held ? 1 : 0;
  }
  return { count: rows.length, bytes, held };
}
