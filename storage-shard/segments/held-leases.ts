/**
 * Memory leases written down before the platform can evict an idle shard, and read back by the
 * instance that comes next.
 *
 * A lease on a segment's message lives in memory (delivery-state.ts): writing one is a row a
 * batch, and a shard under traffic never loses its memory but to a crash. An idle one does: an
 * object with no request for about ten seconds is evicted (hibernated on Cloudflare, evicted by
 * workerd), and a pull consumer that takes longer than that over its batch, with nothing else
 * reaching the shard, would find its messages handed out again long before their visibility
 * timeout. So the quiet work (quiet-timer.ts) writes the leases still running, a few rows for
 * all of them, and the next instance takes them back, dropping any whose slot is settled or
 * whose segment is gone (it was acked or retried after they were written). A crash before the
 * quiet work still loses them: at-least-once, as before.
 */
import type { DeliveryState, MemoryLease } from "./delivery-state";
import { readState } from "./segment-rows";
import { Settled } from "./segment";

/** Leases in one row: a row stays far under SQLite's size limit. */
const PER_ROW = 1000;

export const HELD_LEASES_SCHEMA = `CREATE TABLE IF NOT EXISTS held_leases (chunk INTEGER PRIMARY KEY, leases TEXT NOT NULL);`;

type Row = [key: string, id: string, lease: string, until: number, counts: 0 | 1];

/** Writes the leases running at `now` in place of any written before; nothing when there are none and none were. Answers whether rows are left. */
export function writeHeldLeases(sql: SqlStorage, ds: DeliveryState, now: number, written: boolean): boolean {
  const rows: Row[] = [];
  for (const [key, l] of ds.leases) if (l.until > now) rows.push([key, l.id, l.lease, l.until, l.counts ? 1 : 0]);
  if (rows.length === 0 && !written) return false;
  sql.exec("DELETE FROM held_leases");
  for (let i = 0; i * PER_ROW < rows.length; i++)
    sql.exec(
      "INSERT INTO held_leases (chunk, leases) VALUES (?, ?)",
      i,
      JSON.stringify(rows.slice(i * PER_ROW, (i + 1) * PER_ROW)),
    );
  return rows.length > 0;
}

/**
 * At start: the leases a quiet instance wrote, held again unless their time is up or their
 * slot was settled since; the rows are deleted. Answers how many were held again.
 */
export function restoreHeldLeases(sql: SqlStorage, ds: DeliveryState, now: number): number {
  const chunks = sql.exec<{ leases: string }>("SELECT leases FROM held_leases").toArray();
  if (chunks.length === 0) return 0;
  const settled = new Map<number, Settled | null>();
  let held = 0;
  for (const { leases } of chunks) {
    for (const [key, id, lease, until, counts] of JSON.parse(leases) as Row[]) {
      if (until <= now) continue;
      const [seg, slot] = key.split(".").map(Number) as [number, number];
      if (!settled.has(seg)) {
        const state = readState(sql, seg);
        settled.set(seg, state ? Settled.of(state.settled) : null);
      }
      const bits = settled.get(seg);
      if (!bits || bits.has(slot)) continue;
      const l: MemoryLease = { id, lease, until, counts: counts === 1 };
      ds.hold(key, l);
      held++;
    }
  }
  sql.exec("DELETE FROM held_leases");
  return held;
}
