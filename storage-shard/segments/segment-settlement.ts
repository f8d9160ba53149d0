/**
 * The settling side of a storage shard: acks, retries, dead-letters and drops of leased
 * messages, lease extensions, and reading what a lease holds (for a dead-letter move). Like
 * segment-leases.ts, plain functions over the shard's segments and its DeliveryState, each inside
 * the caller's transactionSync. An ack settles its slot: one write of the segment row for
 * all the slots one call settles there, or the row's delete when none is left. A retry
 * settles the slot and rewrites the message into a new scheduled segment with one more
 * attempt and its due time, in the same transaction. A reference under a lease someone
 * else holds now settles nothing (stale).
 */
import { crc32 } from "../../src/kernel/checksum";
import type { LeasedMessage, LeaseRef, SettleRequest, SettleResult } from "../../src/kernel/protocol";
import { timestampOf, writeRewrites, type BacklogDelta } from "./segment-leases";
import type { DeliveryState, MemoryLease } from "./delivery-state";
import { copyOf, parseLeaseId, slotKey, type LeaseName } from "./segment";
import { Bodies, headersOf, readState, settledOf, type SegmentState } from "./segment-rows";
import { rewritten } from "./segment-writes";
import { SegmentEdit } from "./segment-edit";
import type { NewMessage } from "./segment-placement";
import { extendKeyedLease } from "../keyed/keyed-leases";
import { forgetMovesOf } from "./remembered-ids";

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
function resolveAll(
  sql: SqlStorage,
  ds: DeliveryState,
  refs: ReadonlyArray<{ ref: LeaseRef; kind: number }>,
  stale: string[],
): Map<number, Array<Resolved & { kind: number }>> {
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
    list.push({
      name,
      ref,
      held: held ?? null,
      counted: legacy?.counted ?? (lapsed !== undefined && key === lapsed.key),
      kind,
    });
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
  // A lane lease id (`L<lseq>-<lease>`) from before keyed messages moved to segments: the slot its message became (keyed-upgrade.ts).
  const lane = /^L(\d+)-([0-9a-f]+)$/.exec(leaseId);
  if (lane) {
    const at = sql
      .exec<{ seg: number; slot: number }>("SELECT seg, slot FROM legacy_lanes WHERE lseq = ?", Number(lane[1]))
      .toArray()[0];
    return at ? { name: { copy: `L${lane[1]}`, seg: at.seg, slot: at.slot, lease: lane[2]! }, counted: false } : null;
  }
  const m = /^(\d+)-([0-9a-f]+)$/.exec(leaseId);
  if (!m) return null;
  const row = sql
    .exec<{ seg: number; slot: number; lease: string }>(
      "SELECT seg, slot, lease FROM legacy_rows WHERE seq = ?",
      Number(m[1]),
    )
    .toArray()[0];
  if (!row || (row.lease !== "*" && row.lease !== m[2])) return null;
  return { name: { copy: "", seg: row.seg, slot: row.slot, lease: m[2]! }, counted: row.lease !== "*" };
}

const ACK = 0;
const DEAD_LETTER = 1;
const DROP = 2;
const RETRY = 3;

export function settle(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  req: SettleRequest,
): { result: SettleResult; delta: BacklogDelta; keysReady: number } {
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
  const heldKeys = ds.keys.holds.size;
  const rewrites: NewMessage[] = [];
  // Messages that leave for another queue: dead-lettered, or acked by a redrive that moved them.
  const movedOut: string[] = [];
  for (const [seg, list] of resolveAll(sql, ds, refs, stale)) {
    const state = readState(sql, seg);
    if (!state) {
      for (const r of list) stale.push(r.ref.id);
      continue;
    }
    if (req.deferrable && list.every((r) => r.kind === ACK)) {
      const acked = deferAcks(sql, ds, now, state, list, stale);
      tally[ACK]! += acked.count;
      count += acked.count;
      bytes += acked.bytes;
      continue;
    }
    const edit = new SegmentEdit(state, headersOf(sql, ds, seg)!, ds);
    const bodies = new Bodies(sql, seg, edit.headers);
    for (const r of list) {
      const h = edit.headers[r.name.slot];
      if (!h || h.id !== r.ref.id || !edit.settle(r.name.slot)) {
        stale.push(r.ref.id);
        continue;
      }
      ds.drop(slotKey(seg, r.name.slot));
      tally[r.kind]!++;
      if (r.kind === DEAD_LETTER || (r.kind === ACK && req.moved)) movedOut.push(h.id);
      if (r.kind === RETRY) {
        // A lease lost to a restart was a delivery too: it counts. One that ran out was counted when it did.
        const counts = r.counted || r.held?.counts === false ? 0 : 1;
        rewrites.push(
          rewritten(h, seg, r.name.slot, bodies.of(r.name.slot), counts, now + (delays.get(r.ref.leaseId) ?? 0)),
        );
      } else {
        count++;
        bytes += h.size;
      }
    }
    edit.commit(sql, ds);
  }
  writeRewrites(sql, ds, now, rewrites);
  forgetMovesOf(sql, movedOut);
  const [acked, deadLettered, dropped, retried] = tally as [number, number, number, number];
  ds.bump("acked", acked);
  ds.bump("dead_lettered", deadLettered);
  ds.bump("dropped", dropped);
  ds.bump("retried", retried);
  // Keys let go by this settle whose next messages can go now: a consumer is woken for them if nobody leases them soon.
  const keysReady = heldKeys > 0 || ds.keys.holds.size > 0 ? ds.keys.ready(now).length : 0;
  return {
    result: { acked, retried, deadLettered, dropped, stale },
    delta: { count: -count, bytes: -bytes },
    keysReady,
  };
}

