/**
 * What a storage shard remembers so that a write repeated after a lost reply or a crash
 * stores its messages once, even after they were consumed. Two kinds of write repeat:
 *
 * - A send whose ids the sender chose or kept (an Idempotency-Key or producer-chosen
 *   id). Its sender may write them again after a lost reply, and by then a consumer may
 *   have acked and deleted the first copy, which the index of stored ids no longer
 *   has (the fault harness caught exactly that: an acked message stored and delivered
 *   again). Remembered by id.
 * - A move (dead-lettering, a redrive): the mover writes the message here, then settles
 *   its source copy, and a crash in between makes it write the same source copy again.
 *   Remembered by move key, which names that source copy (its shard, seq and the nonce
 *   drawn when it was written) and never the message id: the same message may come
 *   back later in a different copy (dead-lettered, redriven, dead-lettered again), and a
 *   move of a copy never seen here must be stored, or the mover would settle its source
 *   and the message would be gone from every queue.
 *
 * One extra row per such message (a move's also indexed by message id, so that leaving by a
 * move forgets it: forgetMovesOf), kept REMEMBER_MS, the idempotency window; plain sends
 * (ids the shard draws) pay nothing: one written again after a lost reply carries the
 * token of its batch, found among the newest segments (segment-writes.ts idsOfBatch).
 */
export const REMEMBER_MS = 24 * 60 * 60 * 1000;
/** How far back (in segments) a batch written again looks for its first write: it lands right after. */
export const DEDUPE_SEGMENTS = 1000;

/** Which of `ids` (ids given by the sender) this shard already holds, or remembers storing. */
export function knownIds(sql: SqlStorage, ids: string[]): Set<string> {
  const found = new Set<string>();
  for (const id of new Set(ids)) {
    const held = sql.exec(
      "SELECT 1 FROM message_ids WHERE id = ? UNION ALL SELECT 1 FROM remembered_ids WHERE id = ?",
      id,
      id,
    );
    if (held.toArray().length > 0) found.add(id);
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
  for (const key of keys)
    if (sql.exec("SELECT 1 FROM remembered_moves WHERE move = ?", key).toArray().length > 0) done.add(key);
  return done;
}

/** A move carried out here: its key, and the id of the message it brought. */
export interface MoveIn {
  key: string;
  id: string;
}

/** Records moves just stored (or found here already), and forgets those past the window. */
export function rememberMoves(sql: SqlStorage, moves: readonly MoveIn[], now: number): void {
  if (moves.length === 0) return;
  for (const m of moves)
    sql.exec("INSERT OR REPLACE INTO remembered_moves (move, at, id) VALUES (?, ?, ?)", m.key, now, m.id);
  sql.exec("DELETE FROM remembered_moves WHERE at < ?", now - REMEMBER_MS);
}

/**
 * The message left by a move (dead-lettered, redriven): the moves that brought it here are
 * forgotten. Remembering one is right while its copy is here or was consumed here; once the
 * copy has moved on, the same move written again (its source copy outlived a cut-off settle
 * and was moved again) is the only copy left, and skipping it would lose the message.
 */
export function forgetMovesOf(sql: SqlStorage, ids: readonly string[]): void {
  for (const id of new Set(ids)) sql.exec("DELETE FROM remembered_moves WHERE id = ?", id);
}
