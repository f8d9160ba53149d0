/**
 * Writing messages into segment rows: new segments, small writes into the open head, and a
 * message written again from its slot; and, for a batch sent again after a lost reply, the
 * ids its earlier write stored. Every function runs inside the caller's transactionSync.
 */
import type { DeliveryState } from "./delivery-state";
import {
  copyOf,
  encodeHeaders,
  locatedId,
  nextSegment,
  packBodies,
  posOf,
  posText,
  Settled,
  type Header,
} from "./segment";
import { randomHex } from "../../src/kernel/ids";
import { isKeyedCopy, KEYED_DUE, placement, type NewMessage } from "./segment-placement";
import { headersOf, settledOf } from "./segment-rows";

/**
 * Writes messages as new segments, split so that each stays under SEGMENT_MAX_BYTES
 * of bodies: those due at once as segments the cursor finds (due_at NULL), those due
 * later as scheduled ones (due_at their earliest, in the index). Returns each message's
 * id and place, in order. Ids the shard drew say where they live; given ids go in message_ids.
 * With `openHead` (an append), a small segment written ready is the open head the next
 * small appends go into; any other segment written closes it.
 */
export function writeSegments(
  sql: SqlStorage,
  ds: DeliveryState,
  shardNo: number,
  now: number,
  messages: readonly NewMessage[],
  batch: string | null,
  openHead = false,
): Written[] {
  const out: Written[] = new Array<Written>(messages.length);
  for (const group of placement(messages)) {
    const seg = nextSegment(ds.lastSeg, now);
    ds.lastSeg = seg;
    const headers: Header[] = [];
    let dueAt: number | null = null;
    let bytes = 0;
    let oldest = Infinity;
    let keyed = 0;
    group.forEach((i, slot) => {
      const m = messages[i]!;
      const indexed = m.id !== undefined;
      const id = m.id ?? locatedId(seg, shardNo, slot, randomHex(4));
      out[i] = { id, seg, slot };
      headers.push(headerOf(m, id, indexed));
      if (m.key !== undefined) keyed++;
      // A scheduled segment (each of its messages has a due time, a rewritten one's may be now) is found by the index;
      // keyed messages wait for their key, not the index (a keyed copy's segment is due never, KEYED_DUE).
      if (m.dueAt > 0 && m.key === undefined) dueAt = Math.min(dueAt ?? Infinity, m.dueAt);
      bytes += m.body.byteLength;
      oldest = Math.min(oldest, m.enqueuedAt);
      if (indexed) sql.exec("INSERT OR REPLACE INTO message_ids (id, seg) VALUES (?, ?)", id, seg);
    });
    if (isKeyedCopy(messages[group[0]!]!)) dueAt = KEYED_DUE;
    if (keyed > 0) noteKeyed(sql, ds);
    sql.exec(
      `INSERT INTO segments (seg, enqueued_at, due_at, count, live, live_bytes, batch, settled, headers, bodies, keyed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      seg,
      oldest,
      dueAt,
      headers.length,
      headers.length,
      bytes,
      batch,
      Settled.none(headers.length).blob(),
      encodeHeaders(headers),
      packBodies(group.map((i) => messages[i]!.body)),
      keyed,
    );
    ds.remember(seg, headers);
    ds.head =
      openHead && dueAt === null && headers.length < HEAD_MAX_MESSAGES && bytes < HEAD_MAX_BYTES
        ? { seg, count: headers.length, bytes, openedAt: now }
        : null;
    if (dueAt !== null && ds.scheduledOldest !== undefined)
      ds.scheduledOldest = Math.min(ds.scheduledOldest ?? Infinity, oldest);
  }
  return out;
}

export interface Written {
  id: string;
  seg: number;
  slot: number;
}

/** The header a new message gets in its slot. */
function headerOf(m: NewMessage, id: string, indexed: boolean): Header {
  const h: Header = {
    id,
    contentType: m.contentType,
    size: m.body.byteLength,
    checksum: m.checksum,
    enqueuedAt: m.enqueuedAt,
    dueAt: m.dueAt,
    attempts: m.attempts,
    sentAt: m.sentAt,
    copy: m.copy,
    indexed,
  };
  if (m.key !== undefined) Object.assign(h, { key: m.key, gen: m.gen ?? 0, pos: m.pos ?? "" });
  return h;
}

/**
 * Bounds of the open head segment. An append rewrites the whole row, so the head takes
 * new slots only while it is small (rewrites of tens of KB, never a large row over and
 * over) and young (its ids still sort by the time they were made, to within this). Each
 * head closed is a row written and deleted, which a stream of lone sends pays once per
 * HEAD_MAX_MESSAGES of them.
 */
export const HEAD_MAX_MESSAGES = 256;
export const HEAD_MAX_BYTES = 64 * 1024;
export const HEAD_MAX_AGE_MS = 60_000;

/**
 * The shard holds keyed messages: its figures read their keys from now on (KeyBook.used).
 * Kept in meta, once in the shard's life, so that a restart or an eviction reads them too.
 */
function noteKeyed(sql: SqlStorage, ds: DeliveryState): void {
  if (ds.keys.used) return;
  ds.keys.used = true;
  sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('keyed', '1')");
}

/**
 * Writes a small write of messages ready at once into the open head segment, after its
 * last slot: one row written (its UPDATE), where a new segment would be one too, but a
 * consumer then acks the head's messages with one write and deletes them with one. The
 * UPDATE also writes the acks deferred on the head (DeliveryState.deferred). The write's
 * token is added to the row's `batch` as `<token>@<first slot>`, so a write again after
 * a lost reply still finds its ids (idsOfBatch). Null when the write does not fit: the
 * caller writes new segments.
 */
export function appendToHead(
  sql: SqlStorage,
  ds: DeliveryState,
  shardNo: number,
  now: number,
  messages: readonly NewMessage[],
  batch: string | null,
): Written[] | null {
  const head = ds.head;
  if (!head || head.seg !== ds.lastSeg || messages.length === 0) return null;
  let bytes = 0;
  let keyed = 0;
  for (const m of messages) {
    if (m.dueAt > 0 || isKeyedCopy(m)) return null;
    bytes += m.body.byteLength;
    if (m.key !== undefined) keyed++;
  }
  if (keyed > 0) noteKeyed(sql, ds);
  if (
    head.count + messages.length > HEAD_MAX_MESSAGES ||
    head.bytes + bytes > HEAD_MAX_BYTES ||
    now - head.openedAt >= HEAD_MAX_AGE_MS
  )
    return null;
  const seg = head.seg;
  const row = sql
    .exec<{
      due_at: number | null;
      count: number;
      settled: ArrayBuffer;
      batch: string | null;
      bodies: ArrayBuffer | string;
    }>("SELECT due_at, count, settled, batch, bodies FROM segments WHERE seg = ?", seg)
    .toArray()[0];
  if (!row || row.due_at !== null || row.count !== head.count) {
    ds.head = null;
    return null;
  }
  const old = headersOf(sql, ds, seg)!;
  const headers = [...old];
  const settled = settledOf(ds, seg, row.settled).grown(old.length + messages.length);
  let live = 0;
  let liveBytes = 0;
  let oldest = Infinity;
  old.forEach((h, slot) => {
    if (settled.has(slot)) return;
    live++;
    liveBytes += h.size;
    oldest = Math.min(oldest, h.enqueuedAt);
  });
  const out: Written[] = messages.map((m) => {
    const slot = headers.length;
    const indexed = m.id !== undefined;
    const id = m.id ?? locatedId(seg, shardNo, slot, randomHex(4));
    headers.push(headerOf(m, id, indexed));
    live++;
    liveBytes += m.body.byteLength;
    oldest = Math.min(oldest, m.enqueuedAt);
    if (indexed) sql.exec("INSERT OR REPLACE INTO message_ids (id, seg) VALUES (?, ?)", id, seg);
    return { id, seg, slot };
  });
  const oldBodies = typeof row.bodies === "string" ? new Uint8Array(0) : new Uint8Array(row.bodies);
  const entries =
    batch === null
      ? row.batch
      : row.batch === null && old.length === 0
        ? batch
        : [row.batch ?? "", `${batch}@${old.length}`].join(" ").trim();
  sql.exec(
    "UPDATE segments SET enqueued_at = ?, count = ?, live = ?, live_bytes = ?, batch = ?, settled = ?, headers = ?, bodies = ?, keyed = keyed + ? WHERE seg = ?",
    oldest,
    headers.length,
    live,
    liveBytes,
    entries,
    settled.blob(),
    encodeHeaders(headers),
    packBodies([oldBodies, ...messages.map((m) => m.body)]),
    keyed,
    seg,
  );
  ds.remember(seg, headers);
  ds.deferred.delete(seg);
  ds.head = { ...head, count: headers.length, bytes: head.bytes + bytes };
  // The cursor may have passed the head while it held fewer slots: its new ones are read from it on.
  if (ds.cursor >= seg) ds.cursor = seg - 1;
  return out;
}

/** Where the write with this token starts in a segment whose `batch` is `entries`, or null when it is not there. */
function startOf(entries: string, token: string): number | null {
  for (const e of entries.split(" ")) {
    if (e === token) return 0;
    if (e.startsWith(`${token}@`) && /^\d+$/.test(e.slice(token.length + 1))) return Number(e.slice(token.length + 1));
  }
  return null;
}

/** The ids of the segments an earlier write of this batch stored, in order, or null when none did. */
export function idsOfBatch(
  sql: SqlStorage,
  ds: DeliveryState,
  batch: string,
  groups: number[][],
  count: number,
  window: number,
): string[] | null {
  // The token only of the newest segments: their headers are read for the ones that match.
  const found = sql
    .exec<{ seg: number; batch: string }>(
      "SELECT seg, batch FROM (SELECT seg, batch FROM segments ORDER BY seg DESC LIMIT ?) WHERE batch = ? OR instr(batch, ?) > 0 ORDER BY seg",
      window,
      batch,
      batch,
    )
    .toArray()
    .flatMap((r) => {
      const start = startOf(r.batch, batch);
      return start === null ? [] : [{ seg: r.seg, start }];
    });
  if (found.length !== groups.length) return null;
  const ids: string[] = new Array<string>(count);
  for (let g = 0; g < groups.length; g++) {
    const headers = headersOf(sql, ds, found[g]!.seg)!;
    const start = found[g]!.start;
    if (start + groups[g]!.length > headers.length) return null;
    groups[g]!.forEach((i, k) => (ids[i] = headers[start + k]!.id));
  }
  return ids;
}

/** A message written again from its slot: same id, copy and body; its attempts and due time anew. */
export function rewritten(
  h: Header,
  seg: number,
  slot: number,
  body: Uint8Array,
  addAttempts: number,
  dueAt: number,
): NewMessage {
  return {
    id: h.id,
    contentType: h.contentType,
    checksum: h.checksum,
    enqueuedAt: h.enqueuedAt,
    dueAt,
    attempts: h.attempts + addAttempts,
    sentAt: h.sentAt,
    copy: copyOf(h, seg, slot),
    body,
    ...(h.key !== undefined ? { key: h.key, gen: h.gen ?? 0, pos: posText(posOf(h, seg, slot)) } : {}),
  };
}
