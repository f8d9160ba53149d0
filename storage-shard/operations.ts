/**
 * Operations on a queue's stored messages that are not delivery: purge, look up and
 * cancel one message by id, and the filtered leases a dead-letter redrive moves
 * messages under. Plain functions over the shard's segments, like delivery.ts; every
 * function runs inside the caller's transactionSync, and each one that removes messages
 * returns the backlog delta for the shard's in-memory figures. A message is found by
 * its id without a scan: the id says where it was written, or the index of ids that do
 * not (segment-rows.ts findSlot) does.
 */
import { crc32 } from "../src/kernel/checksum";
import type { LeasedMessage, LeaseRef, MessageFilter, MessageStatus } from "../src/kernel/protocol";
import { leaseSlots, timestampOf, type BacklogDelta } from "./delivery";
import type { DeliveryState } from "./delivery-state";
import { MAX_MATCHING_LEASE, PURGE_PER_CALL } from "../src/kernel/limits";
import { offsetsOf, parseLeaseId, slotKey, type Header } from "./segment";
import { findSlot, headersOf, readState, SegmentEdit, settledOf, STATE_COLUMNS, type SegmentState } from "./segment-rows";
import { cancelLaneMessage } from "./lane-operations";
import { countMatchingLanes, leaseMatchingLanes, peekLanes, purgeLanes, releaseLaneLeases } from "./lane-moves";

/** Removed messages: how many, their bytes, and how many were held under a live lease. */
interface Removed {
  count: number;
  bytes: number;
  held: number;
}

/**
 * Settles up to `limit` messages of any state, oldest segment first (a segment with none
 * left is deleted), then lanes' (lanes.ts). Messages a move (a redrive) holds are left to
 * it: they leave for its target, and what a purge reports deleted must never arrive there.
 * `more` while a call found as many as it may take.
 */
