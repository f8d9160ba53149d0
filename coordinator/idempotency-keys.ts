import { DurableObject } from "cloudflare:workers";
import { systemClock, type Clock } from "../src/kernel/clock";
import type { Env } from "../src/kernel/env";
import { runMigrations } from "../src/kernel/sqlite-migrations";
import type { ClaimOutcome, KeyClaim } from "../src/kernel/id-claims";
import { meteredStorage, newMeter, readMeter, type MeterReading } from "../src/kernel/sql-meter";
import { meteredRpcs } from "../src/kernel/rpc-meter";

/** How long a key is remembered after its first use (Stripe's window; documented in the README). */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000;
/**
 * How long a claim belongs to the request that made it. A send gives up within a few
 * seconds (src/routing/store.ts: OVERLOAD_PATIENCE_MS plus retries), so a claim this old
 * was left by a request that died, and a retry may take it over.
 */
export const IN_PROGRESS_MS = 15_000;
/** Expired keys are swept by an alarm at most this often. */
const SWEEP_EVERY_MS = 60_000;

interface KeyRow extends Record<string, SqlStorageValue> {
  digest: string;
  ids: string;
  state: "pending" | "done";
  token: string;
  claimed_at: number;
  expires_at: number;
  attempt: number;
  tag: string | null;
  digests: string | null;
}

const MIGRATIONS = [
  `CREATE TABLE keys (
     key        TEXT PRIMARY KEY,
     digest     TEXT NOT NULL,
     ids        TEXT NOT NULL,
     state      TEXT NOT NULL,
     token      TEXT NOT NULL,
     claimed_at INTEGER NOT NULL,
     expires_at INTEGER NOT NULL,
     attempt    INTEGER NOT NULL
   );
   CREATE INDEX keys_by_expiry ON keys (expires_at);`,
  // An Idempotency-Key's row keeps the tag its drawn ids carry and each message's digest,
  // so that a drawn id sent again as a producer's own is recognised (claim). One index
  // entry per key send, none for a producer id's row.
  `ALTER TABLE keys ADD COLUMN tag TEXT;
   ALTER TABLE keys ADD COLUMN digests TEXT;
   CREATE INDEX keys_by_tag ON keys (tag) WHERE tag IS NOT NULL;`,
];

/**
 * The Idempotency-Key records of one queue's HTTP sends, a 16th of them (the broker
 * spreads keys over 16 such objects by hash, so idempotent sends are not bounded by
 * one object's rate). Why a table and not only the storage shards' deduplication of
 * recent ids: a shard remembers its last 10,000 messages, forgets a message once it is
 * acked, and a changed shard map can send a retry to another shard. A key here is
 * remembered for IDEMPOTENCY_WINDOW_MS whatever happens to its messages.
 *
 * A send claims its key before storing (recording the ids it will use), stores, then
 * marks the key done. A request that dies in between leaves a pending claim: after
 * IN_PROGRESS_MS a retry takes it over, asks every shard which of its ids they hold, and
 * stores only the others (src/routing/idempotent-send.ts).
 */
