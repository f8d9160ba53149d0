/**
 * Ordering keys in memory (docs/ordered-lanes.md): a keyed message is a segment slot like
 * any other, and a key that flows has no state at all. A key has a hold here only while
 * something keeps its next message back:
 *
 * - a batch of it in flight (`lease`), written as one row per lease (keyed-leases.ts), so a
 *   restart honours it to its end;
 * - its head waiting (`waiting`): a retried message's rewritten copy, due after its delay, or
 *   a message sent delayed that the scan found at the head of its key;
 * - messages of it the scan passed (`parkedFrom`): the cursor never stalls on a held key; it
 *   notes the first segment where it left one behind, and the key's next lease reads its
 *   messages from there on before the scan goes on.
 *
 * Memory is bounded by the leases in flight and the keys held, not by the keys a queue has.
 * What a restart loses is found again: leases from their rows, rewritten copies from their
 * scheduled segments (delivery-state.ts), delayed heads and parked messages by the scan,
 * which starts again at the first segment.
 */
import { comparePos, type Pos } from "../segments/segment";

/** A message at the head of its key (or right behind it) that is not ready yet, or was rewritten. */
export interface Waiting {
  seg: number;
  slot: number;
  pos: Pos;
  id: string;
  dueAt: number;
  /** A rewritten copy (a retry, a lease that ran out): its key's head by construction. */
  rewrite: boolean;
}

export interface KeyHold {
  /** The lease holding a batch of the key, or null. */
  lease: string | null;
  /** In the key's order: the first is its head whenever it is ahead of every parked message. */
  waiting: Waiting[];
  /** The first segment holding a message of the key the scan passed, or null. */
  parkedFrom: number | null;
  /** When the key was first held back (operators see it). */
  since: number;
}

/** A keyed lease's slots not yet settled, and its keys with how many of their slots each. */
export interface KeyedLease {
  until: number;
  slots: Map<string, string>;
  keys: Map<string, number>;
}

export class KeyBook {
  readonly holds = new Map<string, KeyHold>();
  readonly leases = new Map<string, KeyedLease>();
  /** Whether this shard has held keyed messages (kept in meta across restarts): its reports then carry the keys' figures. */
  used = false;

  hold(key: string, now: number): KeyHold {
    this.used = true;
    let h = this.holds.get(key);
    if (!h) this.holds.set(key, (h = { lease: null, waiting: [], parkedFrom: null, since: now }));
    return h;
  }

  /** Forgets a hold that keeps nothing back any more. */
  tidy(key: string): void {
    const h = this.holds.get(key);
    if (h && h.lease === null && h.waiting.length === 0 && h.parkedFrom === null) this.holds.delete(key);
  }

  /** Whether a message of `key` at `pos` must wait for something of its key: a batch in flight, a head ahead of it, messages parked. */
  blocks(key: string, pos: Pos): boolean {
    const h = this.holds.get(key);
    if (!h) return false;
    if (h.lease !== null || h.parkedFrom !== null) return true;
    return h.waiting.length > 0 && comparePos(pos, h.waiting[0]!.pos) > 0;
  }

  /** Notes that the scan left a message of `key` behind in `seg`. */
  park(key: string, seg: number, now: number): void {
    const h = this.hold(key, now);
    if (h.parkedFrom === null || seg < h.parkedFrom) h.parkedFrom = seg;
  }

  /** Adds messages to a key's waiting list, kept in the key's order. */
  wait(key: string, now: number, entries: readonly Waiting[]): void {
    if (entries.length === 0) return;
    const h = this.hold(key, now);
    for (const e of entries) if (!h.waiting.some((w) => w.seg === e.seg && w.slot === e.slot)) h.waiting.push(e);
    h.waiting.sort((a, b) => comparePos(a.pos, b.pos));
  }

  /** Keys no batch holds whose next messages can be read now: a head due, or parked messages and nothing waiting. */
  ready(now: number): string[] {
    const out: string[] = [];
    for (const [key, h] of this.holds) {
      if (h.lease !== null) continue;
      const head = h.waiting[0];
      if (head ? head.dueAt <= now : h.parkedFrom !== null) out.push(key);
    }
    return out;
  }

  /** When a waiting head no batch holds becomes due after `now`, or null. */
  nextDue(now: number): number | null {
    let next: number | null = null;
    for (const h of this.holds.values()) {
      const head = h.waiting[0];
      if (h.lease === null && head && head.dueAt > now && (next === null || head.dueAt < next)) next = head.dueAt;
    }
    return next;
  }

  /** A keyed lease taken: its slots (by slotKey) and each one's key. */
  taken(lease: string, until: number, slots: ReadonlyArray<[slot: string, key: string]>, now: number): void {
    const l: KeyedLease = { until, slots: new Map(), keys: new Map() };
    for (const [slot, key] of slots) {
      l.slots.set(slot, key);
      l.keys.set(key, (l.keys.get(key) ?? 0) + 1);
      this.hold(key, now).lease = lease;
    }
    this.leases.set(lease, l);
  }

  /**
   * A slot of a keyed lease settled, or lost to a rewrite: its key is let go once none of
   * its slots in the lease is left. Answers whether the lease holds nothing any more (its
   * row is deleted then), or null when this lease is not known.
   */
  settled(lease: string, slot: string): boolean | null {
    const l = this.leases.get(lease);
    if (!l) return null;
    const key = l.slots.get(slot);
    if (key === undefined) return l.slots.size === 0;
    l.slots.delete(slot);
    const left = (l.keys.get(key) ?? 1) - 1;
    if (left > 0) l.keys.set(key, left);
    else {
      l.keys.delete(key);
      const h = this.holds.get(key);
      if (h && h.lease === lease) {
        h.lease = null;
        this.tidy(key);
      }
    }
    if (l.slots.size > 0) return false;
    this.leases.delete(lease);
    return true;
  }

  /** The lease holding `key`, and its slots of that key, for an operator's release. */
  slotsOf(lease: string, key: string): string[] {
    const l = this.leases.get(lease);
    return l ? [...l.slots].filter(([, k]) => k === key).map(([s]) => s) : [];
  }

  reset(): void {
    this.used = false;
    this.holds.clear();
    this.leases.clear();
  }
}
