/**
 * The leasing side of a storage shard (segment-settlement.ts is the other): leases, retention and
 * leases that run out, as plain functions over the shard's segments (segment.ts,
 * segment-rows.ts) and its in-memory DeliveryState, so the Durable Object stays a thin
 * shell. Every function runs inside the caller's transactionSync.
 *
 * Every lease is held in memory, so a delivery writes nothing until it is settled. A
 * lease that runs out settles its slot and rewrites the message into a new scheduled
 * segment with one more attempt, in the same transaction. Two kinds of segment:
 * those written ready (due_at NULL) are found by reading on from the cursor in segment
 * order; scheduled ones (delayed sends, rewritten messages) through the partial index on
 * due_at, which is moved past the leases taken from them so the index does not offer
 * them again.
 */
import { crc32 } from "../../src/kernel/checksum";
import { randomHex } from "../../src/kernel/ids";
import type { LeasedMessage, LeaseRequest, LeaseResult } from "../../src/kernel/protocol";
import type { DeliveryState, MemoryLease } from "./delivery-state";
import { copyOf, leaseIdOf, posOf, slotKey, type Header } from "./segment";
import { Bodies, headersOf, readState, settledOf, STATE_COLUMNS, type SegmentState } from "./segment-rows";
import { rewritten, writeSegments, type Written } from "./segment-writes";
import { SegmentEdit } from "./segment-edit";
import { KEYED_DUE, type NewMessage } from "./segment-placement";
import { KeyPlan, type Candidate } from "../keyed/keyed-scan";
import { writeKeyedLease, type LeasedSlot } from "../keyed/keyed-leases";

/** How many segments one lease call deletes at most for retention: bounded work per visit. */
const EXPIRE_SEGMENTS_PER_CALL = 100;
/** Slots one lease call reads past the cursor at most, beyond the batch it wants. */
const SCAN_SLACK = 1000;
/** Segments one cursor read takes. */
const SCAN_CHUNK = 16;

export interface BacklogDelta {
  count: number;
  bytes: number;
}

/** A timestamp consumers see: when the message was first sent, wherever it has moved since. */
export function timestampOf(h: Header): number {
  return h.sentAt || h.enqueuedAt;
}

/**
 * Settles messages past the queue's retention. Segments are in arrival order, so the
 * expired segments written ready are a prefix: look at the first before reading more.
 * With `scheduledToo` (the heartbeat), also the scheduled segments holding messages that
 * old (a rewritten message keeps its arrival time); a lease skips those it finds itself. A
 * keyed message's key goes on without it.
 */
export function expireOld(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  retentionMs: number,
  scheduledToo = false,
): BacklogDelta {
  const cutoff = now - retentionMs;
  const first = sql.exec<{ enqueued_at: number }>("SELECT enqueued_at FROM segments ORDER BY seg LIMIT 1").toArray()[0];
  const prefix =
    first && first.enqueued_at < cutoff
      ? (sql
          .exec(`SELECT ${STATE_COLUMNS} FROM segments ORDER BY seg LIMIT ?`, EXPIRE_SEGMENTS_PER_CALL)
          .toArray() as unknown as SegmentState[])
      : [];
  const scheduled = scheduledToo
    ? (sql
        .exec(
          `SELECT ${STATE_COLUMNS} FROM segments WHERE due_at IS NOT NULL AND due_at > -1 AND enqueued_at < ? LIMIT ?`,
          cutoff,
          EXPIRE_SEGMENTS_PER_CALL,
        )
        .toArray() as unknown as SegmentState[])
    : [];
  let count = 0;
  let bytes = 0;
  const seen = new Set<number>();
  for (const state of [...prefix, ...scheduled]) {
    if (seen.has(state.seg) || state.enqueued_at >= cutoff) continue;
    seen.add(state.seg);
    const headers = headersOf(sql, ds, state.seg)!;
    const edit = new SegmentEdit(state, headers, ds);
    headers.forEach((h, slot) => {
      if (h.enqueuedAt >= cutoff || !edit.settle(slot)) return;
      ds.drop(slotKey(state.seg, slot));
      count++;
      bytes += h.size;
    });
    edit.commit(sql, ds);
  }
  ds.bump("expired", count);
  return { count: -count, bytes: -bytes };
}

