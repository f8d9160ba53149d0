/**
 * The hand-off of ordering keys between storage shards when the queue's active shards
 * change (docs/ordered-lanes.md, "Map changes"). The Coordinator tells every shard the new
 * epoch before any broker may use the map that goes with it. From then on a shard refuses
 * keyed messages it does not own (the fence), and a shard that still holds messages of a
 * key it does not own registers them with the key's owner before it answers (the bridge):
 * the owner holds back its own messages of the key accepted in that epoch or later until
 * the holder releases it, once it holds no message of the key older than that epoch.
 *
 * A release is written in the same transaction as the delete that makes it due, by a
 * trigger on lane_messages, and sent from there (an outbox): acks, dead-letterings,
 * expiry, purge and cancel all delete through it. A release that arrives before the
 * registration it ends (both travel at once) leaves a tombstone that cancels it.
 */
import type { Epoch } from "../src/kernel/protocol";
import { ownerOfKey } from "../src/kernel/ordering";
import { bridgesChanged, reopen } from "./lanes";

/** Keys per registration or release call: bounded RPC payloads however many lanes move. */
export const HANDOFF_CHUNK = 1000;

export function loadEpoch(sql: SqlStorage): Epoch | null {
  const row = sql.exec<{ seq: number; active: string }>("SELECT seq, active FROM epoch").toArray()[0];
  return row ? { seq: row.seq, active: JSON.parse(row.active) as string[] } : null;
}

/** Registrations to send: for each owner, the keys this shard holds older messages of, and the epoch that holds them back there. */
export interface Registration {
  owner: string;
  gen: number;
  keys: string[];
}

/**
 * Enters `epoch` (nothing when it is not newer than the one this shard is in): stores it,
 * forgets tombstones of earlier epochs, and writes a registration for every lane here
 * whose key another shard owns now. Returns every registration not yet answered, to send:
 * those of earlier epochs too, since an epoch entered before a reset may have sent none.
 */
export function enterEpoch(sql: SqlStorage, self: string, epoch: Epoch): { entered: boolean; registrations: Registration[] } {
  const current = loadEpoch(sql);
  const entered = current === null || epoch.seq > current.seq;
  if (entered) {
    sql.exec("INSERT OR REPLACE INTO epoch (one, seq, active) VALUES (1, ?, ?)", epoch.seq, JSON.stringify(epoch.active));
    sql.exec("DELETE FROM bridges WHERE released = 1 AND gen < ?", epoch.seq);
    bridgesChanged(sql);
    for (const { key } of sql.exec<{ key: string }>("SELECT key FROM lanes").toArray()) {
      const owner = ownerOfKey(key, epoch.active);
      if (owner !== undefined && owner !== self) sql.exec("INSERT OR IGNORE INTO registrations (key, owner, gen) VALUES (?, ?, ?)", key, owner, epoch.seq);
    }
  }
  return { entered, registrations: grouped(sql.exec<{ key: string; owner: string; gen: number }>("SELECT key, owner, gen FROM registrations").toArray()) };
}

/** Releases waiting to be sent, grouped by owner and epoch. */
export function pendingReleases(sql: SqlStorage): Registration[] {
  return grouped(sql.exec<{ key: string; owner: string; gen: number }>("SELECT key, owner, gen FROM releases").toArray());
}

/** The releases the owner confirmed. */
export function releasesSent(sql: SqlStorage, sent: Registration): void {
  for (const key of sent.keys) sql.exec("DELETE FROM releases WHERE key = ? AND owner = ? AND gen = ?", key, sent.owner, sent.gen);
}

/** Hand-offs this shard still owes: registrations not yet released, and releases not yet sent. */
export function owedHandoffs(sql: SqlStorage): number {
  return sql.exec<{ n: number }>("SELECT (SELECT COUNT(*) FROM registrations) + (SELECT COUNT(*) FROM releases) AS n").one().n;
}

/**
 * At the owner: `holder` holds messages of these keys older than epoch `gen`. Messages of
 * them accepted here in `gen` or later wait (lanes.ts reopen) until it releases them.
 */
export function acceptBridges(sql: SqlStorage, now: number, holder: string, gen: number, keys: readonly string[]): void {
  bridgesChanged(sql);
  for (const key of keys) {
    const cancelled = sql.exec("DELETE FROM bridges WHERE key = ? AND holder = ? AND gen = ? AND released = 1 RETURNING key", key, holder, gen).toArray().length > 0;
    if (cancelled) continue;
    sql.exec("INSERT OR IGNORE INTO bridges (key, holder, gen, released) VALUES (?, ?, ?, 0)", key, holder, gen);
    holdIfIdle(sql, now, key);
  }
}

/** At the owner: `holder` holds no message of these keys older than epoch `gen` any more. */
export function acceptReleases(sql: SqlStorage, now: number, holder: string, gen: number, keys: readonly string[]): void {
  bridgesChanged(sql);
  for (const key of keys) {
    const ended = sql.exec("DELETE FROM bridges WHERE key = ? AND holder = ? AND gen = ? AND released = 0 RETURNING key", key, holder, gen).toArray().length > 0;
    // Before its registration (both were under way at once): a tombstone cancels it when it comes.
    if (!ended) sql.exec("INSERT OR IGNORE INTO bridges (key, holder, gen, released) VALUES (?, ?, ?, 1)", key, holder, gen);
    holdIfIdle(sql, now, key);
  }
}

/** A lane no lease holds looks at its head again: held by a new bridge, or freed by a release. */
function holdIfIdle(sql: SqlStorage, now: number, key: string): void {
  const lane = sql.exec<{ lease: string | null }>("SELECT lease FROM lanes WHERE key = ?", key).toArray()[0];
  if (lane && lane.lease === null) reopen(sql, now, key, null);
}

/** Rows by owner and epoch, cut at HANDOFF_CHUNK keys. */
function grouped(rows: ReadonlyArray<{ key: string; owner: string; gen: number }>): Registration[] {
  const all: Registration[] = [];
  const open = new Map<string, Registration>();
  for (const r of rows) {
    const id = `${r.owner}\u0000${r.gen}`;
    let g = open.get(id);
    if (!g || g.keys.length >= HANDOFF_CHUNK) {
      g = { owner: r.owner, gen: r.gen, keys: [] };
      open.set(id, g);
      all.push(g);
    }
    g.keys.push(r.key);
  }
  return all;
}
