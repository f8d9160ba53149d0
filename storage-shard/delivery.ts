/**
 * The read side of a storage shard: leasing, settling and extending, as plain functions
 * over the shard's segments (segment.ts, segment-rows.ts) and its in-memory
 * DeliveryState, so the Durable Object stays a thin shell. Every function runs inside
 * the caller's transactionSync.
 *
 * Every lease is held in memory, so a delivery writes nothing until it is settled. An
 * ack settles its slot: one write of the segment row's bitmap for all the slots one call
 * settles there, or the row's delete when none is left. A retry, or a lease that runs
 * out, settles the slot and rewrites the message into a new scheduled segment with one
 * more attempt and its new due time, in the same transaction. Two kinds of segment:
 * those written ready (due_at NULL) are found by reading on from the cursor in segment
 * order; scheduled ones (delayed sends, rewritten messages) through the partial index on
 * due_at, which is moved past the leases taken from them so the index does not offer
 * them again. An ack or retry under a lease someone else holds does nothing.
 */
import { crc32 } from "../src/kernel/checksum";
import { randomHex } from "../src/kernel/ids";
import type { LeasedMessage, LeaseRef, LeaseRequest, LeaseResult, SettleRequest, SettleResult } from "../src/kernel/protocol";
import type { DeliveryState, MemoryLease } from "./delivery-state";
import { bodyOf, copyOf, leaseIdOf, offsetsOf, parseLeaseId, Settled, slotKey, type Header, type LeaseName } from "./segment";
import { bodiesOf, headersOf, readState, SegmentEdit, STATE_COLUMNS, writeSegments, type NewMessage, type SegmentState } from "./segment-rows";

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
 * old (a rewritten message keeps its arrival time); a lease skips those it finds itself.
 */
