/**
 * Writing a batch a storage shard was sent: its new segments, inside append's
 * transaction, skipping what this shard already holds from an earlier write of the same
 * messages (a lost reply, a crash mid-move): storage-shard/segments/remembered-ids.ts.
 */
import type { AppendRequest, EncodedMessage } from "../../src/kernel/protocol";
import type { DeliveryState } from "./delivery-state";
import { DEDUPE_SEGMENTS, knownIds, movesDone, rememberIds, rememberMoves, type MoveIn } from "./remembered-ids";
import { findSlot } from "./segment-rows";
import { appendToHead, idsOfBatch, writeSegments } from "./segment-writes";
import { placement, type NewMessage } from "./segment-placement";

/**
 * The batch's new segments, inside append's transaction. A batch of fresh messages
 * written again (`dedupe`, after a lost reply) is answered with the ids its first
 * write stored, if it was stored; messages given ids are skipped when this shard
 * holds or remembers them, moves when it carried them out or holds the message still.
 */
export function appendBatch(
  sql: SqlStorage,
  ds: DeliveryState,
  shardNo: number,
  req: AppendRequest,
  now: number,
  gen = 0,
): { stored: number; bytes: number; ids: string[] } {
  const fresh = req.messages.every((m) => m.id === undefined);
  if (fresh && req.dedupe && req.batch) {
    const again = idsOfBatch(
      sql,
      ds,
      req.batch,
      placement(req.messages.map(toNew(now, gen))),
      req.messages.length,
      DEDUPE_SEGMENTS,
    );
    if (again) return { stored: 0, bytes: 0, ids: again };
  }
  // A move is known by the copy it moves, a send by its id: never one by the other.
  const given = req.messages.flatMap((m) => (m.moveKey === undefined && m.id !== undefined ? [m.id] : []));
  const known = (req.dedupe || req.remember) && given.length > 0 ? knownIds(sql, given) : new Set<string>();
  // Plain sends carry no move key: they read and write nothing of remembered_moves.
  const moveKeys = req.messages.flatMap((m) => (m.moveKey === undefined ? [] : [m.moveKey]));
  const moved = moveKeys.length > 0 ? movesDone(sql, moveKeys) : new Set<string>();
  const ids: string[] = new Array<string>(req.messages.length);
  const writes: NewMessage[] = [];
  const at: number[] = [];
  const storedIds: string[] = [];
  const storedMoves: MoveIn[] = [];
  req.messages.forEach((m, i) => {
    if (m.moveKey !== undefined) {
      if (moved.has(m.moveKey)) return void (ids[i] = m.id!);
      moved.add(m.moveKey);
      storedMoves.push({ key: m.moveKey, id: m.id! });
      // A move that cut off before its source let go leaves the message in both queues; moved
      // back while its first copy is still here, it would be here twice under one id.
      if (m.id !== undefined && holdsLive(sql, ds, m.id)) return void (ids[i] = m.id);
    } else if (m.id !== undefined) {
      if (known.has(m.id)) return void (ids[i] = m.id);
      known.add(m.id);
      storedIds.push(m.id);
    }
    writes.push(toNew(now, gen)(m));
    at.push(i);
  });
  // A small write of messages ready at once goes into the open head; anything else is new segments.
  const written =
    appendToHead(sql, ds, shardNo, now, writes, req.batch ?? null) ??
    writeSegments(sql, ds, shardNo, now, writes, req.batch ?? null, true);
  written.forEach((w, k) => (ids[at[k]!] = w.id));
  if (req.remember) rememberIds(sql, storedIds, now);
  rememberMoves(sql, storedMoves, now);
  return { stored: writes.length, bytes: writes.reduce((n, w) => n + w.body.byteLength, 0), ids };
}

/** Whether this shard holds an unsettled copy of the message with this id. */
function holdsLive(sql: SqlStorage, ds: DeliveryState, id: string): boolean {
  return findSlot(sql, ds, id) !== null;
}

/** A message as sent, to be written as a new one: arrived now, due after its delay; a keyed one in the epoch `gen`. */
function toNew(now: number, gen: number): (m: EncodedMessage) => NewMessage {
  return (m) => ({
    ...(m.orderingKey !== undefined ? { key: m.orderingKey, gen, pos: "" } : {}),
    ...(m.id !== undefined ? { id: m.id } : {}),
    contentType: m.contentType,
    checksum: m.checksum,
    enqueuedAt: now,
    dueAt: m.delayMs > 0 ? now + m.delayMs : 0,
    attempts: m.attempts ?? 0,
    sentAt: m.sentAt ?? 0,
    copy: "",
    body: m.body,
  });
}
