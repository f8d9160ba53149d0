/**
 * Ids a storage shard must never store twice, even after they were consumed: messages
 * written with ids the sender chose or kept (an Idempotency-Key or producer-chosen id,
 * a dead-letter move, a redrive). Their sender may write them again after a lost reply,
 * and by then a consumer may have acked and deleted the first copy, which the scan of
 * recent rows no longer finds (the fault harness caught exactly that: an acked message
 * stored and delivered again). One extra row per such message, kept REMEMBER_MS, the
 * idempotency window; plain sends (random ids, never rewritten) pay nothing.
 */
export const REMEMBER_MS = 24 * 60 * 60 * 1000;
/** How far back the scan of recent rows looks: a retry lands right after its first try. */
const DEDUPE_WINDOW = 10_000;

/** Which of `ids` this shard already stored: among its recent rows, or remembered. */
export function knownIds(sql: SqlStorage, ids: string[], nextSeq: number): Set<string> {
  const wanted = new Set(ids);
  const found = new Set<string>();
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
  for (const id of ids) sql.exec("INSERT OR REPLACE INTO remembered_ids (id, at) VALUES (?, ?)", id, now);
  sql.exec("DELETE FROM remembered_ids WHERE at < ?", now - REMEMBER_MS);
}