/** Messages under a lease that has not run out. All leases are in memory (a lower bound after a restart). */
export function leasedCount(ds: DeliveryState, now: number): number {
  return ds.liveLeases(now);
}

export function lease(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  req: LeaseRequest,
  retentionMs: number,
): { result: Omit<LeaseResult, "backlog">; delta: BacklogDelta } {
  const lapsed = expireLeases(sql, ds, now);
  // Keys whose turn it is first (their messages are the oldest of their keys), then due scheduled segments, then fresh ones.
  const plan = new KeyPlan(sql, ds, now);
  const pulled = plan.pull(req.limit);
  const scheduled = readScheduled(sql, ds, now, req.limit - pulled.length, now - retentionMs);
  const fresh = readFresh(sql, ds, plan, req.limit - pulled.length - scheduled.candidates.length);

  // A partial batch waits until its oldest message has waited maxWaitMs.
  const count = pulled.length + scheduled.candidates.length + fresh.candidates.length;
  const oldestReady = Math.min(
    ...pulled.map((c) => c.header.dueAt || c.header.enqueuedAt),
    ...scheduled.candidates.map((c) => c.header.dueAt),
    ...fresh.candidates.map((c) => c.header.enqueuedAt),
  );
  if (count > 0 && count < req.limit && !fresh.truncated && oldestReady + req.maxWaitMs > now) {
    scheduled.commit();
    const delta = { count: lapsed.count + scheduled.expired.count, bytes: lapsed.bytes + scheduled.expired.bytes };
    return {
      result: {
        messages: [],
        waitUntil: oldestReady + req.maxWaitMs,
        ready: count,
        more: false,
        nextVisibleAt: nextVisible(sql, ds, now),
      },
      delta,
    };
  }

  plan.commit();
  const taken = leaseSlots(
    sql,
    ds,
    [...pulled, ...scheduled.candidates, ...fresh.candidates],
    now,
    req.leaseMs,
    true,
    scheduled.edits,
  );
  scheduled.commit();
  // The cursor moves past what was read only when all of it was leased.
  ds.cursor = Math.max(ds.cursor, fresh.cursor);
  ds.bump("leased", taken.messages.length);
  return {
    result: {
      messages: taken.messages,
      waitUntil: null,
      more: count >= req.limit || fresh.truncated,
      nextVisibleAt: nextVisible(sql, ds, now),
    },
    delta: {
      count: lapsed.count + taken.delta.count + scheduled.expired.count,
      bytes: lapsed.bytes + taken.delta.bytes + scheduled.expired.bytes,
    },
  };
}

/**
 * Writes messages again (retries, leases that ran out) into new scheduled segments; a keyed
 * one keeps its place in its key's order and waits at its key's head (key-book.ts).
 */
export function writeRewrites(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  rewrites: readonly NewMessage[],
): Written[] {
  const written = writeSegments(sql, ds, 0, now, rewrites, null);
  written.forEach((w, i) => {
    const m = rewrites[i]!;
    if (m.key === undefined) return;
    const h = headersOf(sql, ds, w.seg)![w.slot]!;
    ds.keys.wait(m.key, now, [
      { seg: w.seg, slot: w.slot, pos: posOf(h, w.seg, w.slot), id: w.id, dueAt: m.dueAt, rewrite: true },
    ]);
  });
  return written;
}

/**
 * Memory leases that ran out are failed deliveries: each message is rewritten with one
 * more attempt (none for a redrive's lease), ready now, and its old slot settled.
 */
export function expireLeases(sql: SqlStorage, ds: DeliveryState, now: number): BacklogDelta {
  const expired = ds.takeExpired(now);
  if (expired.length === 0) return { count: 0, bytes: 0 };
  const bySeg = new Map<number, Array<{ slot: number; lease: MemoryLease }>>();
  for (const [key, lease] of expired) {
    ds.keyedSlotGone(lease.lease, key);
    const [seg, slot] = key.split(".").map(Number) as [number, number];
    const list = bySeg.get(seg) ?? [];
    list.push({ slot, lease });
    bySeg.set(seg, list);
  }
  const rewrites: NewMessage[] = [];
  const from: Array<{ key: string; lease: string }> = [];
  for (const [seg, slots] of bySeg) {
    const state = readState(sql, seg);
    if (!state) continue;
    const edit = new SegmentEdit(state, headersOf(sql, ds, seg)!, ds);
    const bodies = new Bodies(sql, seg, edit.headers);
    for (const { slot, lease } of slots) {
      if (edit.headers[slot]?.id !== lease.id || !edit.settle(slot)) continue;
      rewrites.push(rewritten(edit.headers[slot]!, seg, slot, bodies.of(slot), lease.counts ? 1 : 0, now));
      from.push({ key: slotKey(seg, slot), lease: lease.lease });
    }
    edit.commit(sql, ds);
  }
  writeRewrites(sql, ds, now, rewrites).forEach((w, i) =>
    ds.lapse(from[i]!.key, { id: w.id, lease: from[i]!.lease, key: slotKey(w.seg, w.slot) }),
  );
  return { count: 0, bytes: 0 };
}

