/**
 * The epochs of a queue's storage shards (docs/ordered-lanes.md, storage-shard/handoff/handoff.ts):
 * before a map whose active shards changed is stored, and so before any broker can use it,
 * every shard not retired is told the new epoch, and the change waits for all of them. An
 * epoch is pushed under a number never used before (`pushed`); `committed` is the one the
 * stored map matches. A push that did not end in a stored map (a shard unreachable, a
 * Coordinator reset) leaves pushed ahead of committed, and the next tick pushes the stored
 * map's active shards again under a new number.
 */
import { storageShardFor } from "../src/kernel/addressing";
import type { Env } from "../src/kernel/env";

interface Row extends Record<string, SqlStorageValue> {
  pushed: number;
  committed: number;
}

function read(sql: SqlStorage): Row {
  return sql.exec<Row>("SELECT pushed, committed FROM epochs").toArray()[0] ?? { pushed: 0, committed: 0 };
}

/** Whether the shards may be in an epoch other than the stored map's (or in none yet). */
export function epochUnsettled(sql: SqlStorage): boolean {
  const row = read(sql);
  return row.committed === 0 || row.pushed !== row.committed;
}

/**
 * Tells every one of `shards` the epoch whose active shards are `active`, and waits for all:
 * throws if one could not take it (the caller leaves its change unmade). Returns the
 * epoch's number, for commitEpoch once the map that goes with it is stored.
 */
export async function pushEpoch(
  sql: SqlStorage,
  env: Env,
  queueId: string,
  active: readonly string[],
  shards: ReadonlyArray<{ name: string; region: string }>,
): Promise<number> {
  const seq = read(sql).pushed + 1;
  sql.exec(
    "INSERT INTO epochs (one, pushed, committed) VALUES (1, ?, 0) ON CONFLICT(one) DO UPDATE SET pushed = excluded.pushed",
    seq,
  );
  const epoch = { seq, active: [...active].sort() };
  await Promise.all(shards.map((s) => storageShardFor(env, s.name, s.region).enterEpoch(queueId, epoch)));
  return seq;
}

/** The map stored with the epoch `seq` is the queue's now. */
export function commitEpoch(sql: SqlStorage, seq: number): void {
  sql.exec("UPDATE epochs SET committed = ? WHERE pushed = ?", seq, seq);
}
