/**
 * The read side of a storage shard: leasing, settling and extending, as plain
 * functions over the shard's SQLite and its in-memory DeliveryState, so the Durable
 * Object stays a thin shell. Every function runs inside the caller's transactionSync.
 *
 * Two kinds of message (schema.ts). A fresh one (due_at NULL) is found by reading on
 * from the cursor in seq order and leased in memory: its first delivery writes nothing
 * until it is acked (one delete) or fails (one update, after which it is scheduled).
 * A scheduled one is found through the partial index on due_at and leased as QuiCK
 * does (section 5): the lease is a vesting time, due_at moves forward and a lease id is
 * stored; an expired lease simply makes it ready again. Either way nothing is removed
 * until an ack names the current lease, and an ack or retry under a lease someone else
 * has taken since does nothing.
 */
import { crc32 } from "../src/kernel/checksum";
import { randomHex } from "../src/kernel/ids";
import { DeliveryState } from "./delivery-state";
import { copyKey, timestampOf, type MessageRow } from "./schema";
import type { LeasedMessage, LeaseRef, LeaseRequest, LeaseResult, SettleRequest, SettleResult } from "../src/kernel/protocol";

/** How many expired messages one lease call deletes at most: bounded work per visit. */
const EXPIRE_PER_CALL = 500;
/** Rows one lease call reads past the cursor at most, beyond the batch it wants. */
const SCAN_SLACK = 1000;

export interface BacklogDelta {
  count: number;
  bytes: number;
}

export type ReadyRow = Omit<MessageRow, "lease_id">;
const READY_COLUMNS = "seq, id, size, enqueued_at, due_at, attempts, checksum, content_type, body, nonce, sent_at";

export function expireOld(sql: SqlStorage, ds: DeliveryState, now: number, retentionMs: number): BacklogDelta {
  const cutoff = now - retentionMs;
  // Rows are in arrival order, so the expired ones are a prefix: look at the first before reading more.
  const first = sql.exec<{ enqueued_at: number }>("SELECT enqueued_at FROM messages ORDER BY seq LIMIT 1").toArray()[0];
  if (!first || first.enqueued_at >= cutoff) return { count: 0, bytes: 0 };
  const rows = sql
    .exec<{ seq: number; size: number; enqueued_at: number }>("SELECT seq, size, enqueued_at FROM messages ORDER BY seq LIMIT ?", EXPIRE_PER_CALL)
    .toArray();
  let count = 0;
  let bytes = 0;
  for (const r of rows) {
    if (r.enqueued_at >= cutoff) break;
    sql.exec("DELETE FROM messages WHERE seq = ?", r.seq);
    ds.leases.delete(r.seq);
    count++;
    bytes += r.size;
  }
  ds.bump("expired", count);
  return { count: -count, bytes: -bytes };
}

/**
 * Messages under a lease that has not run out: in memory, and stored (a stored lease
 * keeps its lease id after it runs out, for a late ack, so only those still due later
 * count). The running count a shard keeps between heartbeats only grows when a lease
 * runs out or a stale ack is refused; this is the truth it is reset to.
 */
export function leasedCount(sql: SqlStorage, ds: DeliveryState, now: number): number {
  const stored = sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM messages WHERE lease_id IS NOT NULL AND due_at > ?", now).one().n;
  return ds.liveLeases(now) + stored;
}

/** Memory leases that ran out become failed deliveries: counted, scheduled, ready now. */
export function expireLeases(sql: SqlStorage, ds: DeliveryState, now: number): void {
  for (const [seq, l] of ds.takeExpired(now)) {
    // The lease id stays on the row, so a late ack under it still counts until someone else leases it.
    sql.exec("UPDATE messages SET attempts = attempts + 1, due_at = ?, lease_id = ? WHERE seq = ? AND id = ?", now, l.lease, seq, l.id);
  }
}

