/**
 * The keys held back here, as operators see them (GET .../ordering/held: heldKeys) and as
 * heartbeats count them (keyFigures). A key has state only while something holds it back
 * (key-book.ts): an operator's reading passes over every keyed message, a heartbeat's reads
 * the key book only, as it goes with every report. Every function runs inside the caller's
 * transactionSync.
 */
import type { HoldReason, LaneFigures } from "../../src/kernel/figures";
import type { HeldKey } from "../../src/kernel/message-operations";
import type { DeliveryState } from "../segments/delivery-state";
import { byPos, eachKeyed, leaseHead, type KeyedSlot } from "./keyed-slots";
import { bridgedKeys } from "../handoff/bridges";

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