/**
 * Ready slots of due scheduled segments, earliest due first, up to `want`. A message
 * past retention is settled as expired instead. `commit` writes each segment read: its
 * expired slots, and its due time moved past what is leased now, so the index does not
 * offer it again before a lease runs out or its next message is due.
 */
function readScheduled(sql: SqlStorage, ds: DeliveryState, now: number, want: number, cutoff: number) {
  const candidates: Candidate[] = [];
  const edits = new Map<number, SegmentEdit>();
  const expired = { count: 0, bytes: 0 };
  if (want > 0) {
    const rows = sql
      .exec(
        `SELECT ${STATE_COLUMNS} FROM segments WHERE due_at IS NOT NULL AND due_at <= ? ORDER BY due_at LIMIT ?`,
        now,
        want,
      )
      .toArray() as unknown as SegmentState[];
    for (const state of rows) {
      if (candidates.length >= want) break;
      const edit = new SegmentEdit(state, headersOf(sql, ds, state.seg)!, ds);
      edits.set(state.seg, edit);
      edit.headers.forEach((header, slot) => {
        if (
          candidates.length >= want ||
          edit.isSettled(slot) ||
          header.dueAt > now ||
          ds.leases.has(slotKey(state.seg, slot))
        )
          return;
        if (header.enqueuedAt < cutoff && edit.settle(slot)) {
          expired.count--;
          expired.bytes -= header.size;
          return;
        }
        candidates.push({ seg: state.seg, slot, header });
      });
    }
    ds.bump("expired", -expired.count);
  }
  const commit = () => {
    for (const [seg, edit] of edits) {
      let next: number | null = null;
      edit.headers.forEach((h, slot) => {
        if (edit.isSettled(slot)) return;
        const held = ds.leases.get(slotKey(seg, slot));
        // Held: when its lease runs out; else when it is due (perhaps already: the batch was full).
        const at = held ? held.until : h.dueAt;
        next = next === null ? at : Math.min(next, at);
      });
      // A segment with nothing unsettled is deleted by commit; its due time does not matter.
      edit.setDueAt(next ?? now);
      edit.commit(sql, ds);
    }
  };
  return { candidates, edits, expired, commit };
}

/**
 * Up to `want` ready slots of segments after the cursor, in arrival order; a keyed one as
 * the plan allows (keyed-scan.ts), the others of its key left for it. `cursor` is the last
 * segment all of whose ready slots are taken by these or left to their keys (the cursor may
 * move there once they are leased); `truncated` when the scan stopped at its bound.
 */
function readFresh(
  sql: SqlStorage,
  ds: DeliveryState,
  plan: KeyPlan,
  want: number,
): { candidates: Candidate[]; cursor: number; truncated: boolean } {
  const candidates: Candidate[] = [];
  let cursor = ds.cursor;
  let after = ds.cursor;
  let budget = want + SCAN_SLACK;
  if (want <= 0) return { candidates, cursor, truncated: false };
  for (;;) {
    const rows = sql
      .exec(
        `SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? AND due_at IS NULL ORDER BY seg LIMIT ?`,
        after,
        SCAN_CHUNK,
      )
      .toArray() as unknown as SegmentState[];
    if (rows.length === 0) return { candidates, cursor, truncated: false };
    for (const state of rows) {
      after = state.seg;
      const headers = headersOf(sql, ds, state.seg)!;
      const settled = settledOf(ds, state.seg, state.settled);
      let whole = true;
      for (let slot = 0; slot < headers.length; slot++) {
        if (settled.has(slot) || ds.leases.has(slotKey(state.seg, slot))) continue;
        const h = headers[slot]!;
        if (candidates.length >= want) {
          whole = false;
          break;
        }
        if (h.key !== undefined) {
          if (plan.verdict(h, state.seg, slot) !== "take") continue;
          plan.take(h.key);
        }
        candidates.push({ seg: state.seg, slot, header: h });
      }
      budget -= headers.length;
      if (!whole) return { candidates, cursor, truncated: false };
      cursor = state.seg;
      if (candidates.length >= want) return { candidates, cursor, truncated: false };
      if (budget <= 0) return { candidates, cursor, truncated: true };
    }
  }
}

