/**
 * A keyed lease is a row (key_leases): a key has at most one batch in flight, and a shard
 * that restarted while one was would otherwise hand the key's messages to a second consumer
 * while the first may still hold them. One row per lease, whatever its size, written with
 * the lease and deleted with its last settle: two rows a batch. A keyless lease stays in
 * memory only (delivery-state.ts).
 *
 * At start the rows are read back into memory leases and key holds, and so are the rewritten
 * copies waiting in scheduled segments (retries, leases that ran out): each holds its key
 * until it is due and delivered (key-book.ts).
 */
import type { DeliveryState } from "../segments/delivery-state";
import { headersOf, readState } from "../segments/segment-rows";
import { KEYED_DUE } from "../segments/segment-placement";
import { posOf, Settled, slotKey } from "../segments/segment";

export const KEY_LEASES_SCHEMA = `CREATE TABLE IF NOT EXISTS key_leases (lease TEXT PRIMARY KEY, until INTEGER NOT NULL, slots TEXT NOT NULL) WITHOUT ROWID;`;

/** A leased slot as its row names it. */
export type LeasedSlot = [seg: number, slot: number, id: string, counts: 0 | 1];

export function writeKeyedLease(sql: SqlStorage, lease: string, until: number, slots: readonly LeasedSlot[]): void {
  sql.exec(
    "INSERT OR REPLACE INTO key_leases (lease, until, slots) VALUES (?, ?, ?)",
    lease,
    until,
    JSON.stringify(slots),
  );
}

export function deleteKeyedLease(sql: SqlStorage, lease: string): void {
  sql.exec("DELETE FROM key_leases WHERE lease = ?", lease);
}

export function extendKeyedLease(sql: SqlStorage, lease: string, until: number): void {
  sql.exec("UPDATE key_leases SET until = MAX(until, ?) WHERE lease = ?", until, lease);
}

/**
 * At start: every keyed lease held again in memory (one whose time is up too, so the next
 * lease rewrites its messages as failed deliveries), and every rewritten keyed copy waiting
 * in a scheduled segment put back at the head of its key. Rows whose slots are all settled go.
 */
export function restoreKeyed(sql: SqlStorage, ds: DeliveryState, now: number): void {
  if (sql.exec("SELECT 1 FROM meta WHERE key = 'keyed'").toArray().length > 0) ds.keys.used = true;
  const states = new Map<number, Settled | null>();
  const settledBits = (seg: number): Settled | null => {
    if (!states.has(seg)) {
      const state = readState(sql, seg);
      states.set(seg, state ? Settled.of(state.settled) : null);
    }
    return states.get(seg)!;
  };
  for (const row of sql
    .exec<{ lease: string; until: number; slots: string }>("SELECT lease, until, slots FROM key_leases")
    .toArray()) {
    const held: Array<[string, string]> = [];
    for (const [seg, slot, id, counts] of JSON.parse(row.slots) as LeasedSlot[]) {
      const bits = settledBits(seg);
      const h = bits && !bits.has(slot) ? headersOf(sql, ds, seg)?.[slot] : undefined;
      if (!h || h.id !== id || h.key === undefined) continue;
      ds.hold(slotKey(seg, slot), { id, lease: row.lease, until: row.until, counts: counts === 1 });
      held.push([slotKey(seg, slot), h.key]);
    }
    if (held.length === 0) deleteKeyedLease(sql, row.lease);
    else ds.keys.taken(row.lease, row.until, held, now);
  }
  for (const { seg, settled } of sql
    .exec<{ seg: number; settled: ArrayBuffer }>("SELECT seg, settled FROM segments WHERE due_at = ?", KEYED_DUE)
    .toArray()) {
    const bits = Settled.of(settled);
    headersOf(sql, ds, seg)?.forEach((h, slot) => {
      if (bits.has(slot) || h.key === undefined || ds.leases.has(slotKey(seg, slot))) return;
      ds.keys.wait(h.key, now, [{ seg, slot, pos: posOf(h, seg, slot), id: h.id, dueAt: h.dueAt, rewrite: true }]);
    });
  }
}
