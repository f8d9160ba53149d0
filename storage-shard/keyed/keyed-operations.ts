/**
 * Operations on keyed messages that are not delivery (segment-leases.ts and keyed-scan.ts are): the
 * keys held back as operators see them and as heartbeats count them, an operator's release of
 * a held key, and what a lookup, a peek and a redrive (segment-operations.ts) must know of a key's
 * order. A keyed message is a segment slot like any other (docs/ordered-lanes.md); a key has
 * state only while something holds it back (key-book.ts). Every function runs inside the
 * caller's transactionSync.
 */
import type { HoldReason, LaneFigures } from "../../src/kernel/figures";
import type { HeldKey } from "../../src/kernel/message-operations";
import type { LeasedMessage } from "../../src/kernel/protocol";
import { leaseSlots } from "../segments/segment-leases";
import type { DeliveryState } from "../segments/delivery-state";
import type { KeyHold } from "./key-book";
import type { Candidate } from "./keyed-scan";
import { comparePos, posOf, slotKey, type Header, type Pos } from "../segments/segment";
import { headersOf, readState, settledOf, type SegmentState } from "../segments/segment-rows";
import { KEYED_DUE } from "../segments/segment-placement";
import { blockedFrom, bridgedAny, bridgedKeys } from "../handoff/bridges";

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

/** An unsettled keyed slot, with its place in its key's order. */
interface KeyedSlot extends Candidate {
  pos: Pos;
}

const byPos = (a: KeyedSlot, b: KeyedSlot): number => comparePos(a.pos, b.pos);

/** Keyed segments read per page of a pass over them. */
const KEYED_PAGE = 64;

/**
 * Every unsettled keyed slot here, segment by segment: `rewrite` when it is a copy written
 * again (its segment is KEYED_DUE). Reads the keyed segments' headers: an operator's pass.
 */
