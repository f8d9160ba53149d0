/**
 * What one lease call decides about ordering keys (key-book.ts holds them): which keyed
 * messages it may take, in each key's order, and what it leaves behind. A key is in at most
 * one batch; within the batch its messages follow one another in its order. Nothing is
 * changed in the book until the lease is taken (commit): a call that leases nothing (a
 * partial batch waiting) leaves the book as it was, and the next call finds the same.
 *
 * Two ways in: the keys whose next messages wait for them (pull: a due head, then the
 * messages the scan parked, read from `parkedFrom` up to the cursor), and the scan of fresh
 * segments (verdict: take a slot, leave it for its key, or leave a delayed head waiting).
 */
import type { DeliveryState } from "../segments/delivery-state";
import type { Waiting } from "./key-book";
import { posOf, slotKey, type Header } from "../segments/segment";
import { headersOf, readState, settledOf, STATE_COLUMNS, type SegmentState } from "../segments/segment-rows";
import { bridgedKeys } from "../handoff/bridges";

/** A message ready to lease: its segment, slot and header. */
export interface Candidate {
  seg: number;
  slot: number;
  header: Header;
}

/** Slots the pull of parked messages reads at most, beyond the batch it wants. */
const PULL_SLACK = 1000;

export class KeyPlan {
  /** Keys with a message in this batch: their next messages in order may follow. */
  readonly taken = new Set<string>();
  /** Keys whose next message this batch may not take: everything of them behind is left. */
  readonly stopped = new Set<string>();
  /** Keys whose parked messages the pull read to the cursor: nothing of them is left behind. */
  readonly caughtUp = new Set<string>();
  /** Keys whose parked messages the pull read: where it stopped is where they are left now. */
  private readonly pulled = new Set<string>();
  /** Where the scan or the pull left messages of a key behind, the first segment. */
  private readonly parked = new Map<string, number>();
  /** Delayed heads found, to wait for their time. */
  private readonly heads = new Map<string, Waiting>();
  /** Waiting heads taken by the pull, by key: how many from the front. */
  private readonly shifted = new Map<string, number>();
  /** Slots the pull chose (a waiting head may sit in the parked region it reads next). */
  private readonly chosen = new Set<string>();
  /** Keys a hand-off holds from an epoch on (null: none), asked once a call. */
  private readonly bridged = new Map<string, number | null>();

  constructor(
    private readonly sql: SqlStorage,
    private readonly ds: DeliveryState,
    private readonly now: number,
  ) {}

  /** Whether a hand-off holds this message back: another shard holds older messages of its key. */
  handedOff(h: Header): boolean {
    const key = h.key!;
    if (!this.bridged.has(key)) this.bridged.set(key, bridgedKeys(this.sql, [key]).get(key) ?? null);
    const from = this.bridged.get(key)!;
    return from !== null && (h.gen ?? 0) >= from;
  }

  leaveBehind(key: string, seg: number): void {
    const at = this.parked.get(key);
    if (at === undefined || seg < at) this.parked.set(key, seg);
  }

  /**
   * The scan's verdict on a keyed slot not leased nor settled: "take" it (the caller adds it
   * if the batch has room), "leave" it behind for its key, or "skip" it (a delayed head now
   * waiting for its time). Either of the last two lets the cursor pass it.
   */
  verdict(h: Header, seg: number, slot: number): "take" | "leave" | "skip" {
    const key = h.key!;
    this.ds.keys.used = true;
    if (this.stopped.has(key)) return this.leave(key, seg);
    if (this.handedOff(h)) return this.stop(key, seg);
    const flowing = this.taken.has(key) || this.caughtUp.has(key);
    if (!flowing && this.ds.keys.blocks(key, posOf(h, seg, slot))) return this.leave(key, seg);
    if (h.dueAt > this.now) {
      if (!this.heads.has(key))
        this.heads.set(key, { seg, slot, pos: posOf(h, seg, slot), id: h.id, dueAt: h.dueAt, rewrite: false });
      this.stopped.add(key);
      return "skip";
    }
    return "take";
  }

  private leave(key: string, seg: number): "leave" {
    this.leaveBehind(key, seg);
    return "leave";
  }

  private stop(key: string, seg: number): "leave" {
    this.stopped.add(key);
    return this.leave(key, seg);
  }

  /** A key's message taken into the batch. */
  take(key: string): void {
    this.taken.add(key);
  }

