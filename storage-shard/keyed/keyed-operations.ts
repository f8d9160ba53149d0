/**
 * Operations on keyed messages that are not delivery (segment-leases.ts and keyed-scan.ts are)
 * nor the keys held back (held-keys.ts): an operator's release of a held key, and what a
 * lookup, a peek and a redrive (segment-operations.ts) must know of a key's order. A keyed
 * message is a segment slot like any other (docs/ordered-lanes.md); a key has state only while
 * something holds it back (key-book.ts). Every function runs inside the caller's transactionSync.
 */
import type { LeasedMessage } from "../../src/kernel/protocol";
import { leaseSlots } from "../segments/segment-leases";
import type { DeliveryState } from "../segments/delivery-state";
import type { Candidate } from "./keyed-scan";
import { comparePos, posOf, slotKey, type Header } from "../segments/segment";
import { headersOf, readState, type SegmentState } from "../segments/segment-rows";
import { KEYED_DUE } from "../segments/segment-placement";
import { blockedFrom, bridgedAny } from "../handoff/bridges";
import { byPos, headOf, liveSlot, type KeyedSlot } from "./keyed-slots";

/** What a shard answers an operator's release of a key (takeKeyHead). */
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
 * under a new lease that counts no attempt (attempts stay as the consumer saw them), to be
 * moved to the dead-letter queue and settled as dead-lettered. Only the head the operator
 * named (`expected`), and only while it holds its key: a release must never dead-letter a
 * message a consumer could have been given, nor the next head after the one the operator saw
 * was acked. A batch of the key in flight loses its slots of the key, which are deliverable
 * again in their order once the head is gone.
 */
export function takeKeyHead(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  key: string,
  expected: string,
  leaseMs: number,
): HeadTaken {
  const hold = ds.keys.holds.get(key);
  const head = headOf(sql, ds, key, hold);
  if (!head) return null;
  const lease = hold?.lease ?? null;
  const from = lease === null ? blockedFrom(sql, key) : null;
  // Waiting on another shard's messages of the key: those are the ones to release.
  if (from !== null && (head.header.gen ?? 0) >= from) return { notHeld: head.header.id };
  if (lease === null && head.header.dueAt <= now) return { notHeld: head.header.id };
  if (head.header.id !== expected) return { heldBy: head.header.id };
  if (lease !== null) {
    for (const s of ds.keys.slotsOf(lease, key)) {
      ds.drop(s);
      const [seg, slot] = s.split(".").map(Number) as [number, number];
      const state = readState(sql, seg);
      const h = state ? headersOf(sql, ds, seg)?.[slot] : undefined;
      if (state && h && !(seg === head.seg && slot === head.slot)) giveBack(ds, now, state, slot, h);
    }
    trimKeyedLease(sql, ds, lease);
  }
  unwait(ds, key, head.seg, head.slot);
  const taken = leaseSlots(sql, ds, [{ seg: head.seg, slot: head.slot, header: head.header }], now, leaseMs, false)
    .messages[0];
  // A head whose body fails its checksum was quarantined instead: the key holds nothing now.
  return taken ? { taken } : { notHeld: head.header.id };
}

/**
 * A keyed slot whose lease was dropped unsettled (a redrive gave it back, a release took the
 * key's batch): deliverable again in its key's order. A copy written again waits at its key's
 * head, due when it was due (it never waits on the due index); a slot of a segment the cursor
 * reads is left for its key's next lease to read, as a message the scan passed is.
 */
export function giveBack(ds: DeliveryState, now: number, state: SegmentState, slot: number, h: Header): void {
  const key = h.key!;
  if (state.due_at === KEYED_DUE) {
    ds.keys.wait(key, now, [
      { seg: state.seg, slot, pos: posOf(h, state.seg, slot), id: h.id, dueAt: Math.max(h.dueAt, now), rewrite: true },
    ]);
  } else {
    ds.keys.park(key, state.seg, now);
  }
}

/**
 * A keyed lease some of whose slots were dropped unsettled: its row keeps only those it still
 * holds, so a restart does not hold the others again under it (settled slots it skips itself).
 */
export function trimKeyedLease(sql: SqlStorage, ds: DeliveryState, lease: string): void {
  const held = ds.keys.leases.get(lease);
  if (!held) return;
  const row = sql.exec<{ slots: string }>("SELECT slots FROM key_leases WHERE lease = ?", lease).toArray()[0];
  if (!row) return;
  const kept = (JSON.parse(row.slots) as Array<[number, number, ...unknown[]]>).filter(([seg, slot]) =>
    held.slots.has(slotKey(seg, slot)),
  );
  sql.exec("UPDATE key_leases SET slots = ? WHERE lease = ?", JSON.stringify(kept), lease);
}

/** A message of `key` taken off its waiting list (leased, settled): the key's next one is its head. */
export function unwait(ds: DeliveryState, key: string, seg: number, slot: number): void {
  const hold = ds.keys.holds.get(key);
  const i = hold ? hold.waiting.findIndex((w) => w.seg === seg && w.slot === slot) : -1;
  if (i < 0) return;
  hold!.waiting.splice(i, 1);
  ds.keys.tidy(key);
}

