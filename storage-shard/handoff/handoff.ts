/**
 * The hand-off of ordering keys between storage shards when the queue's active shards
 * change (docs/ordered-lanes.md, "Map changes"). The Coordinator tells every shard the new
 * epoch before any broker may use the map that goes with it. From then on a shard refuses
 * keyed messages it does not own (the fence), and a shard that still holds messages of a
 * key it does not own registers them with the key's owner before it answers (the bridge):
 * the owner holds back its own messages of the key accepted in that epoch or later until
 * the holder releases it, once it holds no message of the key older than that epoch.
 *
 * A holder finds the keys it holds by reading its keyed messages (key-book.ts: a key that
 * flows has no state here), when it enters an epoch and again, while it owes releases, after
 * its messages go (releasesDue): a release is written when no message of its key older than
 * the epoch is left, and sent from there (an outbox). A release that arrives before the
 * registration it ends (both travel at once) leaves a tombstone that cancels it.
 */
import type { Epoch } from "../../src/kernel/shard-map";
import { ownerOfKey } from "../../src/kernel/ordering";
import { bridgesChanged } from "./bridges";
import type { DeliveryState } from "../segments/delivery-state";
import { headersOf, settledOf } from "../segments/segment-rows";

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
export function enterEpoch(
  sql: SqlStorage,
  ds: DeliveryState,
  self: string,
  epoch: Epoch,
): { entered: boolean; registrations: Registration[] } {
  const current = loadEpoch(sql);
  const entered = current === null || epoch.seq > current.seq;
  if (entered) {
    sql.exec(
      "INSERT OR REPLACE INTO epoch (one, seq, active) VALUES (1, ?, ?)",
      epoch.seq,
      JSON.stringify(epoch.active),
    );
    sql.exec("DELETE FROM bridges WHERE released = 1 AND gen < ?", epoch.seq);
    bridgesChanged(sql);
    for (const key of keysHeld(sql, ds).keys()) {
      const owner = ownerOfKey(key, epoch.active);
      if (owner !== undefined && owner !== self)
        sql.exec("INSERT OR IGNORE INTO registrations (key, owner, gen) VALUES (?, ?, ?)", key, owner, epoch.seq);
    }
    owing.delete(sql);
    mayOwe.delete(sql);
  }
  return {
    entered,
    registrations: grouped(
      sql.exec<{ key: string; owner: string; gen: number }>("SELECT key, owner, gen FROM registrations").toArray(),
    ),
  };
}

/** The keys of the keyed messages held here, unsettled, each with the oldest epoch among them: a read of every segment holding keyed ones. */
function keysHeld(sql: SqlStorage, ds: DeliveryState): Map<string, number> {
  const out = new Map<string, number>();
  for (let after = 0; ;) {
    const rows = sql
      .exec<{ seg: number; settled: ArrayBuffer }>(
        "SELECT seg, settled FROM segments WHERE seg > ? AND keyed > 0 ORDER BY seg LIMIT 64",
        after,
      )
      .toArray();
    if (rows.length === 0) return out;
    for (const r of rows) {
      after = r.seg;
      const settled = settledOf(ds, r.seg, r.settled);
      headersOf(sql, ds, r.seg)?.forEach((h, slot) => {
        if (h.key === undefined || settled.has(slot)) return;
        const gen = out.get(h.key);
        if (gen === undefined || (h.gen ?? 0) < gen) out.set(h.key, h.gen ?? 0);
      });
    }
  }
}

/**
 * Per shard (its SqlStorage), whether it owes registrations, and when it last looked for
 * releases due: a holder reads its keyed messages at most every RELEASE_CHECK_MS.
 */
const owing = new WeakMap<SqlStorage, { any: boolean; lookedAt: number }>();
const RELEASE_CHECK_MS = 250;

/**
 * Writes the releases now due: of each registration whose key has no message here older
 * than its epoch any more. Looks at most every RELEASE_CHECK_MS (`force`: now), and not at
 * all while no registration is owed. Answers how many it wrote.
 */
