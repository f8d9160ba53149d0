/**
 * Operations on a queue's stored messages that are not delivery: purge, look up and
 * cancel one message by id, and the filtered leases a dead-letter redrive moves
 * messages under. Plain functions over the shard's SQLite, like delivery.ts; every
 * function runs inside the caller's transactionSync, and each one that deletes rows
 * returns the backlog delta for the shard's in-memory figures. Looking a message up
 * by id reads the table (no index on id: fresh messages cost two row writes, see
 * schema.ts), which is fine for an operator's call and never on the delivery path.
 */
import { crc32 } from "../src/kernel/checksum";
import type { LeasedMessage, LeaseRef, MessageFilter, MessageStatus } from "../src/kernel/protocol";
import { leaseStored, type BacklogDelta, type ReadyRow } from "./delivery";
import { DeliveryState } from "./delivery-state";
import { timestampOf, type MessageRow } from "./schema";
import { MAX_MATCHING_LEASE, PURGE_PER_CALL } from "../src/kernel/limits";


/** Deleted rows: how many, their bytes, and how many were held under a live lease. */
interface Removed {
  count: number;
  bytes: number;
  held: number;
}

export function purgeSome(sql: SqlStorage, ds: DeliveryState, now: number, limit: number): Removed & { more: boolean; delta: BacklogDelta } {
  const n = Math.max(1, Math.min(PURGE_PER_CALL, Math.floor(limit)));
  // Oldest first by seq (the rowid): each call walks the primary key, never the whole table.
  const rows = sql
    .exec<RemovedRow>(`DELETE FROM messages WHERE seq IN (SELECT seq FROM messages ORDER BY seq LIMIT ?) RETURNING ${REMOVED_COLUMNS}`, n)
    .toArray();
  const removed = tally(ds, now, rows);
  ds.bump("purged", removed.count);
  const more = sql.exec("SELECT 1 FROM messages LIMIT 1").toArray().length > 0;
  return { ...removed, more, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/** One message by id, without its body; null when this shard does not hold it. */
export function findMessage(sql: SqlStorage, ds: DeliveryState, now: number, id: string): MessageStatus | null {
  const r = sql
    .exec("SELECT seq, id, content_type, size, enqueued_at, due_at, attempts, lease_id, sent_at FROM messages WHERE id = ?", id)
    .toArray()[0] as unknown as Omit<MessageRow, "body" | "checksum"> | undefined;
  if (!r) return null;
  const held = ds.leases.get(r.seq);
  const base = { id: r.id, enqueuedAt: timestampOf(r), size: r.size, contentType: r.content_type };
  // A memory lease's delivery is counted in the row only once it fails.
  if (held?.id === r.id) return { ...base, state: "leased", attempts: r.attempts + 1, visibleAt: held.until };
  const due = r.due_at ?? r.enqueued_at;
  // An expired lease is no lease: the message is ready.
  const state = due <= now ? "ready" : r.lease_id !== null ? "leased" : "delayed";
  return { ...base, state, attempts: r.attempts, visibleAt: due };
}

/** Rows a peek reads at most, whatever it finds among them: an operator's look stays cheap. */
const PEEK_SCAN = 1000;

/**
 * Up to `limit` ready messages, oldest first, with their bodies, leaving them as they
 * are (no lease, no attempt): what the dashboard shows as "ready". Reads at most
 * PEEK_SCAN rows, so a shard whose oldest rows are all leased or delayed may show none.
 * The scan reads no body: only the rows shown have theirs read, one by one. Reading
 * every scanned row's body cost up to PEEK_SCAN x 128 KB per shard for a peek of one
 * message, so a peek of 10 cost as much as one of 100.
 */
export function peekReady(sql: SqlStorage, ds: DeliveryState, now: number, limit: number): Array<MessageStatus & { body: Uint8Array }> {
  const rows = sql
    .exec("SELECT seq, id, content_type, size, enqueued_at, due_at, attempts, checksum, sent_at FROM messages ORDER BY seq LIMIT ?", PEEK_SCAN)
    .toArray() as unknown as Array<Omit<MessageRow, "lease_id" | "body">>;
  const out: Array<MessageStatus & { body: Uint8Array }> = [];
  for (const r of rows) {
    if (out.length >= limit) break;
    const held = ds.leases.get(r.seq);
    if (held?.id === r.id && held.until > now) continue;
    const due = r.due_at ?? r.enqueued_at;
    if (due > now) continue;
    const stored = sql.exec<{ body: ArrayBuffer }>("SELECT body FROM messages WHERE seq = ?", r.seq).toArray()[0];
    if (!stored) continue;
    const body = new Uint8Array(stored.body);
    // A body that no longer matches its checksum is never shown (delivery quarantines it).
    if (crc32(body) !== r.checksum) continue;
    out.push({ id: r.id, state: "ready", attempts: r.attempts, enqueuedAt: timestampOf(r), visibleAt: due, size: r.size, contentType: r.content_type, body });
  }
  return out;
}

/** Deletes one message whatever its state; a consumer's later ack for it finds nothing (stale). */
export function cancelMessage(sql: SqlStorage, ds: DeliveryState, now: number, id: string): Removed & { delta: BacklogDelta } {
  const rows = sql.exec<RemovedRow>(`DELETE FROM messages WHERE id = ? RETURNING ${REMOVED_COLUMNS}`, id).toArray();
  const removed = tally(ds, now, rows);
  ds.bump("cancelled", removed.count);
  return { ...removed, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/**
 * Leases up to `limit` ready messages that match the filter, oldest first, for a
 * redrive. A stored lease as delivery.ts takes for scheduled messages (due_at forward,
 * a lease id that a settle must present), so the move is: lease, write to the target,
 * ack here; a crash in between leaves the message here to be moved again. Unlike a
 * delivery it does not count an attempt: the attempts stored are what a redrive filters on.
 */
export function leaseMatching(sql: SqlStorage, ds: DeliveryState, now: number, filter: MessageFilter, limit: number, leaseMs: number): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const m = matching(now, filter);
  const want = Math.max(1, Math.min(MAX_MATCHING_LEASE, Math.floor(limit)));
  const rows: ReadyRow[] = [];
  // Rows held in memory are not ready; read on past them.
  for (let after = 0; rows.length < want; ) {
    const chunk = sql
      .exec(
        `SELECT seq, id, size, enqueued_at, due_at, attempts, checksum, content_type, body, nonce, sent_at FROM messages
         WHERE seq > ? AND (due_at IS NULL OR due_at <= ?) AND ${m.where} ORDER BY seq LIMIT ?`,
        after,
        now,
        ...m.args,
        want,
      )
      .toArray() as unknown as ReadyRow[];
    for (const r of chunk) if (rows.length < want && !ds.leases.has(r.seq)) rows.push(r);
    if (chunk.length < want) break;
    after = chunk[chunk.length - 1]!.seq;
  }
  return leaseStored(sql, ds, rows, now, leaseMs, false);
}

/** Gives leased messages back at once (a redrive whose write failed), counting nothing. */
export function releaseLeases(sql: SqlStorage, ds: DeliveryState, now: number, refs: LeaseRef[]): number {
  let released = 0;
  for (const ref of refs) {
    const p = DeliveryState.parseLeaseId(ref.leaseId);
    if (!p) continue;
    if (ds.held(p.seq, ref.id, p.lease)) {
      // Behind the cursor now, so it is scheduled (ready at once) to be found again.
      ds.leases.delete(p.seq);
      released += sql.exec("UPDATE messages SET due_at = ?, lease_id = NULL WHERE seq = ? AND id = ? RETURNING seq", now, p.seq, ref.id).toArray().length;
    } else if (!ds.leases.has(p.seq)) {
      released += sql.exec("UPDATE messages SET due_at = ?, lease_id = NULL WHERE seq = ? AND id = ? AND lease_id = ? RETURNING seq", now, p.seq, ref.id, p.lease).toArray().length;
    }
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

const REMOVED_COLUMNS = "seq, size, due_at, lease_id";
type RemovedRow = Pick<MessageRow, "seq" | "size" | "due_at" | "lease_id">;

/** Counts removed rows, and those held under a live lease (in memory or stored), which it lets go. */
function tally(ds: DeliveryState, now: number, rows: RemovedRow[]): Removed {
  let bytes = 0;
  let held = 0;
  for (const r of rows) {
    bytes += r.size;
    if (ds.leases.delete(r.seq) || (r.lease_id !== null && r.due_at !== null && r.due_at > now)) held++;
  }
  return { count: rows.length, bytes, held };
}
