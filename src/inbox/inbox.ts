/**
 * shardq/inbox: a message's effect applied once, however often the message arrives.
 *
 *   import { inbox } from "shardq/inbox";
 *   this.inbox = inbox(ctx);                                  // in the object's constructor
 *   this.inbox.once(message, (tx) => {
 *     tx.sql.exec("UPDATE account SET balance = balance + ?", tx.body.amount);
 *   });
 *
 * once() runs the effect and records the message's id in one transactionSync(): either both are
 * written or neither. A message whose id is recorded already is not applied again (a redelivery,
 * a retry of a batch that half succeeded, the outbox sending a message again after it lost the
 * answer), and the caller acks it as usual. The id is the one an outbox envelope carries, else
 * the message's own. Ids are kept for a window (default 4 days, Cloudflare's default retention;
 * at least 1 hour) and expire in bounded deletes, at most once a minute, as once() is called.
 * docs/outbox-inbox.md has the guarantee and what it does not cover.
 */
import { unwrapEnvelope } from "../envelope/envelope";

export const INBOX_TABLE = "_shardq_inbox";
/** Cloudflare Queues' default retention: a message is redelivered for at most this long unless the queue keeps it longer. */
export const DEFAULT_WINDOW_SECONDS = 345_600;
/**
 * The shortest window taken. A window must outlast every way a repeat can come: the queue's
 * retention (60 s at the least, on Cloudflare) and the outbox's retries (5 min apart at the
 * default cap). An hour covers the shortest queue and a dozen capped retries; anything shorter
 * saves nothing that matters and would let a slow repeat through.
 */
export const MIN_WINDOW_SECONDS = 3_600;
/** Expired ids are deleted at most once a minute per object, at most this many at a time: a bounded cost per call. */
const EXPIRE_EVERY_MS = 60_000;
const EXPIRE_ROWS = 1_000;

export interface InboxOptions {
  /** How long an id is remembered, in seconds: at least the queue's retention. Default 4 days, at least 1 hour. */
  windowSeconds?: number;
}

/** What the inbox needs of a message: Cloudflare's Message, shardq/client's PulledMessage, or a plain copy. */
export interface InboxMessage<Body = unknown> {
  readonly id: string;
  readonly body: Body;
}

/** What the effect is given, inside the transaction. */
export interface InboxTransaction<Body = unknown> {
  /** The id the message is deduplicated by. */
  id: string;
  /** The body, out of its outbox envelope if it came in one. */
  body: Body;
  message: InboxMessage;
  /** The object's SQL storage: what the effect writes commits with the id. */
  sql: SqlStorage;
}

export type InboxResult<T> = { applied: true; id: string; value: T } | { applied: false; id: string };

/** What each() did with a message: applied, a duplicate, failed, or held back behind a failure. */
export type InboxOutcome =
  { id: string; outcome: "applied" | "duplicate" | "held" } | { id: string; outcome: "failed"; error: string };

interface Settleable {
  ack?(): void;
  retry?(): void;
}

export class Inbox {
  readonly #storage: DurableObjectStorage;
  readonly #windowMs: number;
  #lastExpiry = 0;

  constructor(ctx: DurableObjectState, options: InboxOptions = {}) {
    const seconds = options.windowSeconds ?? DEFAULT_WINDOW_SECONDS;
    if (!Number.isFinite(seconds) || seconds < MIN_WINDOW_SECONDS)
      throw new RangeError(
        `inbox: windowSeconds must be at least ${MIN_WINDOW_SECONDS} (1 hour), and at least the queue's retention`,
      );
    this.#windowMs = seconds * 1000;
    this.#storage = ctx.storage;
    // WITHOUT ROWID: the id is the key, so a lookup and the insert touch one tree, and the
    // index on applied_at finds expired ids oldest first without a scan.
    ctx.storage.sql.exec(
      `CREATE TABLE IF NOT EXISTS ${INBOX_TABLE} (id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) WITHOUT ROWID`,
    );
    ctx.storage.sql.exec(`CREATE INDEX IF NOT EXISTS ${INBOX_TABLE}_applied_at ON ${INBOX_TABLE} (applied_at)`);
  }