export function lease(sql: SqlStorage, ds: DeliveryState, now: number, req: LeaseRequest): { result: Omit<LeaseResult, "backlog">; delta: BacklogDelta } {
  expireLeases(sql, ds, now);
  const scheduled = sql
    .exec(`SELECT ${READY_COLUMNS} FROM messages WHERE due_at IS NOT NULL AND due_at <= ? ORDER BY due_at LIMIT ?`, now, req.limit)
    .toArray() as unknown as ReadyRow[];
  const fresh = readFresh(sql, ds, req.limit - scheduled.length);

  // A partial batch waits until its oldest message has waited maxWaitMs.
  const count = scheduled.length + fresh.rows.length;
  const oldestReady = Math.min(...scheduled.map((r) => r.due_at!), ...fresh.rows.map((r) => r.enqueued_at));
  if (count > 0 && count < req.limit && !fresh.truncated && oldestReady + req.maxWaitMs > now) {
    return { result: { messages: [], waitUntil: oldestReady + req.maxWaitMs, more: false, nextVisibleAt: nextVisible(sql, ds, now) }, delta: { count: 0, bytes: 0 } };
  }

  const stored = leaseStored(sql, ds, scheduled, now, req.leaseMs, true);
  const held = leaseInMemory(sql, ds, fresh.rows, now, req.leaseMs);
  ds.cursor = Math.max(ds.cursor, fresh.lastSeq);
  const messages = [...stored.messages, ...held.messages];
  ds.bump("leased", messages.length);
  return {
    result: { messages, waitUntil: null, more: count === req.limit || fresh.truncated, nextVisibleAt: nextVisible(sql, ds, now) },
    delta: { count: stored.delta.count + held.delta.count, bytes: stored.delta.bytes + held.delta.bytes },
  };
}

/**
 * Up to `want` fresh rows after the cursor, in arrival order, skipping scheduled ones
 * (the index finds those). `lastSeq` is the last row looked at: the cursor may move
 * there once these are leased. `truncated` when the scan stopped at its bound.
 */
function readFresh(sql: SqlStorage, ds: DeliveryState, want: number): { rows: ReadyRow[]; lastSeq: number; truncated: boolean } {
  const rows: ReadyRow[] = [];
  let lastSeq = ds.cursor;
  let budget = want + SCAN_SLACK;
  while (rows.length < want && budget > 0) {
    const chunk = sql
      .exec(`SELECT ${READY_COLUMNS} FROM messages WHERE seq > ? ORDER BY seq LIMIT ?`, lastSeq, Math.min(budget, want - rows.length + 16))
      .toArray() as unknown as ReadyRow[];
    for (const r of chunk) {
      lastSeq = r.seq;
      budget--;
      if (r.due_at === null && !ds.leases.has(r.seq)) rows.push(r);
      if (rows.length === want) break;
    }
    if (chunk.length === 0) return { rows, lastSeq, truncated: false };
  }
  return { rows, lastSeq, truncated: rows.length < want };
}

/** Leases fresh rows in memory: nothing is written unless a body fails its checksum. */
function leaseInMemory(sql: SqlStorage, ds: DeliveryState, rows: ReadyRow[], now: number, leaseMs: number): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const lease = randomHex(12);
  const messages: LeasedMessage[] = [];
  const bad = new Quarantine(sql, ds, now);
  for (const r of rows) {
    const body = new Uint8Array(r.body);
    if (!bad.checked(r, body)) continue;
    ds.hold(r.seq, { id: r.id, lease, until: now + leaseMs });
    messages.push({ id: r.id, body, contentType: r.content_type, enqueuedAt: timestampOf(r), attempts: r.attempts + 1, leaseId: DeliveryState.leaseId(r.seq, lease), copyKey: copyKey(r.seq, r.nonce) });
  }
  return { messages, delta: bad.delta() };
}

/**
 * Leases rows under one new stored lease: due_at moves forward and the lease id is
 * written; with `countAttempt` the delivery is counted. Fresh rows leased this way (a
 * redrive) become scheduled. A body whose checksum fails is never handed out: it
 * moves to the quarantine table and is counted there.
 */