/**
 * Leases slots in memory under one new lease; with `countAttempt` the delivery counts
 * as an attempt when it fails. A body whose checksum fails is never handed out: it
 * moves to the quarantine table, its slot settled, and the segment's other messages go
 * on. Slots of the segments in `edits` are settled there, for their caller to commit.
 */
export function leaseSlots(
  sql: SqlStorage,
  ds: DeliveryState,
  candidates: Candidate[],
  now: number,
  leaseMs: number,
  countAttempt: boolean,
  edits: Map<number, SegmentEdit> = new Map(),
): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const lease = randomHex(12);
  const messages: LeasedMessage[] = [];
  const bodies = new Map<number, Bodies>();
  const quarantined = new Map<number, SegmentEdit>();
  const keyed: Array<[string, string]> = [];
  const rows: LeasedSlot[] = [];
  let count = 0;
  let bytes = 0;
  for (const c of candidates) {
    let b = bodies.get(c.seg);
    if (!b) bodies.set(c.seg, (b = new Bodies(sql, c.seg, headersOf(sql, ds, c.seg)!)));
    const body = b.of(c.slot);
    if (crc32(body) !== c.header.checksum) {
      sql.exec(
        "INSERT OR REPLACE INTO quarantine (id, body, checksum, reason, detected_at) VALUES (?, ?, ?, 'checksum mismatch', ?)",
        c.header.id,
        body,
        c.header.checksum,
        now,
      );
      let edit = edits.get(c.seg) ?? quarantined.get(c.seg);
      if (!edit)
        quarantined.set(c.seg, (edit = new SegmentEdit(readState(sql, c.seg)!, headersOf(sql, ds, c.seg)!, ds)));
      if (edit.settle(c.slot)) {
        count++;
        bytes += c.header.size;
      }
      continue;
    }
    const key = slotKey(c.seg, c.slot);
    const copy = copyOf(c.header, c.seg, c.slot);
    ds.hold(key, { id: c.header.id, lease, until: now + leaseMs, counts: countAttempt });
    if (c.header.key !== undefined) {
      keyed.push([key, c.header.key]);
      rows.push([c.seg, c.slot, c.header.id, countAttempt ? 1 : 0]);
    }
    messages.push({
      id: c.header.id,
      body,
      contentType: c.header.contentType,
      enqueuedAt: timestampOf(c.header),
      attempts: c.header.attempts + (countAttempt ? 1 : 0),
      leaseId: leaseIdOf({ copy, seg: c.seg, slot: c.slot, lease }),
      copyKey: copy,
      ...(c.header.key !== undefined ? { orderingKey: c.header.key } : {}),
    });
  }
  // A keyed lease is a row, so a restart honours it (keyed-leases.ts); its keys are held until it ends.
  if (keyed.length > 0) {
    writeKeyedLease(sql, lease, now + leaseMs, rows);
    ds.keys.taken(lease, now + leaseMs, keyed, now);
  }
  for (const edit of quarantined.values()) edit.commit(sql, ds);
  ds.bump("quarantined", count);
  return { messages, delta: { count: -count, bytes: -bytes } };
}

/** When something not ready now becomes ready: a scheduled segment, a memory lease running out, or a key's waiting head. */
export function nextVisible(sql: SqlStorage, ds: DeliveryState, now: number): number | null {
  const row = sql
    .exec<{ t: number | null }>(
      "SELECT MIN(due_at) AS t FROM segments WHERE due_at IS NOT NULL AND due_at > ? AND due_at < ?",
      now,
      KEYED_DUE,
    )
    .one();
  const times = [row.t, ds.earliestExpiry(), ds.keys.nextDue(now)].filter((t): t is number => t !== null);
  return times.length === 0 ? null : Math.min(...times);
}
