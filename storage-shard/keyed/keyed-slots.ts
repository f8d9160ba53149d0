/**
 * A key's unsettled messages here and which comes first in its order: every keyed slot of the
 * keyed segments, one slot while it still holds its message, the first of a key's batch in
 * flight, and a key's head. What an operator's reading of the keys (held-keys.ts) and the
 * operations on keyed messages (keyed-operations.ts) find keys' messages by. Every function
 * runs inside the caller's transactionSync.
 */
import type { DeliveryState } from "../segments/delivery-state";
import type { KeyHold } from "./key-book";
import type { Candidate } from "./keyed-scan";
import { comparePos, posOf, type Pos } from "../segments/segment";
import { headersOf, readState, settledOf } from "../segments/segment-rows";
import { KEYED_DUE } from "../segments/segment-placement";

/** An unsettled keyed slot, with its place in its key's order. */
export interface KeyedSlot extends Candidate {
  pos: Pos;
}

export const byPos = (a: KeyedSlot, b: KeyedSlot): number => comparePos(a.pos, b.pos);

/** Keyed segments read per page of a pass over them. */
const KEYED_PAGE = 64;

/**
 * Every unsettled keyed slot here, segment by segment: `rewrite` when it is a copy written
 * again (its segment is KEYED_DUE). Reads the keyed segments' headers: an operator's pass.
 */
export function eachKeyed(sql: SqlStorage, ds: DeliveryState, visit: (at: KeyedSlot, rewrite: boolean) => void): void {
  for (let after = 0; ;) {
    const rows = sql
      .exec<{ seg: number; due_at: number | null; settled: ArrayBuffer }>(
        "SELECT seg, due_at, settled FROM segments WHERE keyed > 0 AND seg > ? ORDER BY seg LIMIT ?",
        after,
        KEYED_PAGE,
      )
      .toArray();
    if (rows.length === 0) return;
    for (const r of rows) {
      after = r.seg;
      const headers = headersOf(sql, ds, r.seg);
      if (!headers) continue;
      const settled = settledOf(ds, r.seg, r.settled);
      headers.forEach((h, slot) => {
        if (h.key !== undefined && !settled.has(slot))
          visit({ seg: r.seg, slot, header: h, pos: posOf(h, r.seg, slot) }, r.due_at === KEYED_DUE);
      });
    }
  }
}

/** A slot's header while it is unsettled and still the message `id`, else null. */
export function liveSlot(sql: SqlStorage, ds: DeliveryState, seg: number, slot: number, id: string): KeyedSlot | null {
  const state = readState(sql, seg);
  const h = state ? headersOf(sql, ds, seg)?.[slot] : undefined;
  if (!state || !h || h.id !== id || settledOf(ds, seg, state.settled).has(slot)) return null;
  return { seg, slot, header: h, pos: posOf(h, seg, slot) };
}

/** The first message of `key` (by its place) in the lease `lease`. */
export function leaseHead(sql: SqlStorage, ds: DeliveryState, lease: string, key: string): KeyedSlot | null {
  let best: KeyedSlot | null = null;
  for (const s of ds.keys.slotsOf(lease, key)) {
    const [seg, slot] = s.split(".").map(Number) as [number, number];
    const h = headersOf(sql, ds, seg)?.[slot];
    if (!h) continue;
    const at = { seg, slot, header: h, pos: posOf(h, seg, slot) };
    if (!best || byPos(at, best) < 0) best = at;
  }
  return best;
}

/**
 * A key's head: its unsettled message with the lowest place. Its batch in flight starts with
 * it (nothing earlier of a key is left out of its batch), else its first waiting message is it
 * while no message the scan passed is ahead; else the keyed segments are read.
 */
export function headOf(sql: SqlStorage, ds: DeliveryState, key: string, hold: KeyHold | undefined): KeyedSlot | null {
  // A batch in flight and a retried copy waiting may both hold the key: the head is the first of them in the key's order.
  const leased = hold && hold.lease !== null ? leaseHead(sql, ds, hold.lease, key) : null;
  const w = hold?.waiting[0];
  const waiting =
    w && (hold!.parkedFrom === null || comparePos(w.pos, [hold!.parkedFrom, 0]) <= 0)
      ? liveSlot(sql, ds, w.seg, w.slot, w.id)
      : null;
  if (leased && waiting) return byPos(leased, waiting) <= 0 ? leased : waiting;
  if (leased ?? waiting) return leased ?? waiting;
  let best: KeyedSlot | null = null;
  eachKeyed(sql, ds, (at) => {
    if (at.header.key === key && (!best || byPos(at, best) < 0)) best = at;
  });
  return best;
}