  /**
   * Applies `effect` unless the message's id is recorded, and records it, in one transaction.
   * The effect must be synchronous (SQL through `tx.sql`): a promise it returns would settle
   * after the transaction, so it is refused and nothing is written. An effect that throws
   * writes nothing, the id included; once() throws its error, and a later delivery applies it.
   */
  once<T, Body = unknown>(message: InboxMessage<unknown>, effect: (tx: InboxTransaction<Body>) => T): InboxResult<T> {
    const { id, body } = unwrap<Body>(message);
    const now = Date.now();
    const result = this.#storage.transactionSync((): InboxResult<T> => {
      const fresh =
        this.#storage.sql.exec(
          `INSERT INTO ${INBOX_TABLE} (id, applied_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`,
          id,
          now,
        ).rowsWritten > 0;
      if (!fresh) return { applied: false, id };
      const value = effect({ id, body, message, sql: this.#storage.sql });
      if (typeof (value as { then?: unknown } | null)?.then === "function")
        throw new TypeError("inbox.once: the effect returned a promise; it must apply its writes synchronously");
      return { applied: true, id, value };
    });
    if (now - this.#lastExpiry >= EXPIRE_EVERY_MS) {
      this.#lastExpiry = now;
      // A full round means more may be due: the next call may take another.
      if (this.expire(now) === EXPIRE_ROWS) this.#lastExpiry = 0;
    }
    return result;
  }

  /**
   * once() for each message in order, stopping at the first whose effect throws: it and every
   * message after it are retried (held back, so that none is applied before an earlier one).
   * Messages that have ack() and retry() (Cloudflare's Message) are settled here; the outcomes
   * say what happened to each, for messages settled elsewhere (settle()).
   */
  each<Body = unknown>(
    messages: readonly InboxMessage<unknown>[],
    effect: (tx: InboxTransaction<Body>, index: number) => void,
  ): InboxOutcome[] {
    const outcomes: InboxOutcome[] = [];
    let failed = false;
    messages.forEach((m, i) => {
      const id = idOf(m);
      if (failed) {
        outcomes.push({ id, outcome: "held" });
        return (m as Settleable).retry?.();
      }
      try {
        const r = this.once<void, Body>(m, (tx) => effect(tx, i));
        outcomes.push({ id, outcome: r.applied ? "applied" : "duplicate" });
        (m as Settleable).ack?.();
      } catch (err) {
        failed = true;
        outcomes.push({
          id,
          outcome: "failed",
          error: err instanceof Error ? `${err.name}: ${err.message}` : String(err),
        });
        (m as Settleable).retry?.();
      }
    });
    return outcomes;
  }

  /** Whether the message's id is recorded (applied within the window and not yet expired). */
  seen(message: InboxMessage<unknown> | string): boolean {
    const id = typeof message === "string" ? message : idOf(message);
    return this.#storage.sql.exec(`SELECT 1 FROM ${INBOX_TABLE} WHERE id = ?`, id).toArray().length > 0;
  }

  /** Deletes up to 1000 ids older than the window, oldest first; returns how many. once() calls it by itself. */
  expire(now = Date.now()): number {
    return this.#storage.sql
      .exec(
        `DELETE FROM ${INBOX_TABLE} WHERE id IN (SELECT id FROM ${INBOX_TABLE} WHERE applied_at < ? ORDER BY applied_at LIMIT ?) RETURNING 1`,
        now - this.#windowMs,
        EXPIRE_ROWS,
      )
      .toArray().length;
  }
}

/** The inbox of a Durable Object: construct it once, in the object's constructor. */
export function inbox(ctx: DurableObjectState, options?: InboxOptions): Inbox {
  return new Inbox(ctx, options);
}

/** The id and body of a message, out of its outbox envelope when it is in one. */
export function unwrap<Body = unknown>(message: InboxMessage<unknown>): { id: string; body: Body } {
  const inside = unwrapEnvelope(message.body);
  if (inside) return { id: inside.id, body: inside.body as Body };
  if (typeof message.id !== "string" || message.id === "")
    throw new TypeError("inbox: a message needs a non-empty string id");
  return { id: message.id, body: message.body as Body };
}

/** The id the inbox deduplicates a message by. */
export function idOf(message: InboxMessage<unknown>): string {
  return unwrap(message).id;
}

/**
 * Plain copies of a batch's messages, to hand to a consumer object over RPC (a Message, with
 * its methods, cannot cross): the object runs inbox.each() on them and returns the outcomes.
 */
export function forInbox(messages: readonly InboxMessage<unknown>[]): Array<{ id: string; body: unknown }> {
  return messages.map((m) => ({ id: m.id, body: m.body }));
}

/** Acks or retries each message by the outcome each() gave for it in the consumer object. */
export function settle(
  messages: readonly (InboxMessage<unknown> & Settleable)[],
  outcomes: readonly InboxOutcome[],
): void {
  messages.forEach((m, i) => {
    const o = outcomes[i];
    if (o !== undefined && o.id !== idOf(m))
      throw new Error(`inbox.settle: outcome ${i} is for ${o.id}, not ${idOf(m)}`);
    if (o?.outcome === "applied" || o?.outcome === "duplicate") m.ack?.();
    else m.retry?.();
  });
}