export function expireOld(sql: SqlStorage, ds: DeliveryState, now: number, retentionMs: number, scheduledToo = false): BacklogDelta {
  const cutoff = now - retentionMs;
  const first = sql.exec<{ enqueued_at: number }>("SELECT enqueued_at FROM segments ORDER BY seg LIMIT 1").toArray()[0];
  const prefix =
    first && first.enqueued_at < cutoff
      ? (sql.exec(`SELECT ${STATE_COLUMNS} FROM segments ORDER BY seg LIMIT ?`, EXPIRE_SEGMENTS_PER_CALL).toArray() as unknown as SegmentState[])
      : [];
  const scheduled = scheduledToo
    ? (sql.exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE due_at IS NOT NULL AND due_at > -1 AND enqueued_at < ? LIMIT ?`, cutoff, EXPIRE_SEGMENTS_PER_CALL).toArray() as unknown as SegmentState[])
    : [];
  let count = 0;
  let bytes = 0;
  const seen = new Set<number>();
  for (const state of [...prefix, ...scheduled]) {
    if (seen.has(state.seg) || state.enqueued_at >= cutoff) continue;
    seen.add(state.seg);
    const headers = headersOf(sql, ds, state.seg)!;
    const edit = new SegmentEdit(state, headers);
    headers.forEach((h, slot) => {
      if (h.enqueuedAt >= cutoff || !edit.settle(slot)) return;
      ds.leases.delete(slotKey(state.seg, slot));
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

/** A message ready to lease: its segment, slot and header. */
interface Candidate {
  seg: number;
  slot: number;
  header: Header;
}

export function lease(sql: SqlStorage, ds: DeliveryState, now: number, req: LeaseRequest, retentionMs: number): { result: Omit<LeaseResult, "backlog">; delta: BacklogDelta } {
  const lapsed = expireLeases(sql, ds, now);
  const scheduled = readScheduled(sql, ds, now, req.limit, now - retentionMs);
  const fresh = readFresh(sql, ds, req.limit - scheduled.candidates.length);

  // A partial batch waits until its oldest message has waited maxWaitMs.
  const count = scheduled.candidates.length + fresh.candidates.length;
  const oldestReady = Math.min(...scheduled.candidates.map((c) => c.header.dueAt), ...fresh.candidates.map((c) => c.header.enqueuedAt));
  if (count > 0 && count < req.limit && !fresh.truncated && oldestReady + req.maxWaitMs > now) {
    scheduled.commit();
    const delta = { count: lapsed.count + scheduled.expired.count, bytes: lapsed.bytes + scheduled.expired.bytes };
    return { result: { messages: [], waitUntil: oldestReady + req.maxWaitMs, more: false, nextVisibleAt: nextVisible(sql, ds, now) }, delta };
  }

  const taken = leaseSlots(sql, ds, [...scheduled.candidates, ...fresh.candidates], now, req.leaseMs, true, scheduled.edits);
  scheduled.commit();
  ds.cursor = Math.max(ds.cursor, fresh.cursor);
  ds.bump("leased", taken.messages.length);
  return {
    result: { messages: taken.messages, waitUntil: null, more: count === req.limit || fresh.truncated, nextVisibleAt: nextVisible(sql, ds, now) },
    delta: { count: lapsed.count + taken.delta.count + scheduled.expired.count, bytes: lapsed.bytes + taken.delta.bytes + scheduled.expired.bytes },
  };
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
    const edit = new SegmentEdit(state, headersOf(sql, ds, seg)!);
    const bodies = new Bodies(sql, seg, edit.headers);
    for (const { slot, lease } of slots) {
      if (edit.headers[slot]?.id !== lease.id || !edit.settle(slot)) continue;
      rewrites.push(rewritten(edit.headers[slot]!, seg, slot, bodies.of(slot), lease.counts ? 1 : 0, now));
      from.push({ key: slotKey(seg, slot), lease: lease.lease });
    }
    edit.commit(sql, ds);
  }
  writeSegments(sql, ds, 0, now, rewrites, null).forEach((w, i) => ds.lapse(from[i]!.key, { id: w.id, lease: from[i]!.lease, key: slotKey(w.seg, w.slot) }));
  return { count: 0, bytes: 0 };
}

/** A message written again from its slot: same id, copy and body; its attempts and due time anew. */
function rewritten(h: Header, seg: number, slot: number, body: Uint8Array, addAttempts: number, dueAt: number): NewMessage {
  return {
    id: h.id,
    contentType: h.contentType,
    checksum: h.checksum,
    enqueuedAt: h.enqueuedAt,
    dueAt,
    attempts: h.attempts + addAttempts,
    sentAt: h.sentAt,
    copy: copyOf(h, seg, slot),
    body,
  };
}

/** A segment's packed bodies, read once when the first is wanted. */
class Bodies {
  private packed: ArrayBuffer | undefined;
  private offsets: number[] | undefined;
  constructor(
    private readonly sql: SqlStorage,
    private readonly seg: number,
    private readonly headers: Header[],
  ) {}

  of(slot: number): Uint8Array {
    this.packed ??= bodiesOf(this.sql, this.seg) ?? new ArrayBuffer(0);
    this.offsets ??= offsetsOf(this.headers);
    return bodyOf(this.packed, this.offsets, this.headers, slot);
  }
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
    const rows = sql.exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE due_at IS NOT NULL AND due_at <= ? ORDER BY due_at LIMIT ?`, now, want).toArray() as unknown as SegmentState[];
    for (const state of rows) {
      if (candidates.length >= want) break;
      const edit = new SegmentEdit(state, headersOf(sql, ds, state.seg)!);
      edits.set(state.seg, edit);
      edit.headers.forEach((header, slot) => {
        if (candidates.length >= want || edit.isSettled(slot) || header.dueAt > now || ds.leases.has(slotKey(state.seg, slot))) return;
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
 * Up to `want` ready slots of segments after the cursor, in arrival order. `cursor` is
 * the last segment all of whose ready slots are taken by these (the cursor may move
 * there once they are leased); `truncated` when the scan stopped at its bound.
 */
function readFresh(sql: SqlStorage, ds: DeliveryState, want: number): { candidates: Candidate[]; cursor: number; truncated: boolean } {
  const candidates: Candidate[] = [];
  let cursor = ds.cursor;
  let after = ds.cursor;
  let budget = want + SCAN_SLACK;
  if (want <= 0) return { candidates, cursor, truncated: false };
  for (;;) {
    const rows = sql.exec(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? AND due_at IS NULL ORDER BY seg LIMIT ?`, after, SCAN_CHUNK).toArray() as unknown as SegmentState[];
    if (rows.length === 0) return { candidates, cursor, truncated: false };
    for (const state of rows) {
      after = state.seg;
      const headers = headersOf(sql, ds, state.seg)!;
      const settled = Settled.of(state.settled);
      let whole = true;
      for (let slot = 0; slot < headers.length; slot++) {
        if (settled.has(slot) || ds.leases.has(slotKey(state.seg, slot))) continue;
        if (candidates.length >= want) {
          whole = false;
          break;
        }
        candidates.push({ seg: state.seg, slot, header: headers[slot]! });
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
  let count = 0;
  let bytes = 0;
  for (const c of candidates) {
    let b = bodies.get(c.seg);
    if (!b) bodies.set(c.seg, (b = new Bodies(sql, c.seg, headersOf(sql, ds, c.seg)!)));
    const body = b.of(c.slot);
    if (crc32(body) !== c.header.checksum) {
      sql.exec("INSERT OR REPLACE INTO quarantine (id, body, checksum, reason, detected_at) VALUES (?, ?, ?, 'checksum mismatch', ?)", c.header.id, body, c.header.checksum, now);
      let edit = edits.get(c.seg) ?? quarantined.get(c.seg);
      if (!edit) quarantined.set(c.seg, (edit = new SegmentEdit(readState(sql, c.seg)!, headersOf(sql, ds, c.seg)!)));
      if (edit.settle(c.slot)) {
        count++;
        bytes += c.header.size;
      }
      continue;
    }
    const key = slotKey(c.seg, c.slot);
    const copy = copyOf(c.header, c.seg, c.slot);
    ds.hold(key, { id: c.header.id, lease, until: now + leaseMs, counts: countAttempt });
    messages.push({
      id: c.header.id,
      body,
      contentType: c.header.contentType,
      enqueuedAt: timestampOf(c.header),
      attempts: c.header.attempts + (countAttempt ? 1 : 0),
      leaseId: leaseIdOf({ copy, seg: c.seg, slot: c.slot, lease }),
      copyKey: copy,
    });
  }
  for (const edit of quarantined.values()) edit.commit(sql, ds);
  ds.bump("quarantined", count);
  return { messages, delta: { count: -count, bytes: -bytes } };
}

/** What a lease reference names here, when it can be current: its slot unsettled, the message id its header's. */
interface Resolved {
  name: LeaseName;
  ref: LeaseRef;
  /** The memory lease it holds, or null for one lost to a restart or run out (nobody holds the slot). */
  held: MemoryLease | null;
  /** The delivery is counted in the header already: its lease ran out and the message was rewritten, or it was a stored lease of the old schema. */
  counted: boolean;
}

/**
 * Groups references by segment, each resolved against the memory leases: a malformed
 * lease id, or a slot someone else holds, is stale at once. Whether the slot is still
 * unsettled and the id its header's is checked against the segment (byHeader).
 */
function resolveAll(sql: SqlStorage, ds: DeliveryState, refs: ReadonlyArray<{ ref: LeaseRef; kind: number }>, stale: string[]): Map<number, Array<Resolved & { kind: number }>> {
  const bySeg = new Map<number, Array<Resolved & { kind: number }>>();
  for (const { ref, kind } of refs) {
    const legacy = parseLeaseId(ref.leaseId) ? null : legacyLease(sql, ref.leaseId);
    const name = legacy?.name ?? parseLeaseId(ref.leaseId);
    if (!name) {
      stale.push(ref.id);
      continue;
    }
    let key = slotKey(name.seg, name.slot);
    const held = ds.held(key, ref.id, name.lease);
    // A lease that ran out names the message's new slot while nobody has leased it since.
    const lapsed = held ? undefined : ds.lapsed.get(key);
    if (lapsed && lapsed.id === ref.id && lapsed.lease === name.lease) {
      const [seg, slot] = lapsed.key.split(".").map(Number) as [number, number];
      Object.assign(name, { seg, slot });
      key = lapsed.key;
    }
    if (!held && ds.leases.has(key)) {
      stale.push(ref.id);
      continue;
    }
    const list = bySeg.get(name.seg) ?? [];
    list.push({ name, ref, held: held ?? null, counted: legacy?.counted ?? (lapsed !== undefined && key === lapsed.key), kind });
    bySeg.set(name.seg, list);
  }
  return bySeg;
}

/**
 * A lease id of the one-row-per-message schema (`<seq>-<lease>`), handed out before the
 * shard converted to segments: the slot its row became, when the old settle would have
 * taken that lease (schema.ts convertMessagesToSegments). A stored lease counted its
 * delivery in the row's attempts already.
 */
function legacyLease(sql: SqlStorage, leaseId: string): { name: LeaseName; counted: boolean } | null {
  const m = /^(\d+)-([0-9a-f]+)$/.exec(leaseId);
  if (!m) return null;
  const row = sql.exec<{ seg: number; slot: number; lease: string }>("SELECT seg, slot, lease FROM legacy_rows WHERE seq = ?", Number(m[1])).toArray()[0];
  if (!row || (row.lease !== "*" && row.lease !== m[2])) return null;
  return { name: { copy: "", seg: row.seg, slot: row.slot, lease: m[2]! }, counted: row.lease !== "*" };
}

const ACK = 0;
const DEAD_LETTER = 1;
const DROP = 2;
const RETRY = 3;

export function settle(sql: SqlStorage, ds: DeliveryState, now: number, req: SettleRequest): { result: SettleResult; delta: BacklogDelta } {
  const stale: string[] = [];
  const tally = [0, 0, 0, 0];
  let count = 0;
  let bytes = 0;
  const refs = [
    ...req.acks.map((ref) => ({ ref, kind: ACK })),
    ...req.deadLettered.map((ref) => ({ ref, kind: DEAD_LETTER })),
    ...req.dropped.map((ref) => ({ ref, kind: DROP })),
    ...req.retries.map((ref) => ({ ref, kind: RETRY })),
  ];
  const delays = new Map(req.retries.map((r) => [r.leaseId, r.delayMs]));
  const rewrites: NewMessage[] = [];
  for (const [seg, list] of resolveAll(sql, ds, refs, stale)) {
    const state = readState(sql, seg);
    if (!state) {
      for (const r of list) stale.push(r.ref.id);
      continue;
    }
    const edit = new SegmentEdit(state, headersOf(sql, ds, seg)!);
    const bodies = new Bodies(sql, seg, edit.headers);
    for (const r of list) {
      const h = edit.headers[r.name.slot];
      if (!h || h.id !== r.ref.id || !edit.settle(r.name.slot)) {
        stale.push(r.ref.id);
        continue;
      }
      ds.leases.delete(slotKey(seg, r.name.slot));
      tally[r.kind]!++;
      if (r.kind === RETRY) {
        // A lease lost to a restart was a delivery too: it counts. One that ran out was counted when it did.
        const counts = r.counted || r.held?.counts === false ? 0 : 1;
        rewrites.push(rewritten(h, seg, r.name.slot, bodies.of(r.name.slot), counts, now + (delays.get(r.ref.leaseId) ?? 0)));
      } else {
        count++;
        bytes += h.size;
      }
    }
    edit.commit(sql, ds);
  }
  writeSegments(sql, ds, 0, now, rewrites, null);
  const [acked, deadLettered, dropped, retried] = tally as [number, number, number, number];
  ds.bump("acked", acked);
  ds.bump("dead_lettered", deadLettered);
  ds.bump("dropped", dropped);
  ds.bump("retried", retried);
  return { result: { acked, retried, deadLettered, dropped, stale }, delta: { count: -count, bytes: -bytes } };
}

/** Moves the end of still-held leases forward; returns the ids it extended. */
export function extend(ds: DeliveryState, now: number, refs: LeaseRef[], leaseMs: number): string[] {
  const extended: string[] = [];
  for (const ref of refs) {
    const name = parseLeaseId(ref.leaseId);
    if (!name) continue;
    const key = slotKey(name.seg, name.slot);
    if (!ds.held(key, ref.id, name.lease)) continue;
    ds.extend(key, now + leaseMs);
    extended.push(ref.id);
  }
  return extended;
}

/** The messages still held under the given leases (or lost to a restart, unsettled), bodies checked: for a dead-letter move. */
export function readLeased(sql: SqlStorage, ds: DeliveryState, refs: LeaseRef[]): LeasedMessage[] {
  const out: LeasedMessage[] = [];
  for (const [seg, list] of resolveAll(sql, ds, refs.map((ref) => ({ ref, kind: ACK })), [])) {
    const state = readState(sql, seg);
    if (!state) continue;
    const headers = headersOf(sql, ds, seg)!;
    const settled = Settled.of(state.settled);
    const bodies = new Bodies(sql, seg, headers);
    for (const r of list) {
      const h = headers[r.name.slot];
      if (!h || h.id !== r.ref.id || settled.has(r.name.slot)) continue;
      const body = bodies.of(r.name.slot);
      if (crc32(body) !== h.checksum) continue;
      // The delivery the consumer saw is not in the header yet (unless its lease ran out): count it as it saw it.
      const seen = r.counted || r.held?.counts === false ? 0 : 1;
      out.push({ id: h.id, body, contentType: h.contentType, enqueuedAt: timestampOf(h), attempts: h.attempts + seen, leaseId: r.ref.leaseId, copyKey: copyOf(h, seg, r.name.slot) });
    }
  }
  return out;
}

/** When something not ready now becomes ready: a scheduled segment or a memory lease running out. */
function nextVisible(sql: SqlStorage, ds: DeliveryState, now: number): number | null {
  const row = sql.exec<{ t: number | null }>("SELECT MIN(due_at) AS t FROM segments WHERE due_at IS NOT NULL AND due_at > ?", now).one();
  const lease = ds.earliestExpiry();
  if (row.t === null) return lease;
  return lease === null ? row.t : Math.min(row.t, lease);
}