export function purgeSome(sql: SqlStorage, ds: DeliveryState, now: number, limit: number, ids?: string[]): Removed & { more: boolean; delta: BacklogDelta } {
  const n = Math.max(1, Math.min(PURGE_PER_CALL, Math.floor(limit)));
  const removed: Removed = { count: 0, bytes: 0, held: 0 };
  for (let after = 0; removed.count < n; ) {
    const rows = sql.exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? ORDER BY seg LIMIT 16`, after).toArray() as unknown as SegmentState[];
    if (rows.length === 0) break;
    for (const state of rows) {
      if (removed.count >= n) break;
      after = state.seg;
      settleUpTo(sql, ds, now, state, removed, n, ids);
    }
  }
  if (removed.count < n) {
    const lanes = purgeLanes(sql, now, n - removed.count, ids);
    removed.count += lanes.count;
    removed.bytes += lanes.bytes;
    removed.held += lanes.held;
  }
  ds.bump("purged", removed.count);
  // Fewer than asked: every segment was read, and every lane message not under a move.
  const more = removed.count >= n;
  return { ...removed, more, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/** Settles live slots of a segment until `removed` counts `limit`, counting them into it. */
function settleUpTo(sql: SqlStorage, ds: DeliveryState, now: number, state: SegmentState, removed: Removed, limit: number, ids: string[] | undefined): void {
  const edit = new SegmentEdit(state, headersOf(sql, ds, state.seg)!, ds);
  edit.headers.forEach((h, slot) => {
    if (removed.count >= limit || moving(ds, now, state.seg, slot) || !edit.settle(slot)) return;
    removed.count++;
    removed.bytes += h.size;
    ids?.push(h.id);
    if (releaseHeld(ds, now, state.seg, slot)) removed.held++;
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
  ds.leases.delete(key);
  return l !== undefined && l.until > now;
}

/** One message by id, without its body; null when this shard does not hold it. */
export function findMessage(sql: SqlStorage, ds: DeliveryState, now: number, id: string): MessageStatus | null {
  const found = findSlot(sql, ds, id);
  if (!found) return null;
  const h = found.headers[found.slot]!;
  const base = { id: h.id, enqueuedAt: timestampOf(h), size: h.size, contentType: h.contentType };
  const held = ds.leases.get(slotKey(found.state.seg, found.slot));
  // A lease's delivery is in the header only once it fails.
  if (held && held.until > now) return { ...base, state: "leased", attempts: h.attempts + (held.counts ? 1 : 0), visibleAt: held.until };
  if (h.dueAt > now) return { ...base, state: "delayed", attempts: h.attempts, visibleAt: h.dueAt };
  // A scheduled segment moved past a lease that a restart then lost: ready when that lease would have run out.
  const due = found.state.due_at;
  if (!held && due !== null && due > now) return { ...base, state: "leased", attempts: h.attempts, visibleAt: due };
  // A lease that ran out is a failed delivery, counted when the next lease rewrites the message.
  return { ...base, state: "ready", attempts: h.attempts + (held?.counts ? 1 : 0), visibleAt: Math.max(h.dueAt, h.enqueuedAt) };
}

/** Messages a peek reads at most, whatever it finds among them: an operator's look stays cheap. */
const PEEK_SCAN = 1000;

/**
 * Up to `limit` ready messages, oldest segment first, with their bodies, leaving them as
 * they are (no lease, no attempt): what the dashboard shows as "ready". Reads at most
 * about PEEK_SCAN messages' headers, so a shard whose oldest messages are all leased or
 * delayed may show none; only the bodies shown are read.
 */
export function peekReady(sql: SqlStorage, ds: DeliveryState, now: number, limit: number): Array<MessageStatus & { body: Uint8Array; orderingKey?: string }> {
  const out: Array<MessageStatus & { body: Uint8Array; orderingKey?: string }> = [];
  let scanned = 0;
  for (let after = 0; out.length < limit && scanned < PEEK_SCAN; ) {
    const rows = sql.exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? ORDER BY seg LIMIT 16`, after).toArray() as unknown as SegmentState[];
    if (rows.length === 0) break;
    for (const state of rows) {
      after = state.seg;
      const headers = headersOf(sql, ds, state.seg)!;
      scanned += headers.length;
      const settled = settledOf(ds, state.seg, state.settled);
      const offsets = offsetsOf(headers);
      headers.forEach((h, slot) => {
        if (out.length >= limit || settled.has(slot) || !isReady(ds, now, state, h, slot)) return;
        // Only this message's bytes of the packed bodies.
        const stored = sql.exec<{ body: ArrayBuffer | string }>("SELECT substr(bodies, ?, ?) AS body FROM segments WHERE seg = ?", offsets[slot]! + 1, h.size, state.seg).toArray()[0];
        if (!stored) return;
        // An empty body comes back as an empty string.
        const body = typeof stored.body === "string" ? new Uint8Array(0) : new Uint8Array(stored.body);
        // A body that no longer matches its checksum is never shown (delivery quarantines it).
        if (crc32(body) !== h.checksum) return;
        out.push({ id: h.id, state: "ready", attempts: h.attempts, enqueuedAt: timestampOf(h), visibleAt: Math.max(h.dueAt, h.enqueuedAt), size: h.size, contentType: h.contentType, body });
      });
      if (out.length >= limit || scanned >= PEEK_SCAN) break;
    }
  }
  // Keyed messages are in lanes, not segments: the oldest `limit` of both.
  const keyed = peekLanes(sql, now, limit);
  if (keyed.length === 0) return out;
  return [...out, ...keyed].sort((a, b) => a.enqueuedAt - b.enqueuedAt).slice(0, limit);
}

/** Whether an unsettled slot is ready: due, not held, not behind a lease a restart lost. */
function isReady(ds: DeliveryState, now: number, state: SegmentState, h: Header, slot: number): boolean {
  const held = ds.leases.get(slotKey(state.seg, slot));
  if (held && held.until > now) return false;
  if (h.dueAt > now) return false;
  return held !== undefined || state.due_at === null || state.due_at <= now;
}

