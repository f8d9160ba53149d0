/**
 * shardq/outbox: messages recorded in a Durable Object's own transaction, sent once it commits.
 *
 *   import { outbox } from "shardq/outbox";
 *   this.outbox = outbox(ctx, env.QUEUE);                  // in the object's constructor
 *   ctx.storage.transactionSync(() => {
 *     this.sql.exec("UPDATE account SET balance = balance - ?", amount);
 *     this.outbox.send({ debit: amount });                  // a row in the same transaction
 *   });
 *   async alarm() { await this.outbox.alarm(); }            // retries come from the alarm
 *
 * send() writes one row to the outbox's table inside whatever transaction is open (its own
 * transactionSync nests in the caller's), so the message exists exactly when the caller's writes
 * do. Delivery starts on a timer after the caller's synchronous code has returned, so it reads
 * only rows whose transaction committed, and it goes out through the object's output gate, which
 * holds it until those rows are durable. Rows are sent in record order, 100 messages or 256 KB per
 * sendBatch(), one call in flight at a time, each message with the id fixed when it was recorded
 * (the binding's `id` option, or an envelope: docs/outbox-inbox.md); an answered batch is deleted
 * by one DELETE. A failed call keeps the rows and is retried from the object's alarm, with
 * exponential backoff to a cap. docs/outbox-inbox.md has the guarantee, the cost and the alarm
 * pattern for objects with alarms of their own.
 */
import { newOutboxId } from "../envelope/envelope";
import { AlarmShare } from "./alarm-share";
import { OutboxRows, type HeadBatch } from "./outbox-rows";
import { messageOf, record, type IdMode, type SendOptions } from "./recorded-body";

export type { IdMode } from "./recorded-body";

export interface OutboxOptions {
  /**
   * How a message's id reaches the consumer. "envelope" (the default) works with any binding:
   * the body travels inside `{ shardq_outbox: 1, id, body }`, which shardq/inbox unwraps. "id"
   * is for shardq's producer binding only: the id goes as the message's own id (the binding's
   * `id` option), the body as it is, and the queue stores a repeated id once.
   */
  ids?: IdMode;
  /** The content type of messages sent without one (default "json", which every consumer reads). */
  contentType?: QueueContentType;
  /** Backoff after failed sends: the first retry after baseMs (default 1 s), doubling to maxMs (default 5 min). */
  retry?: { baseMs?: number; maxMs?: number };
  /**
   * How long after a message is recorded the outbox's alarm is set for, in case the delivery that
   * starts at once never finishes (the object evicted or restarted in between). Default 10 s.
   */
  backstopMs?: number;
}

/** One message of sendBatch(): Cloudflare's MessageSendRequest, and shardq's ordering key. */
export interface OutboxMessage<Body = unknown> extends SendOptions {
  body: Body;
}

export interface OutboxStatus {
  /** Messages recorded and not yet answered. */
  pending: number;
  oldestRecordedAt: number | null;
  /** Failed sends in a row, 0 after any answered one. */
  attempts: number;
  lastError: string | null;
  /** When the next retry comes, while retrying. */
  nextAttemptAt: number | null;
}

export interface OutboxAlarmResult {
  /** Whether the object's own alarm time has come: run the object's own alarm work. */
  ownAlarmDue: boolean;
  /**
   * When the outbox needs the alarm again: a retry, or the backstop while messages wait; null
   * when it needs none. It has set the alarm for it already.
   */
  nextAlarm: number | null;
}

const DEFAULT_RETRY_BASE_MS = 1_000;
const DEFAULT_RETRY_MAX_MS = 300_000;
const DEFAULT_BACKSTOP_MS = 10_000;

export class Outbox<Body = unknown> {
  readonly #storage: DurableObjectStorage;
  readonly #queue: Queue<Body>;
  readonly #rows: OutboxRows;
  readonly #alarms: AlarmShare;
  readonly #mode: IdMode;
  readonly #contentType: QueueContentType;
  readonly #retryBaseMs: number;
  readonly #retryMaxMs: number;
  readonly #backstopMs: number;
  #running: Promise<void> | null = null;
  #again = false;
  #force = false;
  #warnedIds = false;

