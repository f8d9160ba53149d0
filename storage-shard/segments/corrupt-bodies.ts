/**
 * The fault harness's "corrupt" fault (src/kernel/test-hooks.ts has the rest): flips a byte
 * of some stored bodies, the checksum left as it was, as a disk or a bug could, to see
 * them quarantined rather than delivered garbled. Here rather than in the kernel because
 * it writes the storage shard's own table. Reached only through the storage shard's
 * testHook, after its hooks' control() passed the fence (testHooksEnabled); left out of
 * production builds by the build fence (src/kernel/test-hooks.ts, BuildGlobals).
 */
import { crc32 } from "../../src/kernel/checksum";
import type { BuildGlobals } from "../../src/kernel/test-hooks";
import { decodeHeaders, offsetsOf, Settled, slotKey } from "./segment";

/** Most bodies one call corrupts. */
const MAX_CORRUPT = 100;

/**
 * Flips the first byte of up to `count` stored bodies, checksums untouched, newest
 * first, preferring messages nobody holds a lease on (ready or delayed; consumers keep
 * the ready backlog short, so there may be none). A held one's consumer may still ack it
 * (it got the body intact); otherwise the corruption is found when it is next leased,
 * and only that message of its segment is quarantined. Returns each one's id and the
 * place it was written ("<segment>.<slot>").
 */
function flipBodies(
  sql: SqlStorage,
  held: ReadonlyMap<string, unknown>,
  count: number,
): Array<{ id: string; slot: string }> {
  const want = Math.max(0, Math.min(MAX_CORRUPT, Math.floor(count)));
  const picks: Array<{ seg: number; slot: number; id: string; at: number; free: boolean }> = [];
  let scanned = 0;
  for (const r of sql.exec<{ seg: number; settled: ArrayBuffer; headers: string; bodies: ArrayBuffer }>(
    "SELECT seg, settled, headers, bodies FROM segments ORDER BY seg DESC",
  )) {
    const headers = decodeHeaders(r.headers);
    const settled = Settled.of(r.settled);
    const offsets = offsetsOf(headers);
    const bodies = new Uint8Array(r.bodies);
    for (let slot = headers.length - 1; slot >= 0; slot--) {
      const h = headers[slot]!;
      if (settled.has(slot) || h.size === 0) continue;
      // One already corrupted is left alone: a second flip would mend it.
      if (crc32(bodies.subarray(offsets[slot]!, offsets[slot]! + h.size)) !== h.checksum) continue;
      picks.push({ seg: r.seg, slot, id: h.id, at: offsets[slot]!, free: !held.has(slotKey(r.seg, slot)) });
    }
    scanned += headers.length;
    if (scanned >= want + held.size + 1000) break;
  }
  const chosen = picks
    .sort((a, b) => Number(b.free) - Number(a.free) || b.seg - a.seg || b.slot - a.slot)
    .slice(0, want);
  const bySeg = new Map<number, typeof chosen>();
  for (const c of chosen) bySeg.set(c.seg, [...(bySeg.get(c.seg) ?? []), c]);
  for (const [seg, list] of bySeg) {
    const row = sql.exec<{ bodies: ArrayBuffer }>("SELECT bodies FROM segments WHERE seg = ?", seg).one();
    const bodies = new Uint8Array(row.bodies.slice(0));
    for (const c of list) bodies[c.at] = bodies[c.at]! ^ 0x20;
    sql.exec("UPDATE segments SET bodies = ? WHERE seg = ?", bodies.buffer, seg);
  }
  return chosen.map((c) => ({ id: c.id, slot: slotKey(c.seg, c.slot) }));
}

/** A production build's stand-in: its testHook threw before it could get here. */
function notInThisBuild(): never {
  throw new Error("test hooks are off (left out of this build)");
}

export const corruptBodies: typeof flipBodies =
  (globalThis as BuildGlobals).process?.env?.NODE_ENV !== "production" ? flipBodies : notInThisBuild;