  /**
   * Messages of keys whose turn it is, up to `want`, each key's in its order: its due heads
   * (a rewritten copy, or a delayed head the scan has passed), then what the scan parked.
   */
  pull(want: number): Candidate[] {
    const out: Candidate[] = [];
    if (want <= 0 || this.ds.keys.holds.size === 0) return out;
    const pulling = new Map<string, number>();
    for (const key of this.ds.keys.ready(this.now)) {
      if (out.length >= want) break;
      const hold = this.ds.keys.holds.get(key)!;
      let n = 0;
      for (; n < hold.waiting.length && out.length < want; n++) {
        const w = hold.waiting[n]!;
        const h = this.live(w);
        if (!h) continue; // settled meanwhile (a purge, a cancel, retention): dropped at commit
        if (w.dueAt > this.now || (!w.rewrite && w.seg > this.ds.cursor) || this.handedOff(h)) break;
        out.push({ seg: w.seg, slot: w.slot, header: h });
        this.chosen.add(slotKey(w.seg, w.slot));
        this.taken.add(key);
      }
      this.shifted.set(key, n);
      if (n < hold.waiting.length) this.stopped.add(key);
      else if (hold.parkedFrom !== null) pulling.set(key, hold.parkedFrom);
    }
    for (const key of pulling.keys()) this.pulled.add(key);
    if (pulling.size > 0) this.pullParked(pulling, want, out);
    return out;
  }

  /** A waiting message's header if it is still unsettled and nobody holds it. */
  private live(w: Waiting): Header | null {
    const state = readState(this.sql, w.seg);
    if (!state) return null;
    const h = headersOf(this.sql, this.ds, w.seg)?.[w.slot];
    if (
      !h ||
      h.id !== w.id ||
      settledOf(this.ds, w.seg, state.settled).has(w.slot) ||
      this.ds.leases.has(slotKey(w.seg, w.slot))
    )
      return null;
    return h;
  }

  /** Reads the parked messages of `pulling` (key: from which segment) in one pass up to the cursor. */
  private pullParked(pulling: Map<string, number>, want: number, out: Candidate[]): void {
    let after = Math.min(...pulling.values()) - 1;
    let budget = want + PULL_SLACK;
    const open = new Set(pulling.keys());
    const stopAll = (seg: number) => {
      for (const key of open) this.stop(key, seg);
      open.clear();
    };
    while (open.size > 0) {
      const rows = this.sql
        .exec(
          `SELECT ${STATE_COLUMNS} FROM segments WHERE seg > ? AND seg <= ? AND due_at IS NULL ORDER BY seg LIMIT 16`,
          after,
          this.ds.cursor,
        )
        .toArray() as unknown as SegmentState[];
      if (rows.length === 0) break;
      for (const state of rows) {
        after = state.seg;
        if (budget <= 0 || out.length >= want) return stopAll(state.seg);
        const headers = headersOf(this.sql, this.ds, state.seg)!;
        const settled = settledOf(this.ds, state.seg, state.settled);
        budget -= headers.length;
        for (let slot = 0; slot < headers.length && open.size > 0; slot++) {
          const h = headers[slot]!;
          const key = h.key;
          const at = slotKey(state.seg, slot);
          if (
            key === undefined ||
            !open.has(key) ||
            state.seg < pulling.get(key)! ||
            settled.has(slot) ||
            this.ds.leases.has(at) ||
            this.chosen.has(at)
          )
            continue;
          if (this.handedOff(h)) {
            open.delete(key);
            this.stop(key, state.seg);
          } else if (h.dueAt > this.now) {
            open.delete(key);
            this.heads.set(key, {
              seg: state.seg,
              slot,
              pos: posOf(h, state.seg, slot),
              id: h.id,
              dueAt: h.dueAt,
              rewrite: false,
            });
            this.stop(key, state.seg);
          } else if (out.length >= want) {
            return stopAll(state.seg);
          } else {
            out.push({ seg: state.seg, slot, header: h });
            this.taken.add(key);
          }
        }
      }
    }
    // Read to the cursor: nothing of these keys is left behind it.
    for (const key of open) this.caughtUp.add(key);
  }

  /** The batch is leased: the book learns what this call found and took. */
  commit(): void {
    const keys = this.ds.keys;
    const touched = new Set([...this.shifted.keys(), ...this.caughtUp, ...this.parked.keys(), ...this.heads.keys()]);
    for (const key of touched) {
      const hold = keys.hold(key, this.now);
      const n = this.shifted.get(key) ?? 0;
      if (n > 0) hold.waiting.splice(0, n);
      const at = this.parked.get(key);
      if (this.caughtUp.has(key)) hold.parkedFrom = null;
      // A pull that stopped left the key's messages from there on; before it, it took or passed them all.
      else if (this.pulled.has(key) && at !== undefined) hold.parkedFrom = at;
      if (at !== undefined && (hold.parkedFrom === null || at < hold.parkedFrom)) hold.parkedFrom = at;
      const head = this.heads.get(key);
      if (head) keys.wait(key, this.now, [head]);
      keys.tidy(key);
    }
  }
}
