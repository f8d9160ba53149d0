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
  const held = r.leased === 1 && lane !== undefined && lane.lease !== null;
  // A lease that ran out and is not expired yet: ready, that delivery counted, as expireLaneLeases will write it.
  const lapsed = held && (lane.lease_until ?? now) <= now;
  const state = held && !lapsed ? "leased" : r.due_at > now && !lapsed ? "delayed" : "ready";
  const visibleAt = held ? (lane.lease_until ?? now) : Math.max(r.due_at || r.enqueued_at, lane?.ready_at ?? 0);
  return { id: r.id, state, attempts: r.attempts + (lapsed ? 1 : 0), enqueuedAt: r.sent_at || r.enqueued_at, visibleAt, size: r.size, contentType: r.content_type as ContentType, orderingKey: r.key };
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

/**
 * A lane's reason as it stands now: a retry's or a delay's hold ends when its head is due,
 * though the row keeps its reason until the lane is next leased (nothing is written for time passing).
 */
const REASON_NOW = "CASE WHEN reason IN ('retry', 'delayed') AND ready_at <= ? THEN NULL ELSE reason END";

/** The keys held back here, longest held first, and how many lanes there are and are held, by reason. */
export function heldKeys(sql: SqlStorage, now: number, limit: number): { keys: HeldKey[]; lanes: number; held: Record<HeldKey["reason"], number> } {
  const keys = sql
    .exec<{ key: string; reason: HeldKey["reason"]; blocker: string | null; since: number }>(
      `SELECT key, reason, blocker, held_since AS since FROM lanes WHERE ${REASON_NOW} IS NOT NULL ORDER BY held_since, key LIMIT ?`,
      now, limit,
    )
    .toArray()
    .map((k) => ({ ...k, messages: sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM lane_messages WHERE key = ?", k.key).one().n }));
  const held: Record<HeldKey["reason"], number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  let lanes = 0;
  for (const r of sql.exec<{ reason: HeldKey["reason"] | null; n: number }>(`SELECT ${REASON_NOW} AS reason, COUNT(*) AS n FROM lanes GROUP BY 1`, now).toArray()) {
    lanes += r.n;
    if (r.reason !== null) held[r.reason] = r.n;
  }
  return { keys, lanes, held };
}

/** What a shard answers an operator's release of a key (takeLaneHead). */
export type HeadTaken =
  /** Its head, the message named, leased alone to be moved. */
  | { taken: LeasedMessage }
  /** The key is not held here: its head is deliverable, or waits on another shard's (which is the head to release). */
  | { notHeld: string }
  /** The key is held here by another message than the one named (the one named was settled, or never held it). */
  | { heldBy: string }
  /** No message of the key here. */
  | null;

/**
 * An operator's release of a held key (POST .../ordering/release): its head, leased alone
 * under a new lease, to be moved to the dead-letter queue and settled as dead-lettered. Only
 * the head the operator named (`expected`), and only while it holds its key: a release must
 * never dead-letter a message a consumer could have been given, nor the next head after the
 * one the operator saw was acked. A batch of the key in flight loses its lease (its acks
 * come back stale).
 */
export function takeLaneHead(sql: SqlStorage, now: number, key: string, expected: string, leaseMs: number): HeadTaken {
  const head = sql.exec<Row>("SELECT * FROM lane_messages WHERE key = ? ORDER BY lseq LIMIT 1", key).toArray()[0];
  if (!head) return null;
  const from = blockedFrom(sql, key);
  if (from !== null && head.gen >= from) return { notHeld: head.id };
  const reason = sql.exec<{ reason: string | null }>(`SELECT ${REASON_NOW} AS reason FROM lanes WHERE key = ?`, now, key).toArray()[0]?.reason ?? null;
  if (reason === null || reason === "handoff") return { notHeld: head.id };
  if (head.id !== expected) return { heldBy: head.id };
  const lease = randomHex(12);
  const upto = sql.exec<{ upto: number | null }>("SELECT upto FROM lanes WHERE key = ?", key).toArray()[0]?.upto ?? Number.MAX_SAFE_INTEGER;
  sql.exec("UPDATE lane_messages SET leased = 0 WHERE key = ? AND lseq <= ? AND leased = 1", key, upto);
  sql.exec("UPDATE lane_messages SET leased = 1 WHERE lseq = ?", head.lseq);
  sql.exec("UPDATE lanes SET ready_at = NULL, lease = ?, lease_until = ?, reason = 'leased', blocker = ?, held_since = ?, upto = ? WHERE key = ?", lease, now + leaseMs, head.id, now, head.lseq, key);
  laneLeaseTaken(sql, now + leaseMs);
  return {
    taken: {
      id: head.id,
      body: new Uint8Array(head.body),
      contentType: head.content_type as ContentType,
      enqueuedAt: head.sent_at || head.enqueued_at,
      attempts: head.attempts,
      leaseId: `L${head.lseq}-${lease}`,
      copyKey: copyOfLane(head.lseq),
      orderingKey: key,
    },
  };
}

/** The lanes here and how many are held back, by reason: what GET .../metrics and Prometheus show, summed over shards. */
export function laneFigures(sql: SqlStorage, now: number): LaneFigures {
  const held: Record<HoldReason, number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  let lanes = 0;
  let oldestHeldSince: number | null = null;
  for (const r of sql.exec<{ reason: HoldReason | null; n: number; since: number | null }>(`SELECT ${REASON_NOW} AS reason, COUNT(*) AS n, MIN(held_since) AS since FROM lanes GROUP BY 1`, now).toArray()) {
    lanes += r.n;
    if (r.reason === null) continue;
    held[r.reason] = r.n;
    if (r.since !== null && (oldestHeldSince === null || r.since < oldestHeldSince)) oldestHeldSince = r.since;
  }
  return { lanes, held, oldestHeldSince };
}
