/**
 * The read side of a storage shard: leasing, settling and extending, as plain
 * functions over the shard's SQLite so the Durable Object stays a thin shell.
 * Every function runs inside the caller's transactionSync.
 *
 * QuiCK (section 5): a lease is a vesting time. Leasing moves `visible_at` forward and
 * stamps a lease id; nothing is removed until an ack carrying that lease id arrives.
 * An expired lease simply makes the message visible again; a late ack or retry for a
 * message someone else has leased since does nothing (the lease id no longer matches).
 */
import { crc32 } from "../src/checksum";
import { randomHex } from "../src/ids";
import type { MessageRow } from "./schema";
import type { LeasedMessage, LeaseRef, LeaseRequest, LeaseResult, SettleRequest, SettleResult } from "../src/protocol";

/** How many expired messages one lease call deletes at most: bounded work per visit. */
const EXPIRE_PER_CALL = 500;

export interface BacklogDelta {
  count: number;
  bytes: number;
}

type ReadyRow = Omit<MessageRow, "lease_id">;

export function expireOld(sql: SqlStorage, now: number, retentionMs: number): BacklogDelta {
  const cutoff = now - retentionMs;
  // Rows are in arrival order, so the expired ones are a prefix: no index needed.
  const rows = sql
    .exec("SELECT seq, size, enqueued_at FROM messages ORDER BY seq LIMIT ?", EXPIRE_PER_CALL)
    .toArray() as unknown as Array<{ seq: number; size: number; enqueued_at: number }>;
  let count = 0;
  let bytes = 0;
  for (const r of rows) {
    if (r.enqueued_at >= cutoff) break;
    sql.exec("DELETE FROM messages WHERE seq = ?", r.seq);
    count++;
    bytes += r.size;
  }
  if (count) bump(sql, "expired", count);
  return { count: -count, bytes: -bytes };
}

export function lease(sql: SqlStorage, now: number, req: LeaseRequest): { result: LeaseResult; delta: BacklogDelta } {
  const rows = sql
    .exec(
      `SELECT seq, id, body, content_type, size, enqueued_at, visible_at, attempts, checksum
       FROM messages WHERE visible_at <= ? ORDER BY visible_at, seq LIMIT ?`,
      now,
      req.limit,
    )
    .toArray() as unknown as ReadyRow[];

  // A partial batch waits until its oldest message has waited maxWaitMs.
  const oldestReady = rows[0]?.visible_at;
  if (rows.length > 0 && rows.length < req.limit && oldestReady! + req.maxWaitMs > now) {
    return { result: { messages: [], waitUntil: oldestReady! + req.maxWaitMs, more: false, nextVisibleAt: nextVisible(sql, now), backlogCount: 0 }, delta: { count: 0, bytes: 0 } };
  }

  const { messages, delta } = leaseRows(sql, rows, now, req.leaseMs, true);
  if (messages.length) bump(sql, "leased", messages.length);
  return {
    result: { messages, waitUntil: null, more: rows.length === req.limit, nextVisibleAt: nextVisible(sql, now), backlogCount: 0 },
    delta,
  };
}

/**
 * Leases the given rows under one new lease id: visible_at moves forward, and with
 * `countAttempt` the delivery is counted. A body whose checksum fails is never handed
 * out: it moves to the quarantine table and is counted there.
 */
export function leaseRows(
  sql: SqlStorage,
  rows: Array<Omit<MessageRow, "visible_at" | "lease_id">>,
  now: number,
  leaseMs: number,
  countAttempt: boolean,
): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const leaseId = randomHex(12);
  const messages: LeasedMessage[] = [];
  let quarantined = 0;
  let quarantinedBytes = 0;
  const add = countAttempt ? 1 : 0;
  for (const r of rows) {
    const body = new Uint8Array(r.body);
    if (crc32(body) !== r.checksum) {
      sql.exec("INSERT OR REPLACE INTO quarantine (id, body, checksum, reason, detected_at) VALUES (?, ?, ?, 'checksum mismatch', ?)", r.id, r.body, r.checksum, now);
      sql.exec("DELETE FROM messages WHERE seq = ?", r.seq);
      quarantined++;
      quarantinedBytes += r.size;
      continue;
    }
    sql.exec("UPDATE messages SET visible_at = ?, lease_id = ?, attempts = attempts + ? WHERE seq = ?", now + leaseMs, leaseId, add, r.seq);
    messages.push({ id: r.id, body, contentType: r.content_type, enqueuedAt: r.enqueued_at, attempts: r.attempts + add, leaseId });
  }
  if (quarantined) bump(sql, "quarantined", quarantined);
  return { messages, delta: { count: -quarantined, bytes: -quarantinedBytes } };
}