export class IdempotencyKeys extends DurableObject<Env> {
  /** RPCs served, alarms run, rows written and read since this object started (src/kernel/sql-meter.ts). */
  private readonly cost = newMeter();
  private readonly since = Date.now();
  private readonly storage: DurableObjectStorage;
  private readonly sql: SqlStorage;
  private sweepArmed = false;
  /** Tests replace this to drive time. */
  clock: Clock = systemClock;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.storage = meteredStorage(ctx.storage, this.cost);
    this.sql = this.storage.sql;
    runMigrations(this.sql, MIGRATIONS);
    void ctx.blockConcurrencyWhile(async () => {
      this.sweepArmed = (await this.storage.getAlarm()) !== null;
    });
    return meteredRpcs(this, this.cost, ["costFigures"]);
  }

  /** What this object was billed for since it started: the benchmark's read, not counted as an RPC. */
  costFigures(): MeterReading {
    return readMeter(this.cost, this.since);
  }

  /**
   * Claims the keys that are free. When one is busy or a mismatch the request will be
   * refused, so nothing is written; a key already done is answered, not claimed.
   */
  claim(claims: KeyClaim[], token: string): ClaimOutcome[] {
    const now = this.clock.now();
    const rows = claims.map((c) => {
      const row = this.sql.exec<KeyRow>("SELECT * FROM keys WHERE key = ?", c.key).toArray()[0];
      return row && row.expires_at > now ? row : undefined;
    });
    const outcomes: ClaimOutcome[] = claims.map((c, i) => {
      const row = rows[i];
      if (!row)
        return (
          (c.key.startsWith("id:") && this.drawnByKeySend(c, now)) || { status: "claimed", ids: c.ids, retry: false }
        );
      if (row.digest !== c.digest) return { status: "mismatch" };
      if (row.state === "done") return { status: "done", ids: JSON.parse(row.ids) as string[] };
      const held = now - row.claimed_at;
      if (held < IN_PROGRESS_MS) return { status: "busy", retryAfterMs: IN_PROGRESS_MS - held };
      return { status: "claimed", ids: JSON.parse(row.ids) as string[], retry: true };
    });
    if (outcomes.some((o) => o.status === "busy" || o.status === "mismatch")) return outcomes;
    this.storage.transactionSync(() => {
      claims.forEach((c, i) => {
        const row = rows[i];
        if (outcomes[i]!.status !== "claimed") return;
        if (row) {
          this.sql.exec(
            "UPDATE keys SET token = ?, claimed_at = ?, attempt = attempt + 1 WHERE key = ?",
            token,
            now,
            c.key,
          );
        } else {
          const drawn = c.key.startsWith("key:") && c.tag !== undefined && c.digests !== undefined;
          this.sql.exec(
            `INSERT OR REPLACE INTO keys (key, digest, ids, state, token, claimed_at, expires_at, attempt, tag, digests)
             VALUES (?, ?, ?, 'pending', ?, ?, ?, 1, ?, ?)`,
            c.key,
            c.digest,
            JSON.stringify(c.ids),
            token,
            now,
            now + IDEMPOTENCY_WINDOW_MS,
            drawn ? c.tag! : null,
            drawn ? JSON.stringify(c.digests) : null,
          );
        }
      });
    });
    if (!this.sweepArmed) {
      this.sweepArmed = true;
      void this.storage.setAlarm(now + IDEMPOTENCY_WINDOW_MS);
    }
    return outcomes;
  }

  /**
   * A producer's id that an Idempotency-Key send of this queue drew (the broker puts a
   * drawn id's claim in its key's object): answered as that send's message is, by that
   * message's own digest. Undefined when no key send here drew it: claimed as any id.
   */
  private drawnByKeySend(c: KeyClaim, now: number): ClaimOutcome | undefined {
    if (c.tag === undefined) return undefined;
    const id = c.key.slice("id:".length);
    for (const row of this.sql.exec<KeyRow>("SELECT * FROM keys WHERE tag = ? AND expires_at > ?", c.tag, now)) {
      const at = (JSON.parse(row.ids) as string[]).indexOf(id);
      if (at < 0 || row.digests === null) continue;
      if ((JSON.parse(row.digests) as string[])[at] !== c.digest) return { status: "mismatch" };
      if (row.state === "done") return { status: "done", ids: [id] };
      const held = now - row.claimed_at;
      if (held < IN_PROGRESS_MS) return { status: "busy", retryAfterMs: IN_PROGRESS_MS - held };
      // The key send died: its message may be stored. Stored again with dedupe, after a look at every shard.
      return { status: "claimed", ids: [id], retry: true };
    }
    return undefined;
  }

  /** The messages are stored: from now on the keys answer with their ids. */
  complete(keys: string[]): void {
    this.storage.transactionSync(() => {
      for (const key of keys) this.sql.exec("UPDATE keys SET state = 'done' WHERE key = ?", key);
    });
  }

  /**
   * The attempt holding these keys (`token`) did not complete. `sent`: its messages
   * may have reached a shard, so the key keeps its ids and a retry may take it over at
   * once (storing with dedupe). Otherwise a key this attempt created is forgotten.
   */
  release(keys: string[], token: string, sent: boolean): void {
    this.storage.transactionSync(() => {
      for (const key of keys) {
        if (!sent)
          this.sql.exec(
            "DELETE FROM keys WHERE key = ? AND token = ? AND state = 'pending' AND attempt = 1",
            key,
            token,
          );
        this.sql.exec("UPDATE keys SET claimed_at = 0 WHERE key = ? AND token = ? AND state = 'pending'", key, token);
      }
    });
  }

  /** Deletes expired keys; comes back while any key is left. */
  override async alarm(): Promise<void> {
    this.cost.alarms++;
    const now = this.clock.now();
    this.sql.exec("DELETE FROM keys WHERE expires_at <= ?", now);
    const next = this.sql.exec<{ at: number | null }>("SELECT MIN(expires_at) AS at FROM keys").one().at;
    this.sweepArmed = next !== null;
    if (next !== null) await this.storage.setAlarm(Math.max(next, now + SWEEP_EVERY_MS));
  }
}