  constructor(ctx: DurableObjectState, queue: Queue<Body>, options: OutboxOptions = {}) {
    const mode = options.ids ?? "envelope";
    if (mode !== "envelope" && mode !== "id") throw new TypeError('outbox: ids must be "envelope" or "id"');
    this.#retryBaseMs = options.retry?.baseMs ?? DEFAULT_RETRY_BASE_MS;
    this.#retryMaxMs = options.retry?.maxMs ?? DEFAULT_RETRY_MAX_MS;
    this.#backstopMs = options.backstopMs ?? DEFAULT_BACKSTOP_MS;
    for (const [name, v] of [
      ["retry.baseMs", this.#retryBaseMs],
      ["retry.maxMs", this.#retryMaxMs],
      ["backstopMs", this.#backstopMs],
    ] as const)
      if (!Number.isFinite(v) || v < 0) throw new RangeError(`outbox: ${name} must be a number of ms, 0 or more`);
    this.#storage = ctx.storage;
    this.#queue = queue;
    this.#mode = mode;
    this.#contentType = options.contentType ?? "json";
    this.#rows = new OutboxRows(ctx.storage.sql);
    this.#alarms = new AlarmShare(ctx.storage);
  }

  /**
   * Records one message in the transaction open now and returns its id. Throws, recording
   * nothing, what the binding would refuse (the error the binding gives), so the caller's
   * transaction rolls back with it.
   */
  send(body: Body, options: SendOptions = {}): string {
    return this.sendBatch([{ ...options, body }])[0]!;
  }

  /** Records the messages, in order, in the transaction open now; returns their ids. */
  sendBatch(messages: Iterable<OutboxMessage<Body>>, options: { delaySeconds?: number } = {}): string[] {
    const now = Date.now();
    const recorded = [...messages].map(({ body, ...opts }) =>
      record(
        newOutboxId(),
        body,
        { ...opts, delaySeconds: opts.delaySeconds ?? options.delaySeconds },
        this.#contentType,
        this.#mode,
      ),
    );
    if (recorded.length === 0) return [];
    this.#storage.transactionSync(() => {
      for (const r of recorded) this.#rows.insert(r, now);
      // Armed while messages wait, in the same transaction: a commit always leaves an alarm
      // behind it, whatever becomes of the delivery started below.
      this.#alarms.update((s) => {
        if (s.outboxAlarm === null) s.outboxAlarm = now + this.#backstopMs;
      });
    });
    void this.#run(false);
    return recorded.map((r) => r.id);
  }

  /**
   * Sends what is recorded now, retrying or not, and resolves once it has been answered or has
   * failed. Call it outside `storage.transaction()`: inside, its reads would run inside that
   * transaction too (send() starts a delivery by itself; nothing needs to call this).
   */
  async flush(): Promise<OutboxStatus> {
    await this.#run(true);
    return this.status();
  }

  /**
   * The outbox's part of the object's alarm(): call it first thing there. Sends what is due,
   * sets the alarm for whichever of the outbox and the object needs it next, and says whether
   * the object's own alarm time has come.
   */
  async alarm(): Promise<OutboxAlarmResult> {
    const ownAlarmDue = await this.#alarms.fired(Date.now());
    await this.#running?.catch(noop);
    const s = this.#alarms.read();
    // An alarm that fired early for the object while a retry waits sends nothing: the backoff
    // holds. Otherwise whatever waits goes now, the backstop's case and the retry's alike.
    const retryLater = s.attempts > 0 && s.outboxAlarm !== null && s.outboxAlarm > Date.now();
    if (!retryLater && (s.outboxAlarm !== null || !this.#rows.isEmpty())) await this.#run(true);
    return { ownAlarmDue, nextAlarm: this.#alarms.read().outboxAlarm };
  }

  /**
   * Sets the object's own alarm, through the outbox: the alarm goes off at this time unless the
   * outbox needs it sooner, and outbox.alarm() then says ownAlarmDue once this time has come.
   * Synchronous, so it can join a transaction.
   */
  setAlarm(scheduledTime: number | Date): void {
    const t = typeof scheduledTime === "number" ? scheduledTime : scheduledTime.getTime();
    if (!Number.isFinite(t) || t <= 0) throw new TypeError("outbox.setAlarm: the time must be a date after 1970");
    this.#alarms.update((s) => {
      s.ownAlarm = Math.round(t);
    });
  }

  /** Cancels the object's own alarm; the outbox keeps an alarm only while it needs one. */
  deleteAlarm(): void {
    this.#alarms.update((s) => {
      s.ownAlarm = null;
    });
  }

  /** The object's own alarm time as the outbox keeps it (ms since the epoch), or null. */
  getAlarm(): number | null {
    return this.#alarms.read().ownAlarm;
  }

  status(): OutboxStatus {
    const { count, oldestRecordedAt } = this.#rows.pending();
    const s = this.#alarms.read();
    return {
      pending: count,
      oldestRecordedAt,
      attempts: s.attempts,
      lastError: s.lastError,
      nextAttemptAt: s.attempts > 0 ? s.outboxAlarm : null,
    };
  }

  /**
   * One delivery loop at a time: a call while one runs asks it to go round again. The loop's
   * first read waits for a timer, so a run started inside a transactionSync() reads after it has
   * returned, committed or rolled back.
   */
  #run(force: boolean): Promise<void> {
    this.#again = true;
    this.#force ||= force;
    this.#running ??= (async () => {
      try {
        await new Promise((resolve) => setTimeout(resolve, 0));
        while (this.#again) {
          this.#again = false;
          const f = this.#force;
          this.#force = false;
          await this.#deliver(f);
        }
      } catch (err) {
        console.error("shardq/outbox: delivery stopped:", err);
      } finally {
        this.#running = null;
      }
    })();
    return this.#running;
  }

  /** Sends batches from the head until the table is empty or a call fails. */
  async #deliver(force: boolean): Promise<void> {
    await this.#alarms.reconcile(Date.now());
    const start = this.#alarms.read();
    // While retrying, new sends wait for the alarm: the backoff is for the queue's sake.
    if (!force && start.attempts > 0 && start.outboxAlarm !== null && start.outboxAlarm > Date.now()) return;
    for (;;) {
      const batch = this.#rows.head();
      if (batch === null) {
        this.#alarms.update((s) => {
          s.outboxAlarm = null;
          s.attempts = 0;
          s.lastError = null;
        });
        return;
      }
      let response: QueueSendBatchResponse;
      try {
        response = await this.#queue.sendBatch(
          batch.rows.map((r) => messageOf(r, this.#mode)) as MessageSendRequest<Body>[],
        );
      } catch (err) {
        const failedAt = Date.now();
        const s = this.#alarms.update((x) => {
          x.attempts += 1;
          x.lastError = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
          x.outboxAlarm = failedAt + this.#backoff(x.attempts);
        });
        console.error(
          `shardq/outbox: sendBatch of ${batch.rows.length} message(s) failed (attempt ${s.attempts}); retrying at ${new Date(s.outboxAlarm!).toISOString()}:`,
          err,
        );
        return;
      }
      this.#rows.remove(batch);
      this.#checkIds(batch, response);
      const answeredAt = Date.now();
      this.#alarms.update((s) => {
        if (s.attempts === 0) return;
        s.attempts = 0;
        s.lastError = null;
        s.outboxAlarm = answeredAt + this.#backstopMs;
      });
    }
  }

  /** Doubling from the base to the cap, less up to a fifth at random, so objects that failed together do not retry together. */
  #backoff(attempts: number): number {
    const full = Math.min(this.#retryMaxMs, this.#retryBaseMs * 2 ** Math.min(attempts - 1, 40));
    return Math.round(full * (1 - Math.random() / 5));
  }

  /**
   * In "id" mode the binding must answer with the outbox's ids (shardq's does, in `messageIds`);
   * other ids mean it dropped the option, and with it the queue's protection against a repeat.
   */
  #checkIds(batch: HeadBatch, response: QueueSendBatchResponse): void {
    if (this.#mode !== "id" || this.#warnedIds) return;
    const ids = (response as { messageIds?: unknown } | undefined)?.messageIds;
    if (Array.isArray(ids) && ids.every((id, i) => id === batch.rows[i]?.id)) return;
    this.#warnedIds = true;
    console.warn(
      'shardq/outbox: ids: "id" but the binding did not answer with the outbox\'s ids: it does not take the `id` option (a Cloudflare Queues binding?). Use ids: "envelope" with it.',
    );
  }
}

/** The outbox of a Durable Object: construct it once, in the object's constructor. */
export function outbox<Body = unknown>(
  ctx: DurableObjectState,
  queue: Queue<Body>,
  options?: OutboxOptions,
): Outbox<Body> {
  return new Outbox(ctx, queue, options);
}

const noop = (): void => {};
