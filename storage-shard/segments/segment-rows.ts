/**
 * Reading and writing segment rows (the `segments` table, schema.ts), and the index of
 * ids that do not say where their message lives (`message_ids`). Every function runs
 * inside the caller's transactionSync. The columns a scan reads come before the
 * headers and the bodies, so SQLite reads a large row's overflow pages only when a
 * caller asks for them.
 */
import { DEFERRED_MAX_MS, type DeliveryState } from "./delivery-state";
import {
  bodyOf,
  copyOf,
  encodeHeaders,
  locate,
  locatedId,
  nextSegment,
  offsetsOf,
  packBodies,
  posOf,
  posText,
  Settled,
  type Header,
} from "./segment";
import { randomHex } from "../../src/kernel/ids";
import { isKeyedCopy, KEYED_DUE, placement } from "./segment-placement";

export type { NewMessage } from "./segment-placement";
import type { NewMessage } from "./segment-placement";

/** The small columns of a segment row, as a scan reads them. */
export interface SegmentState {
  seg: number;
  enqueued_at: number;
  due_at: number | null;
  count: number;
  live: number;
  live_bytes: number;
  settled: ArrayBuffer;
}
export const STATE_COLUMNS = "seg, enqueued_at, due_at, count, live, live_bytes, settled";

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

/** A segment's settled slots: the row's bitmap, and the acks deferred in memory (DeliveryState.deferred). */
export function settledOf(ds: DeliveryState, seg: number, blob: ArrayBuffer): Settled {
  const settled = Settled.of(blob);
  for (const slot of ds.deferredSlots(seg) ?? []) settled.set(slot);
  return settled;
}

/**
 * Writes deferred acks: those of every segment but the open head (its next append writes
 * them for nothing), and the head's too once they waited DEFERRED_MAX_MS, or with `all`
 * (the shard goes to sleep, a test corrupts bodies). One row written per segment (its
 * bitmap, or its delete when nothing is left).
 */
export function writeDeferred(sql: SqlStorage, ds: DeliveryState, now: number, all = false): void {
  for (const [seg, d] of [...ds.deferred]) {
    if (!all && seg === ds.head?.seg && now - d.since < DEFERRED_MAX_MS) continue;
    const state = readState(sql, seg);
    if (!state) {
      ds.deferred.delete(seg);
      continue;
    }
    new SegmentEdit(state, headersOf(sql, ds, seg)!, ds).commit(sql, ds);
  }
}

/** A segment's small columns, or undefined when it is gone. */
export function readState(sql: SqlStorage, seg: number): SegmentState | undefined {
  return sql
    .exec<SegmentState & Record<string, SqlStorageValue>>(`SELECT ${STATE_COLUMNS} FROM segments WHERE seg = ?`, seg)
    .toArray()[0];
}

/** A segment's headers: from the cache, else read. */
export function headersOf(sql: SqlStorage, ds: DeliveryState, seg: number): Header[] | undefined {
  const cached = ds.cachedHeaders(seg);
  if (cached) return cached;
  const row = sql.exec<{ headers: string }>("SELECT headers FROM segments WHERE seg = ?", seg).toArray()[0];
  return row ? ds.headersOf(seg, row.headers) : undefined;
}

export function bodiesOf(sql: SqlStorage, seg: number): ArrayBuffer | undefined {
  return sql.exec<{ bodies: ArrayBuffer }>("SELECT bodies FROM segments WHERE seg = ?", seg).toArray()[0]?.bodies;
}

/**
 * Slots of one segment settled in one write: the bitmap and live figures, or the delete
 * when none is left, which takes the index entries of its indexed messages with it.
 * Returns the bytes of the slots settled now (those already settled are not counted).
 */
export class SegmentEdit {
  private readonly settled: Settled;
  private live: number;
  private liveBytes: number;
  private changed = false;
  private dueAt: number | null;
  private dueChanged = false;

  /** The acks deferred on this segment when it was read: this edit writes them. */
  private readonly deferred: boolean;

  constructor(
    readonly state: SegmentState,
    readonly headers: Header[],
    ds: DeliveryState,
  ) {
    this.settled = Settled.of(state.settled);
    this.live = state.live;
    this.liveBytes = state.live_bytes;
    this.dueAt = state.due_at;
    const deferred = ds.deferredSlots(state.seg);
    this.deferred = deferred !== undefined;
    for (const slot of deferred ?? []) this.settle(slot);
  }