/**
 * Acks nobody waits on, of one segment: settled in memory now (never leased again, counted
 * at once) and written with the next write of the segment (DeliveryState.deferred).
 */
function deferAcks(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  state: SegmentState,
  list: ReadonlyArray<Resolved>,
  stale: string[],
): { count: number; bytes: number } {
  const headers = headersOf(sql, ds, state.seg)!;
  const settled = settledOf(ds, state.seg, state.settled);
  let count = 0;
  let bytes = 0;
  for (const r of list) {
    const slot = r.name.slot;
    const h = headers[slot];
    if (!h || h.id !== r.ref.id || settled.has(slot)) {
      stale.push(r.ref.id);
      continue;
    }
    settled.set(slot);
    ds.defer(state.seg, slot, now);
    ds.drop(slotKey(state.seg, slot));
    count++;
    bytes += h.size;
  }
  return { count, bytes };
}

/** Moves the end of still-held leases forward; returns the ids it extended. */
export function extend(sql: SqlStorage, ds: DeliveryState, now: number, refs: LeaseRef[], leaseMs: number): string[] {
  const extended: string[] = [];
  const keyed = new Set<string>();
  for (const ref of refs) {
    const name = parseLeaseId(ref.leaseId) ?? legacyLease(sql, ref.leaseId)?.name;
    if (!name) continue;
    const key = slotKey(name.seg, name.slot);
    if (!ds.held(key, ref.id, name.lease)) continue;
    ds.extend(key, now + leaseMs);
    const l = ds.keys.leases.get(name.lease);
    if (l) {
      l.until = Math.max(l.until, now + leaseMs);
      keyed.add(name.lease);
    }
    extended.push(ref.id);
  }
  // A keyed lease is a row: its end moves with it, one write a lease.
  for (const lease of keyed) extendKeyedLease(sql, lease, now + leaseMs);
  return extended;
}

/** The messages still held under the given leases (or lost to a restart, unsettled), bodies checked: for a dead-letter move. */
export function readLeased(sql: SqlStorage, ds: DeliveryState, refs: LeaseRef[]): LeasedMessage[] {
  const out: LeasedMessage[] = [];
  for (const [seg, list] of resolveAll(
    sql,
    ds,
    refs.map((ref) => ({ ref, kind: ACK })),
    [],
  )) {
    const state = readState(sql, seg);
    if (!state) continue;
    const headers = headersOf(sql, ds, seg)!;
    const settled = settledOf(ds, state.seg, state.settled);
    const bodies = new Bodies(sql, seg, headers);
    for (const r of list) {
      const h = headers[r.name.slot];
      if (!h || h.id !== r.ref.id || settled.has(r.name.slot)) continue;
      const body = bodies.of(r.name.slot);
      if (crc32(body) !== h.checksum) continue;
      // The delivery the consumer saw is not in the header yet (unless its lease ran out): count it as it saw it.
      const seen = r.counted || r.held?.counts === false ? 0 : 1;
      out.push({
        id: h.id,
        body,
        contentType: h.contentType,
        enqueuedAt: timestampOf(h),
        attempts: h.attempts + seen,
        leaseId: r.ref.leaseId,
        copyKey: copyOf(h, seg, r.name.slot),
        ...(h.key !== undefined ? { orderingKey: h.key } : {}),
      });
    }
  }
  return out;
}
