/**
 * Fault hooks for the fault harness (test/faults), and nothing else. A SIGKILL of
 * `wrangler dev` resets every object at once at a random moment; these reset one
 * storage shard (ctx.abort(), which ends the object as a crash or an eviction would)
 * at the two moments at-least-once has to get right: after an append is durable and
 * before its reply left, and between a lease and its ack (memory leases end with it).
 * And it corrupts stored bodies (one byte flipped, the checksum left as it was), as a
 * disk or a bug could, to see them quarantined rather than delivered garbled.
 *
 * Fenced: a hook works only when the var SHARDQ_TEST_HOOKS is "on", which only the
 * fault harness sets, in a config it generates (scripts/dev-config.mjs); wrangler.toml
 * and .dev.vars never set it, and `npm run deploy:dry-run` fails if they do. Without it
 * the broker's route answers 404 like an unknown path (broker/test-hooks-api.ts) and
 * the shard's RPC method throws, so a deployed service has no way to reach a hook.
 */
import { crc32 } from "../src/checksum";
import { randomHex } from "../src/ids";

export type FaultPoint = "abort-append" | "abort-settle";
export const FAULT_POINTS: readonly FaultPoint[] = ["abort-append", "abort-settle"];

export interface TestHookStatus {
  /** Random per object instance: a new value means the object was reset since it was read. */
  instance: string;
  armed: FaultPoint | null;
  /** Messages whose stored body this call corrupted. */
  corrupted?: Array<{ id: string; seq: number }>;
}

/** Most bodies one call corrupts. */
const MAX_CORRUPT = 100;

export function testHooksEnabled(env: { SHARDQ_TEST_HOOKS?: string }): boolean {
  return env.SHARDQ_TEST_HOOKS === "on";
}

/** One storage shard's hooks: at most one point armed, fired once (the reset forgets it anyway). */
export class TestHooks {
  private readonly instance = randomHex(8);
  private armed: FaultPoint | null = null;
  constructor(private readonly enabled: boolean) {}

  /**
   * Arms a point (null disarms), or corrupts `corrupt.count` bodies; with neither, only
   * reads. Throws unless enabled.
   */
  control(arm?: FaultPoint | null, corrupt?: { count: number; sql: SqlStorage; held: ReadonlyMap<number, unknown> }): TestHookStatus {
    if (!this.enabled) throw new Error("test hooks are off (SHARDQ_TEST_HOOKS is not \"on\")");
    if (arm !== undefined) {
      if (arm !== null && !FAULT_POINTS.includes(arm)) throw new Error(`unknown fault point ${String(arm)}`);
      this.armed = arm;
    }
    const corrupted = corrupt ? corruptBodies(corrupt.sql, corrupt.held, corrupt.count) : undefined;
    return { instance: this.instance, armed: this.armed, ...(corrupted ? { corrupted } : {}) };
  }

  /** At a fault point: aborts the object now when this point is armed. Costs one comparison otherwise. */
  at(point: FaultPoint, ctx: DurableObjectState): void {
    if (this.armed !== point) return;
    this.armed = null;
    ctx.abort(`test hook: ${point}`);
  }

  /**
   * After a write, with its reply: when this point is armed, waits until the write is
   * durable and then aborts, so the reply never leaves. Aborting at once would not do:
   * the turn's writes commit only when it ends, so an abort inside it rolls them back
   * (the output gate's promise) and nothing would be stored.
   */
  afterDurable<T>(point: FaultPoint, ctx: DurableObjectState, reply: T): T | Promise<T> {
    if (this.armed !== point) return reply;
    this.armed = null;
    return ctx.storage.sync().then(() => {
      ctx.abort(`test hook: ${point}`);
      return reply;
    });
  }
}

/**
 * Flips the first byte of up to `count` stored bodies, checksums untouched, newest
 * first, preferring rows nobody holds a lease on (ready or delayed; consumers keep the
 * ready backlog short, so there may be none). A held one's consumer may still ack it (it got the body intact);
 * otherwise the corruption is found when it is next leased.
 */
function corruptBodies(sql: SqlStorage, held: ReadonlyMap<number, unknown>, count: number): Array<{ id: string; seq: number }> {
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
