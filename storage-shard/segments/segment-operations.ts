/**
 * Operations on a queue's stored messages that are not delivery: purge, look up and
 * cancel one message by id, and the filtered leases a dead-letter redrive moves
 * messages under. Plain functions over the shard's segments, like segment-leases.ts; every
 * function runs inside the caller's transactionSync, and each one that removes messages
 * returns the backlog delta for the shard's in-memory figures. A message is found by
 * its id without a scan: the id says where it was written, or the index of ids that do
 * not (segment-rows.ts findSlot) does.
 */
import { crc32 } from "../../src/kernel/checksum";
import type { MessageFilter, MessageStatus } from "../../src/kernel/message-operations";
import type { LeasedMessage, LeaseRef } from "../../src/kernel/protocol";
import { leaseSlots, timestampOf, type BacklogDelta } from "./segment-leases";
import type { DeliveryState } from "./delivery-state";
import { MAX_MATCHING_LEASE, PURGE_PER_CALL } from "../../src/kernel/limits";
import { offsetsOf, parseLeaseId, slotKey, type Header } from "./segment";
import { findSlot, headersOf, readState, settledOf, STATE_COLUMNS, type SegmentState } from "./segment-rows";
import { SegmentEdit } from "./segment-edit";
import { KEYED_DUE } from "./segment-placement";
import type { Candidate } from "../keyed/keyed-scan";
import { giveBack, KeyedMatches, keyWaitsUntil, PeekGate, trimKeyedLease, unwait } from "../keyed/keyed-operations";

/** Removed messages: how many, their bytes, and how many were held under a live lease. */
interface Removed {
  count: number;
  bytes: number;
  held: number;
}

/**
 * Settles up to `limit` messages of any state, keyed ones too, oldest segment first (a segment
 * with none left is deleted). Messages a move (a redrive) holds are left to it: they leave for
 * its target, and what a purge reports deleted must never arrive there. `more` while a call
 * found as many as it may take.
 */
