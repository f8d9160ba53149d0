/**
 * Reading segment rows (the `segments` table, schema.ts), and the index of ids that do not
 * say where their message lives (`message_ids`); segment-writes.ts writes new rows and
 * segment-edit.ts settles slots in them. Every function runs inside the caller's
 * transactionSync. The columns a scan reads come before the headers and the bodies, so
 * SQLite reads a large row's overflow pages only when a caller asks for them.
 */
import type { DeliveryState } from "./delivery-state";
import { bodyOf, locate, offsetsOf, Settled, type Header } from "./segment";

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

/** A segment's settled slots: the row's bitmap, and the acks deferred in memory (DeliveryState.deferred). */
export function settledOf(ds: DeliveryState, seg: number, blob: ArrayBuffer): Settled {
  const settled = Settled.of(blob);
  for (const slot of ds.deferredSlots(seg) ?? []) settled.set(slot);
  return settled;
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
