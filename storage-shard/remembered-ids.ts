/**
 * What a storage shard remembers so that a write repeated after a lost reply or a crash
 * stores its messages once, even after they were consumed. Two kinds of write repeat:
 *
 * - A send whose ids the sender chose or kept (an Idempotency-Key or producer-chosen
 *   id). Its sender may write them again after a lost reply, and by then a consumer may
 *   have acked and deleted the first copy, which the scan of recent rows no longer
 *   finds (the fault harness caught exactly that: an acked message stored and delivered
 *   again). Remembered by id.
 * - A move (dead-lettering, a redrive): the mover writes the message here, then settles
 *   its source copy, and a crash in between makes it write the same source copy again.
 *   Remembered by move key, which names that source copy (its shard, seq and the nonce
 *   drawn when it was written) and never the message id: the same message may come
 *   back later in a different copy (dead-lettered, redriven, dead-lettered again), and a
 *   move of a copy never seen here must be stored, or the mover would settle its source
 *   and the message would be gone from every queue.
 *
 * One extra row per such message, kept REMEMBER_MS, the idempotency window; plain sends
 * (random ids, never rewritten) pay nothing.
 */
export const REMEMBER_MS = 24 * 60 * 60 * 1000;
/** How far back (in messages) the scan of recent rows looks: a retry lands right after its first try. */
const DEDUPE_WINDOW = 10_000;

/** Which of `ids` this shard already stored: among its recent rows, or remembered. */
export function knownIds(sql: SqlStorage, ids: string[], nextSeq: number): Set<string> {
  const wanted = new Set(ids);
  const found = new Set<string>();
  if (wanted.size === 0) return found;
  for (const r of sql.exec<{ id: string }>("SELECT id FROM messages WHERE seq >= ? ORDER BY seq DESC", nextSeq - DEDUPE_WINDOW)) {
    if (wanted.has(r.id)) found.add(r.id);
  }
  for (const id of wanted) {
    if (!found.has(id) && sql.exec("SELECT 1 FROM remembered_ids WHERE id = ?", id).toArray().length > 0) found.add(id);
  }
  return found;
}

/** Records ids just stored with `remember`, and forgets those past the window. */
export function rememberIds(sql: SqlStorage, ids: string[], now: number): void {
  if (ids.length === 0) return;
  for (const id of ids) sql.exec("INSERT OR REPLACE INTO remembered_ids (id, at) VALUES (?, ?)", id, now);
  sql.exec("DELETE FROM remembered_ids WHERE at < ?", now - REMEMBER_MS);
}

/** Which of these moves this shard already carried out (stored, within the window). */
export function movesDone(sql: SqlStorage, keys: string[]): Set<string> {
  const done = new Set<string>();
  for (const key of keys) if (sql.exec("SELECT 1 FROM remembered_moves WHERE move = ?", key).toArray().length > 0) done.add(key);
  return done;
}

/** Records moves just stored, and forgets those past the window. */
export function rememberMoves(sql: SqlStorage, keys: string[], now: number): void {
  if (keys.length === 0) return;
  for (const key of keys) sql.exec("INSERT OR REPLACE INTO remembered_moves (move, at) VALUES (?, ?)", key, now);
  sql.exec("DELETE FROM remembered_moves WHERE at < ?", now - REMEMBER_MS);
}