export function purgeSome(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  limit: number,
  ids?: string[],
): Removed & { more: boolean; delta: BacklogDelta } {
  const n = Math.max(1, Math.min(PURGE_PER_CALL, Math.floor(limit)));
  const removed: Removed = { count: 0, bytes: 0, held: 0 };
  for (let after = 0; removed.count < n;) {
    const rows = sql
      .exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? ORDER BY seg LIMIT 16`, after)
      .toArray() as unknown as SegmentState[];
    if (rows.length === 0) break;
    for (const state of rows) {
      if (removed.count >= n) break;
      after = state.seg;
      settleUpTo(sql, ds, now, state, removed, n, ids);
    }
  }
  ds.bump("purged", removed.count);
  // Fewer than asked: every segment was read, and every message not under a move settled.
  const more = removed.count >= n;
  return { ...removed, more, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/** Settles live slots of a segment until `removed` counts `limit`, counting them into it. */
function settleUpTo(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  state: SegmentState,
  removed: Removed,
  limit: number,
  ids: string[] | undefined,
): void {
  const edit = new SegmentEdit(state, headersOf(sql, ds, state.seg)!, ds);
  edit.headers.forEach((h, slot) => {
    if (removed.count >= limit || moving(ds, now, state.seg, slot) || !edit.settle(slot)) return;
    removed.count++;
    removed.bytes += h.size;
    ids?.push(h.id);
    if (releaseHeld(ds, now, state.seg, slot)) removed.held++;
    if (h.key !== undefined) unwait(ds, h.key, state.seg, slot);
  });
  edit.commit(sql, ds);
}

/** Whether a move (a redrive's lease, which counts no attempt) holds the slot now. */
function moving(ds: DeliveryState, now: number, seg: number, slot: number): boolean {
  const l = ds.leases.get(slotKey(seg, slot));
  return l !== undefined && !l.counts && l.until > now;
}

/** Drops a slot's memory lease; true when one was live. */
function releaseHeld(ds: DeliveryState, now: number, seg: number, slot: number): boolean {
  const key = slotKey(seg, slot);
  const l = ds.leases.get(key);
  ds.drop(key);
  return l !== undefined && l.until > now;
}

/** One message by id, without its body, with its ordering key if it has one; null when this shard does not hold it. */
export function findMessage(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  id: string,
): (MessageStatus & { orderingKey?: string }) | null {
  const found = findSlot(sql, ds, id);
  if (!found) return null;
  const { state, slot } = found;
  const h = found.headers[slot]!;
  const base = {
    id: h.id,
    enqueuedAt: timestampOf(h),
    size: h.size,
    contentType: h.contentType,
    ...(h.key !== undefined ? { orderingKey: h.key } : {}),
  };
  const held = ds.leases.get(slotKey(state.seg, slot));
  // A lease's delivery is in the header only once it fails.
  if (held && held.until > now)
    return { ...base, state: "leased", attempts: h.attempts + (held.counts ? 1 : 0), visibleAt: held.until };
  if (h.dueAt > now) return { ...base, state: "delayed", attempts: h.attempts, visibleAt: h.dueAt };
  // Behind its key's head, which waits for a retry's delay or its own: not visible before that head is.
  const keyWait = h.key !== undefined && !held ? keyWaitsUntil(ds, now, state.seg, slot, h) : null;
  if (keyWait !== null) return { ...base, state: "delayed", attempts: h.attempts, visibleAt: keyWait };
  // A scheduled segment moved past a lease that a restart then lost: ready when that lease would have run out.
  if (!held && lostLease(state, now))
    return { ...base, state: "leased", attempts: h.attempts, visibleAt: state.due_at! };
  // A lease that ran out is a failed delivery, counted when the next lease rewrites the message.
  return {
    ...base,
    state: "ready",
    attempts: h.attempts + (held?.counts ? 1 : 0),
    visibleAt: Math.max(h.dueAt, h.enqueuedAt),
  };
}

/** Messages a peek reads at most, whatever it finds among them: an operator's look stays cheap. */
const PEEK_SCAN = 1000;

/**
 * Up to `limit` ready messages, oldest segment first, with their bodies, leaving them as
 * they are (no lease, no attempt): what the dashboard shows as "ready". A keyed one only if a
 * consumer could be given it now, in its key's order (keyed-operations.ts PeekGate). Reads at
 * most about PEEK_SCAN messages' headers, so a shard whose oldest messages are all leased,
 * delayed or held by their keys may show none; only the bodies shown are read.
 */
export function peekReady(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  limit: number,
): Array<MessageStatus & { body: Uint8Array; orderingKey?: string }> {
  const out: Array<MessageStatus & { body: Uint8Array; orderingKey?: string }> = [];
  const gate = new PeekGate(sql, ds, now);
  let scanned = 0;
  for (let after = 0; out.length < limit && scanned < PEEK_SCAN;) {
    const rows = sql
      .exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? ORDER BY seg LIMIT 16`, after)
      .toArray() as unknown as SegmentState[];
    if (rows.length === 0) break;
    for (const state of rows) {
      after = state.seg;
      const headers = headersOf(sql, ds, state.seg)!;
      scanned += headers.length;
      const settled = settledOf(ds, state.seg, state.settled);
      const offsets = offsetsOf(headers);
      headers.forEach((h, slot) => {
        if (out.length >= limit || settled.has(slot)) return;
        if (h.key !== undefined ? !gate.shows(state.seg, slot, h) : !isReady(ds, now, state, h, slot)) return;
        const body = peekBody(sql, state.seg, offsets[slot]!, h);
        if (!body) {
          if (h.key !== undefined) gate.hide(h.key);
          return;
        }
        out.push({
          id: h.id,
          state: "ready",
          attempts: h.attempts,
          enqueuedAt: timestampOf(h),
          visibleAt: Math.max(h.dueAt, h.enqueuedAt),
          size: h.size,
          contentType: h.contentType,
          body,
          ...(h.key !== undefined ? { orderingKey: h.key } : {}),
        });
      });
      if (out.length >= limit || scanned >= PEEK_SCAN) break;
    }
  }
  return out;
}

/** One slot's body, only its bytes of the packed bodies; null when it is gone or no longer matches its checksum (delivery quarantines it). */
function peekBody(sql: SqlStorage, seg: number, offset: number, h: Header): Uint8Array | null {
  const stored = sql
    .exec<{ body: ArrayBuffer | string }>(
      "SELECT substr(bodies, ?, ?) AS body FROM segments WHERE seg = ?",
      offset + 1,
      h.size,
      seg,
    )
    .toArray()[0];
  if (!stored) return null;
  // An empty body comes back as an empty string.
  const body = typeof stored.body === "string" ? new Uint8Array(0) : new Uint8Array(stored.body);
  return crc32(body) === h.checksum ? body : null;
}

/** Whether an unsettled keyless slot is ready: due, not held, not behind a lease a restart lost. */
function isReady(ds: DeliveryState, now: number, state: SegmentState, h: Header, slot: number): boolean {
  const held = ds.leases.get(slotKey(state.seg, slot));
  if (held && held.until > now) return false;
  if (h.dueAt > now) return false;
  return held !== undefined || !lostLease(state, now);
}

/**
 * Whether a scheduled segment's due time was moved past a lease a restart then lost. Not a
 * segment of keyed copies: it is due never (its messages wait for their keys), by design.
 */
function lostLease(state: SegmentState, now: number): boolean {
  return state.due_at !== null && state.due_at !== KEYED_DUE && state.due_at > now;
}