/** When a keyed message becomes deliverable behind its key's waiting head, if that head is ahead of it and not due; else null. */
export function keyWaitsUntil(ds: DeliveryState, now: number, seg: number, slot: number, h: Header): number | null {
  const head = ds.keys.holds.get(h.key!)?.waiting[0];
  return head && head.dueAt > now && comparePos(head.pos, posOf(h, seg, slot)) < 0 ? head.dueAt : null;
}

/**
 * Keys a hand-off holds, asked once a call: `from` is the first epoch of a key held back
 * (bridges.ts), and nothing asks while no bridge holds any key.
 */
class HandOffs {
  private readonly from = new Map<string, number | null>();
  constructor(private readonly sql: SqlStorage) {}

  holds(h: Header): boolean {
    if (!bridgedAny(this.sql)) return false;
    const key = h.key!;
    if (!this.from.has(key)) this.from.set(key, blockedFrom(this.sql, key));
    const from = this.from.get(key)!;
    return from !== null && (h.gen ?? 0) >= from;
  }
}

/**
 * A peek's test of keyed slots, met in segment order: shown only if a consumer could be given
 * it now (not leased, due, no batch of its key in flight, no head of its key ahead of it, no
 * hand-off holding it), and never behind a message of its key that is not shown. A message
 * the scan passed is no bar: the key's next lease reads it first.
 */
export class PeekGate {
  private readonly hidden = new Set<string>();
  private readonly handOffs: HandOffs;

  constructor(
    sql: SqlStorage,
    private readonly ds: DeliveryState,
    private readonly now: number,
  ) {
    this.handOffs = new HandOffs(sql);
  }

  shows(seg: number, slot: number, h: Header): boolean {
    const key = h.key!;
    if (this.hidden.has(key) || !this.free(seg, slot, h)) {
      this.hidden.add(key);
      return false;
    }
    return true;
  }

  /** A message of `key` the caller could not show after all: none after it is shown either. */
  hide(key: string): void {
    this.hidden.add(key);
  }

  private free(seg: number, slot: number, h: Header): boolean {
    if (h.dueAt > this.now || this.ds.leases.has(slotKey(seg, slot))) return false;
    const hold = this.ds.keys.holds.get(h.key!);
    if (
      hold &&
      (hold.lease !== null || (hold.waiting.length > 0 && comparePos(posOf(h, seg, slot), hold.waiting[0]!.pos) > 0))
    )
      return false;
    return !this.handOffs.holds(h);
  }
}

/**
 * A redrive's keyed messages (segment-operations.ts leaseMatching): the scan hands in every unsettled
 * keyed slot it reads, and `take` answers those the move may lease, each key's in its order.
 * A key is skipped while a batch of it is in flight; in its order, a message the filter skips
 * stays and the ones after it may go ahead of it, but one not due, leased or held by a hand-off
 * stops its key. A key's waiting messages (copies written again, in scheduled segments the
 * scan may reach late or not at all) are counted in from the first of its messages met.
 */
export class KeyedMatches {
  private readonly byKey = new Map<string, KeyedSlot[]>();
  private readonly met = new Set<string>();
  /** Keys the scan found stopped so far: their later matches are not counted. */
  private readonly stopped = new Set<string>();
  private readonly handOffs: HandOffs;
  /** Matches the scan met that `take` will likely lease: what it counts toward its batch. */
  likely = 0;

  constructor(
    private readonly sql: SqlStorage,
    private readonly ds: DeliveryState,
    private readonly now: number,
    private readonly matches: (h: Header) => boolean,
  ) {
    this.handOffs = new HandOffs(sql);
  }

  add(seg: number, slot: number, h: Header): void {
    const key = h.key!;
    let list = this.byKey.get(key);
    if (!list) {
      this.byKey.set(key, (list = []));
      if ((this.ds.keys.holds.get(key)?.lease ?? null) !== null) this.stopped.add(key);
      for (const w of this.ds.keys.holds.get(key)?.waiting ?? []) {
        const live = liveSlot(this.sql, this.ds, w.seg, w.slot, w.id);
        if (live) this.meet(list, live);
      }
    }
    this.meet(list, { seg, slot, header: h, pos: posOf(h, seg, slot) });
  }

  private meet(list: KeyedSlot[], at: KeyedSlot): void {
    const id = slotKey(at.seg, at.slot);
    if (this.met.has(id)) return;
    this.met.add(id);
    list.push(at);
    const key = at.header.key!;
    if (this.stopped.has(key)) return;
    if (this.stops(at)) this.stopped.add(key);
    else if (this.matches(at.header)) this.likely++;
  }

  private stops(at: KeyedSlot): boolean {
    return at.header.dueAt > this.now || this.ds.leases.has(slotKey(at.seg, at.slot)) || this.handOffs.holds(at.header);
  }

  /** Up to `want` matches to lease, each key's in its order; they leave their key's waiting list. */
  take(want: number): Candidate[] {
    const out: Candidate[] = [];
    for (const [key, list] of this.byKey) {
      if (out.length >= want) break;
      if ((this.ds.keys.holds.get(key)?.lease ?? null) !== null) continue;
      list.sort(byPos);
      for (const at of list) {
        if (out.length >= want || this.stops(at)) break;
        if (!this.matches(at.header)) continue;
        out.push({ seg: at.seg, slot: at.slot, header: at.header });
        unwait(this.ds, key, at.seg, at.slot);
      }
    }
    return out;
  }
}
