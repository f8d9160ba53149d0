/**
 * Whether this shard drew an id a producer now sends as its own: ids are unique
 * per queue, whoever chose them. A located id names its shard and its place (a segment's
 * slot, or the lseq of a message of the ordered lanes keyed messages once had: src/kernel/ids.ts), so the shard named answers from that
 * place, with no index and nothing remembered per message: the message there is this one
 * (same content type, ordering key and body bytes: stored, nothing to do) or another. A
 * place this shard has numbered past but no longer holds (its messages consumed) may have
 * held the id, and nothing says with what: taken all the same, so a producer never gets an
 * id a consumer has already seen with another body.
 */
import type { DrawnIdAnswer, DrawnIdProbe } from "../../src/kernel/id-claims";
import type { DeliveryState } from "./delivery-state";
import { bodyOf, locate, offsetsOf, SEGMENT_MAX_MESSAGES, SEGS_PER_MS } from "./segment";
import { bodiesOf, findSlot, headersOf } from "./segment-rows";

/** The slot a lane message's located id names (its segment part is its lseq): above every segment slot. */
const LANE_SLOT = 0xffff;

/**
 * Segment numbers and lseqs count from the clock (segment.ts nextSegment, lanes-schema.ts),
 * so none this shard drew is below this (2024-01-01): a producer's id such as
 * 000…042 names no place here.
 */
const FIRST_DRAWN = Date.UTC(2024, 0, 1) * SEGS_PER_MS;

export function drawnIds(
  sql: SqlStorage,
  ds: DeliveryState,
  shardNo: number,
  now: number,
  probes: readonly DrawnIdProbe[],
): DrawnIdAnswer[] {
  return probes.map((p) => {
    const at = locate(p.id);
    if (!at || at.shard !== shardNo || at.seg < FIRST_DRAWN) return null;
    return at.slot === LANE_SLOT
      ? laneAnswer(sql, ds, at.seg, p)
      : at.slot < SEGMENT_MAX_MESSAGES
        ? segmentAnswer(sql, ds, now, at.seg, at.slot, p)
        : null;
  });
}

function segmentAnswer(
  sql: SqlStorage,
  ds: DeliveryState,
  now: number,
  seg: number,
  slot: number,
  p: DrawnIdProbe,
): DrawnIdAnswer {
  const first = headersOf(sql, ds, seg);
  // Its first place still stands (settled or not): it says whether this shard drew the id there.
  if (first && (first[slot]?.id !== p.id || first[slot]!.indexed)) return null;
  if (!first && seg > Math.max(ds.lastSeg, now * SEGS_PER_MS)) return null;
  // The copy held now, wherever a retry rewrote it (it keeps its id), else the first, settled.
  const found = findSlot(sql, ds, p.id);
  const place = found
    ? { seg: found.state.seg, slot: found.slot, headers: found.headers }
    : first
      ? { seg, slot, headers: first }
      : null;
  if (!place) return "other";
  const h = place.headers[place.slot]!;
  if (p.orderingKey !== h.key || h.contentType !== p.contentType || h.size !== p.body.byteLength) return "other";
  return sameBytes(bodyOf(bodiesOf(sql, place.seg)!, offsetsOf(place.headers), place.headers, place.slot), p.body)
    ? "same"
    : "other";
}

function laneAnswer(sql: SqlStorage, ds: DeliveryState, lseq: number, p: DrawnIdProbe): DrawnIdAnswer {
  // Lane messages became keyed segment slots (keyed-upgrade.ts), their ids indexed.
  const found = findSlot(sql, ds, p.id);
  if (found) {
    const h = found.headers[found.slot]!;
    if (h.key !== p.orderingKey || h.contentType !== p.contentType || h.size !== p.body.byteLength) return "other";
    return sameBytes(
      bodyOf(bodiesOf(sql, found.state.seg)!, offsetsOf(found.headers), found.headers, found.slot),
      p.body,
    )
      ? "same"
      : "other";
  }
  const last = Number(
    sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'last_lseq'").toArray()[0]?.value ?? 0,
  );
  return lseq <= last ? "other" : null;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}