/** Settles one message whatever its state; a consumer's later ack for it finds nothing (stale). */
export function cancelMessage(sql: SqlStorage, ds: DeliveryState, now: number, id: string): Removed & { delta: BacklogDelta } {
  const removed: Removed = { count: 0, bytes: 0, held: 0 };
  const found = findSlot(sql, ds, id);
  if (found) {
    const edit = new SegmentEdit(found.state, found.headers, ds);
    if (edit.settle(found.slot)) {
      removed.count++;
      removed.bytes += found.headers[found.slot]!.size;
      if (releaseHeld(ds, now, found.state.seg, found.slot)) removed.held++;
    }
    edit.commit(sql, ds);
  } else {
    // Not in a segment: a keyed message in its lane, perhaps.
    Object.assign(removed, cancelLaneMessage(sql, now, id));
  }
  ds.bump("cancelled", removed.count);
  return { ...removed, delta: { count: -removed.count, bytes: -removed.bytes } };
}

/**
 * Leases up to `limit` ready messages that match the filter, oldest segment first, for
 * a redrive: held in memory as a delivery's are, but counting no attempt (the attempts
 * stored are what a redrive filters on). The move is: lease, write to the target, ack
 * here; a crash in between leaves the message here to be moved again.
 */
export function leaseMatching(sql: SqlStorage, ds: DeliveryState, now: number, filter: MessageFilter, limit: number, leaseMs: number): { messages: LeasedMessage[]; delta: BacklogDelta } {
  const matches = matching(now, filter);
  let want = Math.max(1, Math.min(MAX_MATCHING_LEASE, Math.floor(limit)));
  // Keyed messages first, each key's in its order (lane-moves.ts); then segments' for the rest.
  const keyed = leaseMatchingLanes(sql, now, filter, want, leaseMs);
  want -= keyed.messages.length;
  const candidates: Array<{ seg: number; slot: number; header: Header }> = [];
  for (let after = 0; candidates.length < want; ) {
    const rows = sql.exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? ORDER BY seg LIMIT 16`, after).toArray() as unknown as SegmentState[];
    if (rows.length === 0) break;
    for (const state of rows) {
      after = state.seg;
      const headers = headersOf(sql, ds, state.seg)!;
      const settled = settledOf(ds, state.seg, state.settled);
      headers.forEach((h, slot) => {
        if (candidates.length < want && !settled.has(slot) && isReady(ds, now, state, h, slot) && matches(h)) candidates.push({ seg: state.seg, slot, header: h });
      });
    }
  }
  if (candidates.length === 0) return keyed;
  const plain = leaseSlots(sql, ds, candidates, now, leaseMs, false);
  return { messages: [...keyed.messages, ...plain.messages], delta: { count: keyed.delta.count + plain.delta.count, bytes: keyed.delta.bytes + plain.delta.bytes } };
}

/**
 * Gives leased messages back at once (a redrive whose write failed), counting nothing:
 * the cursor moves back before the segment, and a scheduled segment is due now, so the
 * next lease finds them.
 */
export function releaseLeases(sql: SqlStorage, ds: DeliveryState, now: number, refs: LeaseRef[]): number {
  let released = releaseLaneLeases(sql, now, refs);
  for (const ref of refs) {
    const name = parseLeaseId(ref.leaseId);
    if (!name) continue;
    const key = slotKey(name.seg, name.slot);
    if (!ds.held(key, ref.id, name.lease)) continue;
    ds.leases.delete(key);
    released++;
    const state = readState(sql, name.seg);
    if (!state) continue;
    if (state.due_at === null) ds.cursor = Math.min(ds.cursor, name.seg - 1);
    else if (state.due_at > now) sql.exec("UPDATE segments SET due_at = ? WHERE seg = ?", now, name.seg);
  }
  return released;
}

/** Messages matching the filter in any state (leased and delayed ones too), keyed ones included. Reads every header: an operator's count. */
export function countMatching(sql: SqlStorage, ds: DeliveryState, now: number, filter: MessageFilter): number {
  const matches = matching(now, filter);
  let n = countMatchingLanes(sql, now, filter);
  for (let after = 0; ; ) {
    const rows = sql.exec<{ seg: number; settled: ArrayBuffer; headers: string }>("SELECT seg, settled, headers FROM segments WHERE seg > ? ORDER BY seg LIMIT 64", after).toArray();
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
