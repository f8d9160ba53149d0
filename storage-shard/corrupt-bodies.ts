/**
 * The fault harness's "corrupt" fault (src/kernel/test-hooks.ts has the rest): flips a byte
 * of some stored bodies, the checksum left as it was, as a disk or a bug could, to see
 * them quarantined rather than delivered garbled. Here rather than in the kernel because
 * it writes the storage shard's own table. Reached only through the storage shard's
 * testHook, after its hooks' control() passed the fence (testHooksEnabled); left out of
 * production builds by the build fence (src/kernel/test-hooks.ts, BuildGlobals).
 */
import { crc32 } from "../src/kernel/checksum";
import type { BuildGlobals } from "../src/kernel/test-hooks";

/** Most bodies one call corrupts. */
const MAX_CORRUPT = 100;

/**
 * Flips the first byte of up to `count` stored bodies, checksums untouched, newest
 * first, preferring rows nobody holds a lease on (ready or delayed; consumers keep the
 * ready backlog short, so there may be none). A held one's consumer may still ack it (it got the body intact);
 * otherwise the corruption is found when it is next leased.
 */
function flipBodies(sql: SqlStorage, held: ReadonlyMap<number, unknown>, count: number): Array<{ id: string; seq: number }> {
  const want = Math.max(0, Math.min(MAX_CORRUPT, Math.floor(count)));
  const rows = sql
    .exec<{ seq: number; id: string; body: ArrayBuffer; checksum: number; free: number }>(
      "SELECT seq, id, body, checksum, (lease_id IS NULL) AS free FROM messages WHERE size > 0 ORDER BY seq DESC LIMIT ?",
      want + held.size + 1000,
    )
    .toArray()
    // One already corrupted is left alone: a second flip would mend it.
    .filter((r) => crc32(new Uint8Array(r.body)) === r.checksum)
    .map((r) => ({ ...r, free: r.free === 1 && !held.has(r.seq) }))
    .sort((a, b) => Number(b.free) - Number(a.free) || b.seq - a.seq)
    .slice(0, want);
  for (const r of rows) {
    const body = new Uint8Array(r.body.slice(0));
    body[0] = body[0]! ^ 0x20;
    sql.exec("UPDATE messages SET body = ? WHERE seq = ?", body.buffer, r.seq);
  }
  return rows.map((r) => ({ id: r.id, seq: r.seq }));
}

/** A production build's stand-in: its testHook threw before it could get here. */
function notInThisBuild(): never {
  throw new Error("test hooks are off (left out of this build)");
}

export const corruptBodies: typeof flipBodies = (globalThis as BuildGlobals).process?.env?.NODE_ENV !== "production" ? flipBodies : notInThisBuild;
