/**
 * Operations on ordered lanes that are not delivery (lanes.ts is): retention, purge,
 * lookup and cancel by id, the counts heartbeats report, the keys held back as operators
 * see them, and an operator's release of a held key. Each runs inside the caller's
 * transactionSync; those that remove messages return what they removed for the shard's
 * in-memory figures.
 */
import { randomHex } from "../src/kernel/ids";
import type { ContentType, HoldReason, LaneFigures, LeasedMessage, MessageStatus } from "../src/kernel/protocol";
import { blockedFrom, copyOfLane, laneLeaseTaken, laneOfId, reopen, UPTO, type BacklogDelta, type Lane, type Row } from "./lanes";

/** Deletes lane messages past retention that no lease holds (at most `limit`); their lanes go on. */
export function expireOldLanes(sql: SqlStorage, now: number, cutoff: number, limit = 1000): BacklogDelta & { expired: number } {
  const old = sql.exec<{ lseq: number; key: string; size: number }>("SELECT lseq, key, length(body) AS size FROM lane_messages WHERE enqueued_at < ? AND leased = 0 ORDER BY lseq LIMIT ?", cutoff, limit).toArray();
  const keys = new Set<string>();
  let bytes = 0;
  for (const o of old) {
    sql.exec("DELETE FROM lane_messages WHERE lseq = ?", o.lseq);
    keys.add(o.key);
    bytes += o.size;
  }
  for (const key of keys) {
    const lane = sql.exec<Lane>("SELECT key, lease FROM lanes WHERE key = ?", key).toArray()[0];
    if (lane && lane.lease === null) reopen(sql, now, key, null);
  }
  return { count: -old.length, bytes: -bytes, expired: old.length };
}

/** Deletes up to `limit` lane messages of any state, oldest first, and the lanes left empty. */
export function purgeLanes(sql: SqlStorage, limit: number): { count: number; bytes: number; held: number } {
  const rows = sql.exec<{ lseq: number; key: string; size: number; leased: number }>("SELECT lseq, key, length(body) AS size, leased FROM lane_messages ORDER BY lseq LIMIT ?", limit).toArray();
  let bytes = 0;
  let held = 0;
  const keys = new Set<string>();
  for (const r of rows) {
    sql.exec("DELETE FROM lane_messages WHERE lseq = ?", r.lseq);
    keys.add(r.key);
    bytes += r.size;
    held += r.leased;
  }
  for (const key of keys) if (sql.exec("SELECT 1 FROM lane_messages WHERE key = ? LIMIT 1", key).toArray().length === 0) sql.exec("DELETE FROM lanes WHERE key = ?", key);
  return { count: rows.length, bytes, held };
}