  isSettled(slot: number): boolean {
    return this.settled.has(slot);
  }

  /** Settles a slot; false when it already was. */
  settle(slot: number): boolean {
    if (slot >= this.headers.length || this.settled.has(slot)) return false;
    this.settled.set(slot);
    this.live--;
    this.liveBytes -= this.headers[slot]!.size;
    this.changed = true;
    return true;
  }

  /** When the leaser should look at this scheduled segment next. */
  setDueAt(at: number | null): void {
    if (at === this.dueAt) return;
    this.dueAt = at;
    this.dueChanged = true;
  }

  get remaining(): number {
    return this.live;
  }

  /** Writes what changed: one row written (with its index entry when due_at moved), or the delete. */
  commit(sql: SqlStorage, ds: DeliveryState): void {
    const seg = this.state.seg;
    if (this.deferred) ds.deferred.delete(seg);
    if (this.changed && this.live <= 0) {
      this.headers.forEach((h, slot) => {
        if (h.indexed && this.settled.has(slot))
          sql.exec("DELETE FROM message_ids WHERE id = ? AND seg = ?", h.id, seg);
      });
      sql.exec("DELETE FROM segments WHERE seg = ?", seg);
      ds.forget(seg);
      // It may have held the scheduled segments' oldest message: read that again when asked.
      if (
        this.state.due_at !== null &&
        ds.scheduledOldest !== undefined &&
        this.state.enqueued_at <= (ds.scheduledOldest ?? Infinity)
      )
        ds.scheduledOldest = undefined;
      return;
    }
    if (this.changed) {
      sql.exec(
        "UPDATE segments SET settled = ?, live = ?, live_bytes = ?, due_at = ? WHERE seg = ?",
        this.settled.blob(),
        this.live,
        this.liveBytes,
        this.dueAt,
        seg,
      );
    } else if (this.dueChanged) {
      sql.exec("UPDATE segments SET due_at = ? WHERE seg = ?", this.dueAt, seg);
    }
  }
}

/** A message stored here, unsettled: its segment's state and headers, and its slot. */
export interface Found {
  state: SegmentState;
  headers: Header[];
  slot: number;
}

/**
 * Where the message with this id lives on this shard, unsettled: its located place if
 * the header there has this id, else the place the index names (a sender's id, a moved
 * message, or one rewritten since). Null when this shard does not hold it.
 */
export function findSlot(sql: SqlStorage, ds: DeliveryState, id: string): Found | null {
  const at = locate(id);
  if (at) {
    const found = unsettledWithId(sql, ds, at.seg, id, at.slot);
    if (found) return found;
  }
  const row = sql.exec<{ seg: number }>("SELECT seg FROM message_ids WHERE id = ?", id).toArray()[0];
  return row ? unsettledWithId(sql, ds, row.seg, id) : null;
}

/** The unsettled slot of `seg` holding `id` (`slot` if given, else the last such). */
function unsettledWithId(sql: SqlStorage, ds: DeliveryState, seg: number, id: string, slot?: number): Found | null {
  const state = readState(sql, seg);
  if (!state) return null;
  const headers = headersOf(sql, ds, seg)!;
  const settled = settledOf(ds, seg, state.settled);
  const slots = slot === undefined ? headers.map((_, i) => headers.length - 1 - i) : [slot];
  for (const s of slots) if (headers[s]?.id === id && !settled.has(s)) return { state, headers, slot: s };
  return null;
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

/** A segment's packed bodies, read once when the first is wanted. */
export class Bodies {
  private packed: ArrayBuffer | undefined;
  private offsets: number[] | undefined;
  constructor(
    private readonly sql: SqlStorage,
    private readonly seg: number,
    private readonly headers: Header[],
  ) {}

  of(slot: number): Uint8Array {
    this.packed ??= bodiesOf(this.sql, this.seg) ?? new ArrayBuffer(0);
    this.offsets ??= offsetsOf(this.headers);
    return bodyOf(this.packed, this.offsets, this.headers, slot);
  }
}