function eachKeyed(sql: SqlStorage, ds: DeliveryState, visit: (at: KeyedSlot, rewrite: boolean) => void): void {
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

/** One key's messages here as the pass finds them: how many, and its head (the lowest place). */
interface KeySeen {
  count: number;
  head: KeyedSlot;
  rewrite: boolean;
}

/**
 * Why a key is held back now, or null when its head could be leased. Its batch in flight comes
 * first, then a hand-off holding its head, then its head's own time (a retry's, or a delay's).
 */
function reasonOf(
  ds: DeliveryState,
  now: number,
  key: string,
  seen: KeySeen,
  from: number | undefined,
): HoldReason | null {
  if ((ds.keys.holds.get(key)?.lease ?? null) !== null) return "leased";
  const h = seen.head.header;
  if (from !== undefined && (h.gen ?? 0) >= from) return "handoff";
  if (h.dueAt > now) return seen.rewrite || h.attempts > 0 ? "retry" : "delayed";
  return null;
}

/**
 * The keys held back here, longest held first (at most `limit`), and over all of them how many
 * keys have messages here and how many are held, by reason. One pass over the keyed segments:
 * a delayed head the lease scan has not reached yet is in no hold, and is found here.
 */
export function heldKeys(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  limit: number,
): { keys: HeldKey[]; lanes: number; held: Record<HoldReason, number> } {
  const seen = new Map<string, KeySeen>();
  eachKeyed(sql, ds, (at, rewrite) => {
    const key = at.header.key!;
    const s = seen.get(key);
    if (!s) seen.set(key, { count: 1, head: at, rewrite });
    else {
      s.count++;
      if (byPos(at, s.head) < 0) Object.assign(s, { head: at, rewrite });
    }
  });
  const bridged = bridgedKeys(sql, [...seen.keys()]);
  const held: Record<HoldReason, number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  const keys: HeldKey[] = [];
  for (const [key, s] of seen) {
    const reason = reasonOf(ds, now, key, s, bridged.get(key));
    if (reason === null) continue;
    held[reason]++;
    // A key with no hold has been held since its head arrived: a delayed head nothing has read yet, or one a hand-off holds.
    keys.push({
      key,
      reason,
      blocker: null,
      since: ds.keys.holds.get(key)?.since ?? s.head.header.enqueuedAt,
      messages: s.count,
    });
  }
  keys.sort((a, b) => a.since - b.since || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const listed = keys.slice(0, Math.max(0, limit));
  for (const k of listed) k.blocker = blockerOf(sql, ds, k, seen.get(k.key)!.head);
  return { keys: listed, lanes: seen.size, held };
}

/** The message holding a listed key (the first of its batch in flight, or its head), or the shard a hand-off waits on. */
function blockerOf(sql: SqlStorage, ds: DeliveryState, k: HeldKey, head: KeyedSlot): string | null {
  if (k.reason === "handoff")
    return (
      sql
        .exec<{ holder: string }>(
          "SELECT holder FROM bridges WHERE key = ? AND released = 0 ORDER BY gen LIMIT 1",
          k.key,
        )
        .toArray()[0]?.holder ?? null
    );
  if (k.reason === "leased")
    return leaseHead(sql, ds, ds.keys.holds.get(k.key)!.lease!, k.key)?.header.id ?? head.header.id;
  return head.header.id;
}

/**
 * The keys held here and how many are held back, by reason: what GET .../metrics and
 * Prometheus show, summed over shards. Sent with every heartbeat, so it reads the key book
 * only (one read of the bridges when any holds a key): `lanes` counts the keys with a hold,
 * that is held back, with a batch in flight or with messages the scan passed, not every key
 * with messages here (GET .../ordering/held counts those). A delayed head the scan has not
 * reached yet is not in the book, and not counted until it is.
 */
export function keyFigures(sql: SqlStorage, ds: DeliveryState, now: number): LaneFigures {
  const held: Record<HoldReason, number> = { leased: 0, retry: 0, delayed: 0, handoff: 0 };
  let oldestHeldSince: number | null = null;
  const count = (reason: HoldReason, since: number) => {
    held[reason]++;
    if (oldestHeldSince === null || since < oldestHeldSince) oldestHeldSince = since;
  };
  const open: string[] = [];
  for (const [key, hold] of ds.keys.holds) {
    const head = hold.waiting[0];
    if (hold.lease !== null) count("leased", hold.since);
    else if (head && head.dueAt > now) count(head.rewrite ? "retry" : "delayed", hold.since);
    else open.push(key);
  }
  // Of the others, a key a bridge holds waits on its hand-off (the scan parked its messages).
  for (const key of bridgedKeys(sql, open).keys()) count("handoff", ds.keys.holds.get(key)!.since);
  return { lanes: ds.keys.holds.size, held, oldestHeldSince };
}

/**
 * keyFigures as every keyed message here says it (heldKeys' reading): a delayed head the scan
 * has not reached is counted too. Null on a shard that has not seen a keyed message since it started.
 */
export function exactKeyFigures(sql: SqlStorage, ds: DeliveryState, now: number): LaneFigures | null {
  // A shard that has seen no keyed message since it started (nor held a key from before) reads none:
  // its segments' keyed counts sit after their bodies, which a pass would read through.
  if (!ds.keys.used) return null;
  const { keys, lanes, held } = heldKeys(sql, ds, now, 1);
  return { lanes, held, oldestHeldSince: keys[0]?.since ?? null };
}

/** A slot's header while it is unsettled and still the message `id`, else null. */
function liveSlot(sql: SqlStorage, ds: DeliveryState, seg: number, slot: number, id: string): KeyedSlot | null {
  const state = readState(sql, seg);
  const h = state ? headersOf(sql, ds, seg)?.[slot] : undefined;
  if (!state || !h || h.id !== id || settledOf(ds, seg, state.settled).has(slot)) return null;
  return { seg, slot, header: h, pos: posOf(h, seg, slot) };
}

/** The first message of `key` (by its place) in the lease `lease`. */
function leaseHead(sql: SqlStorage, ds: DeliveryState, lease: string, key: string): KeyedSlot | null {
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
function headOf(sql: SqlStorage, ds: DeliveryState, key: string, hold: KeyHold | undefined): KeyedSlot | null {
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