/** Lane messages under a lease now: they count as leased in heartbeats. */
export function leasedLaneCount(sql: SqlStorage): number {
  return sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM lanes l JOIN lane_messages m ON m.key = l.key AND m.lseq <= ${UPTO} WHERE l.lease IS NOT NULL AND m.leased = 1`).one().n;
}

/** When the oldest lane message arrived, or null: arrival order is lseq order, so one row by the primary key. */
export function oldestLaneAt(sql: SqlStorage): number | null {
  return sql.exec<{ t: number }>("SELECT enqueued_at AS t FROM lane_messages ORDER BY lseq LIMIT 1").toArray()[0]?.t ?? null;
}


/** A lane message found by id, as a lookup sees it. */
export function findLaneMessage(sql: SqlStorage, now: number, id: string): (MessageStatus & { orderingKey: string }) | null {
  const lseq = laneOfId(sql, id);
  const r = lseq === null ? undefined : sql.exec<Row & { size: number }>("SELECT lseq, key, id, content_type, enqueued_at, due_at, attempts, sent_at, leased, length(body) AS size FROM lane_messages WHERE lseq = ?", lseq).toArray()[0];
  if (!r) return null;
  const lane = sql.exec<Lane>("SELECT key, ready_at, lease, lease_until FROM lanes WHERE key = ?", r.key).toArray()[0];
  const leased = r.leased === 1 && lane?.lease !== null;
  const state = leased ? "leased" : r.due_at > now ? "delayed" : "ready";
  const visibleAt = leased ? (lane?.lease_until ?? now) : Math.max(r.due_at || r.enqueued_at, lane?.ready_at ?? 0);
  return { id: r.id, state, attempts: r.attempts, enqueuedAt: r.sent_at || r.enqueued_at, visibleAt, size: r.size, contentType: r.content_type as ContentType, orderingKey: r.key };
}

/** Deletes a lane message by id wherever it stands, as a segment's cancel does; its lane goes on. */
export function cancelLaneMessage(sql: SqlStorage, now: number, id: string): { count: number; bytes: number; held: number } {
  const lseq = laneOfId(sql, id);
  const r = lseq === null ? undefined : sql.exec<{ lseq: number; key: string; leased: number; size: number }>("SELECT lseq, key, leased, length(body) AS size FROM lane_messages WHERE lseq = ?", lseq).toArray()[0];
  if (!r) return { count: 0, bytes: 0, held: 0 };
  sql.exec("DELETE FROM lane_messages WHERE lseq = ?", r.lseq);
  const lane = sql.exec<Lane>("SELECT key, lease FROM lanes WHERE key = ?", r.key).toArray()[0];
  // A lease left holding nothing ends; a lane not leased gets its new head.
  const holds = () => sql.exec(`SELECT 1 FROM lanes l JOIN lane_messages m ON m.key = l.key AND m.lseq <= ${UPTO} WHERE l.key = ? AND m.leased = 1 LIMIT 1`, r.key).toArray().length > 0;
  if (lane && (lane.lease === null || !holds())) reopen(sql, now, r.key, lane.lease);
  return { count: 1, bytes: r.size, held: r.leased };
}

/** A key held back here, as operators see it (GET .../ordering/held). */
export interface HeldKey {
  key: string;
  /** leased: a batch is in flight; retry or delayed: its head is not due yet; handoff: another shard holds older messages of it. */
  reason: "leased" | "retry" | "delayed" | "handoff";
  /** The message holding it (its head), or for a hand-off the shard it waits on. */
  blocker: string | null;
  since: number;
  /** Its messages here. */
  messages: number;
}

/** The keys held back here, longest held first, and how many lanes there are and are held, by reason. */
export function heldKeys(sql: SqlStorage, limit: number): { keys: HeldKey[]; lanes: number; held: Record<HeldKey["reason"], number> } {
  const keys = sql
    .exec<{ key: string; reason: HeldKey["reason"]; blocker: string | null; since: number }>(
      "SELECT key, reason, blocker, held_since AS since FROM lanes WHERE reason IS NOT NULL ORDER BY held_since, key LIMIT ?",
      limit,
    )
    .toArray()
    .map((k) => ({ ...k, messages: sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM lane_messages WHERE key = ?", k.key).one().n }));
  const held: Record<HeldKey["reason"], number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  let lanes = 0;
  for (const r of sql.exec<{ reason: HeldKey["reason"] | null; n: number }>("SELECT reason, COUNT(*) AS n FROM lanes GROUP BY reason").toArray()) {
    lanes += r.n;
    if (r.reason !== null) held[r.reason] = r.n;
  }
  return { keys, lanes, held };
}

/**
 * An operator's release of a held key (POST .../ordering/release): its head, leased alone
 * under a new lease, to be moved to the dead-letter queue and settled as dead-lettered. A
 * batch of the key in flight loses its lease (its acks come back stale). Null when this
 * shard has no message of the key, or its head waits on another shard's (that one is the
 * head to release).
 */
export function takeLaneHead(sql: SqlStorage, now: number, key: string, leaseMs: number): LeasedMessage | null {
  const head = sql.exec<Row>("SELECT * FROM lane_messages WHERE key = ? ORDER BY lseq LIMIT 1", key).toArray()[0];
  if (!head) return null;
  const from = blockedFrom(sql, key);
  if (from !== null && head.gen >= from) return null;
  const lease = randomHex(12);
  const upto = sql.exec<{ upto: number | null }>("SELECT upto FROM lanes WHERE key = ?", key).toArray()[0]?.upto ?? Number.MAX_SAFE_INTEGER;
  sql.exec("UPDATE lane_messages SET leased = 0 WHERE key = ? AND lseq <= ? AND leased = 1", key, upto);
  sql.exec("UPDATE lane_messages SET leased = 1 WHERE lseq = ?", head.lseq);
  sql.exec("UPDATE lanes SET ready_at = NULL, lease = ?, lease_until = ?, reason = 'leased', blocker = ?, held_since = ?, upto = ? WHERE key = ?", lease, now + leaseMs, head.id, now, head.lseq, key);
  laneLeaseTaken(sql, now + leaseMs);
  return {
    id: head.id,
    body: new Uint8Array(head.body),
    contentType: head.content_type as ContentType,
    enqueuedAt: head.sent_at || head.enqueued_at,
    attempts: head.attempts,
    leaseId: `L${head.lseq}-${lease}`,
    copyKey: copyOfLane(head.lseq),
    orderingKey: key,
  };
}

/** The lanes here and how many are held back, by reason: what GET .../metrics and Prometheus show, summed over shards. */
export function laneFigures(sql: SqlStorage): LaneFigures {
  const held: Record<HoldReason, number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  let lanes = 0;
  let oldestHeldSince: number | null = null;
  for (const r of sql.exec<{ reason: HoldReason | null; n: number; since: number | null }>("SELECT reason, COUNT(*) AS n, MIN(held_since) AS since FROM lanes GROUP BY reason").toArray()) {
    lanes += r.n;
    if (r.reason === null) continue;
    held[r.reason] = r.n;
    if (r.since !== null && (oldestHeldSince === null || r.since < oldestHeldSince)) oldestHeldSince = r.since;
  }
  return { lanes, held, oldestHeldSince };
}
