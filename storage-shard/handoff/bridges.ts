/**
 * The hand-off's bridges as the owner of a key reads them (handoff.ts writes them): a
 * keyed message this shard accepted in an epoch a bridge names, or later, waits until every
 * shard holding older messages of its key has released it.
 */

/**
 * The first epoch of `key` held back here: messages of the key this shard accepted in that
 * epoch or later wait until every shard that told it, on entering an epoch, that it holds
 * older messages of the key has released it (handoff.ts). Null when nothing holds the key.
 */
export function blockedFrom(sql: SqlStorage, key: string): number | null {
  if (!bridgedAny(sql)) return null;
  return sql.exec<{ g: number | null }>("SELECT MIN(gen) AS g FROM bridges WHERE key = ? AND released = 0", key).one()
    .g;
}

/** Of `keys`, those a bridge holds here, each with its blockedFrom(): one read for them all. */
export function bridgedKeys(sql: SqlStorage, keys: readonly string[]): Map<string, number> {
  if (keys.length === 0 || !bridgedAny(sql)) return new Map();
  const rows = sql.exec<{ key: string; g: number }>(
    "SELECT key, MIN(gen) AS g FROM bridges WHERE released = 0 AND key IN (SELECT value FROM json_each(?)) GROUP BY key",
    JSON.stringify(keys),
  );
  return new Map(rows.toArray().map((r) => [r.key, r.g]));
}

/**
 * Per shard (its SqlStorage), whether any bridge holds a key: almost always none, and then
 * no keyed message asks. handoff.ts forgets the answer whenever it changes the bridges.
 */
const bridged = new WeakMap<SqlStorage, boolean>();

export function bridgedAny(sql: SqlStorage): boolean {
  let any = bridged.get(sql);
  if (any === undefined)
    bridged.set(sql, (any = sql.exec("SELECT 1 FROM bridges WHERE released = 0 LIMIT 1").toArray().length > 0));
  return any;
}

export function bridgesChanged(sql: SqlStorage): void {
  bridged.delete(sql);
}