export function settle(sql: SqlStorage, now: number, req: SettleRequest): { result: SettleResult; delta: BacklogDelta } {
  const stale: string[] = [];
  let count = 0;
  let bytes = 0;
  const remove = (refs: LeaseRef[], counter: string): number => {
    let n = 0;
    for (const ref of refs) {
      const gone = sql.exec<{ size: number }>("DELETE FROM messages WHERE id = ? AND lease_id = ? RETURNING size", ref.id, ref.leaseId).toArray()[0];
      if (!gone) {
        stale.push(ref.id);
        continue;
      }
      n++;
      count++;
      bytes += gone.size;
    }
    if (n) bump(sql, counter, n);
    return n;
  };
  const acked = remove(req.acks, "acked");
  const deadLettered = remove(req.deadLettered, "dead_lettered");
  const dropped = remove(req.dropped, "dropped");
  let retried = 0;
  for (const r of req.retries) {
    const hit = sql
      .exec("UPDATE messages SET visible_at = ?, lease_id = NULL WHERE id = ? AND lease_id = ? RETURNING seq", now + r.delayMs, r.id, r.leaseId)
      .toArray().length;
    if (hit) retried++;
    else stale.push(r.id);
  }
  if (retried) bump(sql, "retried", retried);
  return { result: { acked, retried, deadLettered, dropped, stale }, delta: { count: -count, bytes: -bytes } };
}

/** Moves the vesting time of still-held leases forward; returns the ids it extended. */
export function extend(sql: SqlStorage, now: number, refs: LeaseRef[], leaseMs: number): string[] {
  const extended: string[] = [];
  for (const ref of refs) {
    const hit = sql.exec("UPDATE messages SET visible_at = ? WHERE id = ? AND lease_id = ? RETURNING seq", now + leaseMs, ref.id, ref.leaseId).toArray().length;
    if (hit) extended.push(ref.id);
  }
  return extended;
}

/** The messages still held under the given leases, bodies checked (for a dead-letter move). */
export function readLeased(sql: SqlStorage, refs: LeaseRef[]): LeasedMessage[] {
  const out: LeasedMessage[] = [];
  for (const ref of refs) {
    const r = sql
      .exec("SELECT id, body, content_type, enqueued_at, attempts, checksum FROM messages WHERE id = ? AND lease_id = ?", ref.id, ref.leaseId)
      .toArray()[0] as unknown as (Omit<ReadyRow, "seq" | "size" | "visible_at">) | undefined;
    if (!r) continue;
    const body = new Uint8Array(r.body);
    if (crc32(body) !== r.checksum) continue;
    out.push({ id: r.id, body, contentType: r.content_type, enqueuedAt: r.enqueued_at, attempts: r.attempts, leaseId: ref.leaseId });
  }
  return out;
}

function nextVisible(sql: SqlStorage, now: number): number | null {
  const row = sql.exec<{ t: number | null }>("SELECT MIN(visible_at) AS t FROM messages WHERE visible_at > ?", now).one();
  return row.t;
}

const COUNTERS = new Set(["leased", "acked", "retried", "dead_lettered", "dropped", "expired", "quarantined", "purged", "cancelled"]);

/** Adds to one of the shard's running totals (a column of `counters`). */
export function bump(sql: SqlStorage, counter: string, n: number): void {
  if (!COUNTERS.has(counter)) throw new Error(`unknown counter ${counter}`);
  sql.exec(`UPDATE counters SET ${counter} = ${counter} + ?`, n);
}