export function leaseStored(
  sql: SqlStorage,
  ds: DeliveryState,
  rows: Array<Omit<ReadyRow, "due_at">>,
  now: number,
  leaseMs: number,
  countAttempt: boolean,
): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const lease = randomHex(12);
  const messages: LeasedMessage[] = [];
  const bad = new Quarantine(sql, ds, now);
  const add = countAttempt ? 1 : 0;
  for (const r of rows) {
    const body = new Uint8Array(r.body);
    if (!bad.checked(r, body)) continue;
    sql.exec("UPDATE messages SET due_at = ?, lease_id = ?, attempts = attempts + ? WHERE seq = ?", now + leaseMs, lease, add, r.seq);
    messages.push({ id: r.id, body, contentType: r.content_type, enqueuedAt: timestampOf(r), attempts: r.attempts + add, leaseId: DeliveryState.leaseId(r.seq, lease), copyKey: copyKey(r.seq, r.nonce) });
  }
  return { messages, delta: bad.delta() };
}

/** Moves rows whose body no longer matches its checksum out of the queue, counting them. */
class Quarantine {
  private count = 0;
  private bytes = 0;
  constructor(private readonly sql: SqlStorage, private readonly ds: DeliveryState, private readonly now: number) {}

  checked(r: { seq: number; id: string; size: number; checksum: number; body: ArrayBuffer }, body: Uint8Array): boolean {
    if (crc32(body) === r.checksum) return true;
    this.sql.exec("INSERT OR REPLACE INTO quarantine (id, body, checksum, reason, detected_at) VALUES (?, ?, ?, 'checksum mismatch', ?)", r.id, r.body, r.checksum, this.now);
    this.sql.exec("DELETE FROM messages WHERE seq = ?", r.seq);
    this.ds.leases.delete(r.seq);
    this.count++;
    this.bytes += r.size;
    return false;
  }

  delta(): BacklogDelta {
    this.ds.bump("quarantined", this.count);
    return { count: -this.count, bytes: -this.bytes };
  }
}

/** A reference resolved against this shard: the row it names and whether the lease is held in memory. */
interface Resolved {
  seq: number;
  id: string;
  lease: string;
  inMemory: boolean;
}

/**
 * Which lease a reference names, or null when it cannot be current: a malformed lease
 * id, or a row someone else now holds in memory. A stored lease is checked by the
 * statement that acts on it.
 */
function resolve(ds: DeliveryState, ref: LeaseRef): Resolved | null {
  const p = DeliveryState.parseLeaseId(ref.leaseId);
  if (!p) return null;
  if (ds.held(p.seq, ref.id, p.lease)) return { seq: p.seq, id: ref.id, lease: p.lease, inMemory: true };
  if (ds.leases.has(p.seq)) return null;
  return { seq: p.seq, id: ref.id, lease: p.lease, inMemory: false };
}

// A stored lease matches its lease id; a fresh row nobody holds in memory had its memory
// lease lost to a restart, and the late ack or retry for it still counts.
const STORED_OR_LOST = "(lease_id = ? OR (due_at IS NULL AND lease_id IS NULL))";