export function releasesDue(sql: SqlStorage, ds: DeliveryState, now: number, force = false): number {
  let o = owing.get(sql);
  if (!o)
    owing.set(
      sql,
      (o = { any: sql.exec("SELECT 1 FROM registrations LIMIT 1").toArray().length > 0, lookedAt: -Infinity }),
    );
  if (!o.any || (!force && now - o.lookedAt < RELEASE_CHECK_MS)) return 0;
  o.lookedAt = now;
  const held = keysHeld(sql, ds);
  let n = 0;
  for (const r of sql
    .exec<{ key: string; owner: string; gen: number }>("SELECT key, owner, gen FROM registrations")
    .toArray()) {
    const oldest = held.get(r.key);
    if (oldest !== undefined && oldest < r.gen) continue;
    sql.exec("INSERT OR IGNORE INTO releases (key, owner, gen) VALUES (?, ?, ?)", r.key, r.owner, r.gen);
    sql.exec("DELETE FROM registrations WHERE key = ? AND owner = ? AND gen = ?", r.key, r.owner, r.gen);
    n++;
  }
  o.any = sql.exec("SELECT 1 FROM registrations LIMIT 1").toArray().length > 0;
  return n;
}

/**
 * Whether this shard may owe hand-offs (registrations not yet released, or releases not yet
 * sent): learnt once from the tables and kept, so a shard that owes none (almost every one)
 * pays nothing for them on its lease and settle path. Cleared where either table is written.
 */
const mayOwe = new WeakMap<SqlStorage, boolean>();

export function mayOweHandoffs(sql: SqlStorage): boolean {
  let owes = mayOwe.get(sql);
  if (owes === undefined)
    mayOwe.set(
      sql,
      (owes = sql.exec("SELECT 1 FROM registrations UNION ALL SELECT 1 FROM releases LIMIT 1").toArray().length > 0),
    );
  return owes;
}

/** After deleteAll(): what was learnt of the hand-off's tables (here and in bridges.ts) went with them. */
export function forgetHandoffs(sql: SqlStorage): void {
  owing.delete(sql);
  mayOwe.delete(sql);
  bridgesChanged(sql);
}

/** Releases waiting to be sent, grouped by owner and epoch. */
export function pendingReleases(sql: SqlStorage): Registration[] {
  return grouped(
    sql.exec<{ key: string; owner: string; gen: number }>("SELECT key, owner, gen FROM releases").toArray(),
  );
}

/** The releases the owner confirmed. */
export function releasesSent(sql: SqlStorage, sent: Registration): void {
  for (const key of sent.keys)
    sql.exec("DELETE FROM releases WHERE key = ? AND owner = ? AND gen = ?", key, sent.owner, sent.gen);
  mayOwe.delete(sql);
}

/** Hand-offs this shard still owes: registrations not yet released, and releases not yet sent. */
export function owedHandoffs(sql: SqlStorage): number {
  return sql
    .exec<{ n: number }>("SELECT (SELECT COUNT(*) FROM registrations) + (SELECT COUNT(*) FROM releases) AS n")
    .one().n;
}

/**
 * At the owner: `holder` holds messages of these keys older than epoch `gen`. Messages of
 * them accepted here in `gen` or later wait (keyed-scan.ts) until it releases them.
 */
export function acceptBridges(sql: SqlStorage, holder: string, gen: number, keys: readonly string[]): void {
  bridgesChanged(sql);
  for (const key of keys) {
    const cancelled =
      sql
        .exec(
          "DELETE FROM bridges WHERE key = ? AND holder = ? AND gen = ? AND released = 1 RETURNING key",
          key,
          holder,
          gen,
        )
        .toArray().length > 0;
    if (cancelled) continue;
    sql.exec("INSERT OR IGNORE INTO bridges (key, holder, gen, released) VALUES (?, ?, ?, 0)", key, holder, gen);
  }
}

/** At the owner: `holder` holds no message of these keys older than epoch `gen` any more. */
export function acceptReleases(sql: SqlStorage, holder: string, gen: number, keys: readonly string[]): void {
  bridgesChanged(sql);
  for (const key of keys) {
    const ended =
      sql
        .exec(
          "DELETE FROM bridges WHERE key = ? AND holder = ? AND gen = ? AND released = 0 RETURNING key",
          key,
          holder,
          gen,
        )
        .toArray().length > 0;
    // Before its registration (both were under way at once): a tombstone cancels it when it comes.
    if (!ended)
      sql.exec("INSERT OR IGNORE INTO bridges (key, holder, gen, released) VALUES (?, ?, ?, 1)", key, holder, gen);
  }
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