/** Settles one message whatever its state; a consumer's later ack for it finds nothing (stale). */
export function cancelMessage(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  id: string,
): Removed & { delta: BacklogDelta } {
  const removed: Removed = { count: 0, bytes: 0, held: 0 };
  const found = findSlot(sql, ds, id);
  if (found) {
    const edit = new SegmentEdit(found.state, found.headers, ds);
    const h = found.headers[found.slot]!;
    if (edit.settle(found.slot)) {
      removed.count++;
      removed.bytes += h.size;
      if (releaseHeld(ds, now, found.state.seg, found.slot)) removed.held++;
      // Its key goes on from its next message.
      if (h.key !== undefined) unwait(ds, h.key, found.state.seg, found.slot);
    }
    edit.commit(sql, ds);
  }
  ds.bump("cancelled", removed.count);
  return { ...removed, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/**
 * Leases up to `limit` ready messages that match the filter, oldest segment first, for
 * a redrive: held in memory as a delivery's are, but counting no attempt (the attempts
 * stored are what a redrive filters on). Keyed ones go first, each key's in its order
 * (keyed-operations.ts KeyedMatches), so the move writes them to the target in that order.
 * The move is: lease, write to the target, ack here; a crash in between leaves the message
 * here to be moved again.
 */
export function leaseMatching(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  filter: MessageFilter,
  limit: number,
  leaseMs: number,
): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const matches = matching(now, filter);
  const want = Math.max(1, Math.min(MAX_MATCHING_LEASE, Math.floor(limit)));
  const plain: Candidate[] = [];
  const keyed = new KeyedMatches(sql, ds, now, matches);
  for (let after = 0; plain.length + keyed.likely < want;) {
    const rows = sql
      .exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? ORDER BY seg LIMIT 16`, after)
      .toArray() as unknown as SegmentState[];
    if (rows.length === 0) break;
    for (const state of rows) {
      after = state.seg;
      const headers = headersOf(sql, ds, state.seg)!;
      const settled = settledOf(ds, state.seg, state.settled);
      headers.forEach((h, slot) => {
        if (settled.has(slot)) return;
        if (h.key !== undefined) keyed.add(state.seg, slot, h);
        else if (plain.length + keyed.likely < want && isReady(ds, now, state, h, slot) && matches(h))
          plain.push({ seg: state.seg, slot, header: h });
      });
    }
  }
  const ordered = keyed.take(want);
  const candidates = [...ordered, ...plain.slice(0, want - ordered.length)];
  if (candidates.length === 0) return { messages: [], delta: { count: 0, bytes: 0 } };
  return leaseSlots(sql, ds, candidates, now, leaseMs, false);
}

/**
 * Gives leased messages back at once (a redrive whose write failed, a release whose move
 * failed), counting nothing: the cursor moves back before the segment, a scheduled segment is
 * due now, and a keyed message is deliverable again in its key's order, so the next lease
 * finds them.
 */
export function releaseLeases(sql: SqlStorage, ds: DeliveryState, now: number, refs: LeaseRef[]): number {
  let released = 0;
  const keyedLeases = new Set<string>();
  for (const ref of refs) {
    const name = parseLeaseId(ref.leaseId);
    if (!name) continue;
    const key = slotKey(name.seg, name.slot);
    if (!ds.held(key, ref.id, name.lease)) continue;
    ds.drop(key);
    released++;
    const state = readState(sql, name.seg);
    if (!state) continue;
    const h = headersOf(sql, ds, name.seg)![name.slot]!;
    if (h.key !== undefined) {
      giveBack(ds, now, state, name.slot, h);
      keyedLeases.add(name.lease);
    }
    if (state.due_at === null) ds.cursor = Math.min(ds.cursor, name.seg - 1);
    else if (state.due_at > now && state.due_at !== KEYED_DUE)
      sql.exec("UPDATE segments SET due_at = ? WHERE seg = ?", now, name.seg);
  }
  // A keyed lease given back in part keeps its other slots: its row names only those.
  for (const lease of keyedLeases) trimKeyedLease(sql, ds, lease);
  return released;
}

/** Messages matching the filter in any state (leased and delayed ones too), keyed ones included. Reads every header: an operator's count. */
export function countMatching(sql: SqlStorage, ds: DeliveryState, now: number, filter: MessageFilter): number {
  const matches = matching(now, filter);
  let n = 0;
  for (let after = 0; ;) {
    const rows = sql
      .exec<{ seg: number; settled: ArrayBuffer; headers: string }>(
        "SELECT seg, settled, headers FROM segments WHERE seg > ? ORDER BY seg LIMIT 64",
        after,
      )
      .toArray();
    if (rows.length === 0) return n;
    for (const r of rows) {
      after = r.seg;
      const settled = settledOf(ds, r.seg, r.settled);
      ds.headersOf(r.seg, r.headers).forEach((h, slot) => {
        if (!settled.has(slot) && matches(h)) n++;
      });
    }
  }
}

/** The filter as a test of a header; ages are measured on this shard's clock, the one that stamped enqueuedAt. */
function matching(now: number, f: MessageFilter): (h: Header) => boolean {
  return (h) =>
    (f.minAgeMs === undefined || h.enqueuedAt <= now - f.minAgeMs) &&
    (f.maxAgeMs === undefined || h.enqueuedAt >= now - f.maxAgeMs) &&
    (f.minAttempts === undefined || h.attempts >= f.minAttempts) &&
    (f.maxAttempts === undefined || h.attempts <= f.maxAttempts);
}