export function settle(sql: SqlStorage, ds: DeliveryState, now: number, req: SettleRequest): { result: SettleResult; delta: BacklogDelta } {
  const stale: string[] = [];
  let count = 0;
  let bytes = 0;
  const remove = (refs: LeaseRef[]): number => {
    let n = 0;
    for (const ref of refs) {
      const r = resolve(ds, ref);
      const gone = r
        ? r.inMemory
          ? sql.exec<{ size: number }>("DELETE FROM messages WHERE seq = ? AND id = ? RETURNING size", r.seq, r.id).toArray()[0]
          : sql.exec<{ size: number }>(`DELETE FROM messages WHERE seq = ? AND id = ? AND ${STORED_OR_LOST} RETURNING size`, r.seq, r.id, r.lease).toArray()[0]
        : undefined;
      if (!gone) {
        stale.push(ref.id);
        continue;
      }
      if (r!.inMemory) ds.leases.delete(r!.seq);
      n++;
      count++;
      bytes += gone.size;
    }
    return n;
  };
  const acked = remove(req.acks);
  const deadLettered = remove(req.deadLettered);
  const dropped = remove(req.dropped);
  let retried = 0;
  for (const ref of req.retries) {
    const r = resolve(ds, ref);
    // A failed delivery of a fresh message is counted now (a stored lease counted it when it was taken).
    const hit = r
      ? r.inMemory
        ? sql.exec("UPDATE messages SET attempts = attempts + 1, due_at = ?, lease_id = NULL WHERE seq = ? AND id = ? RETURNING seq", now + ref.delayMs, r.seq, r.id).toArray().length
        : sql
            .exec(`UPDATE messages SET attempts = attempts + (due_at IS NULL), due_at = ?, lease_id = NULL WHERE seq = ? AND id = ? AND ${STORED_OR_LOST} RETURNING seq`, now + ref.delayMs, r.seq, r.id, r.lease)
            .toArray().length
      : 0;
    if (hit) {
      if (r!.inMemory) ds.leases.delete(r!.seq);
      retried++;
    } else stale.push(ref.id);
  }
  ds.bump("acked", acked);
  ds.bump("dead_lettered", deadLettered);
  ds.bump("dropped", dropped);
  ds.bump("retried", retried);
  return { result: { acked, retried, deadLettered, dropped, stale }, delta: { count: -count, bytes: -bytes } };
}

/** Moves the vesting time of still-held leases forward; returns the ids it extended. */
export function extend(sql: SqlStorage, ds: DeliveryState, now: number, refs: LeaseRef[], leaseMs: number): string[] {
  const extended: string[] = [];
  for (const ref of refs) {
    const r = resolve(ds, ref);
    if (!r) continue;
    if (r.inMemory) ds.extend(r.seq, now + leaseMs);
    else if (!sql.exec("UPDATE messages SET due_at = ? WHERE seq = ? AND id = ? AND lease_id = ? RETURNING seq", now + leaseMs, r.seq, r.id, r.lease).toArray().length) continue;
    extended.push(ref.id);
  }
  return extended;
}

/** The messages still held under the given leases, bodies checked (for a dead-letter move). */
export function readLeased(sql: SqlStorage, ds: DeliveryState, refs: LeaseRef[]): LeasedMessage[] {
  const out: LeasedMessage[] = [];
  for (const ref of refs) {
    const r = resolve(ds, ref);
    if (!r) continue;
    const row = sql
      .exec(`SELECT id, body, content_type, enqueued_at, attempts, checksum, nonce, sent_at FROM messages WHERE seq = ? AND id = ?${r.inMemory ? "" : " AND lease_id = ?"}`, r.seq, r.id, ...(r.inMemory ? [] : [r.lease]))
      .toArray()[0] as unknown as Pick<MessageRow, "id" | "body" | "content_type" | "enqueued_at" | "attempts" | "checksum" | "nonce" | "sent_at"> | undefined;
    if (!row) continue;
    const body = new Uint8Array(row.body);
    if (crc32(body) !== row.checksum) continue;
    // A memory lease's delivery is not in the row yet: count it as the consumer saw it.
    out.push({ id: row.id, body, contentType: row.content_type, enqueuedAt: timestampOf(row), attempts: row.attempts + (r.inMemory ? 1 : 0), leaseId: ref.leaseId, copyKey: copyKey(r.seq, row.nonce) });
  }
  return out;
}

/** When something not ready now becomes ready: a scheduled message or a memory lease running out. */
function nextVisible(sql: SqlStorage, ds: DeliveryState, now: number): number | null {
  const row = sql.exec<{ t: number | null }>("SELECT MIN(due_at) AS t FROM messages WHERE due_at IS NOT NULL AND due_at > ?", now).one();
  const lease = ds.earliestExpiry();
  if (row.t === null) return lease;
  return lease === null ? row.t : Math.min(row.t, lease);
}
