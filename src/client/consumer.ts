/**
 * The pull consumer's loop: pull (long polling) as many messages as there are free
 * handler slots, run the handler on each, keep their leases alive while it runs, ack
 * what it handled and retry what it threw on, with a delay. Messages of one ordering key
 * run one after another, in the order the pull gave them, whatever the concurrency.
 *
 * Stopping (the AbortSignal) ends the pull under way and pulls no more; the handlers
 * already running finish, their leases kept alive meanwhile, and their acks and retries
 * are sent before consume() resolves. A message whose pull answer was cut off by the stop
 * stays leased only until its visibility timeout ends, then is delivered again: nothing
 * leased is lost, and nothing is held past its lease.
 */
import { AbortedError, ConflictError, ShardqError } from "./errors.ts";
import { ack, extend, MAX_LEASES_PER_CALL, pull, type PulledMessage } from "./pull.ts";
import { backoffMs, isRetryable, sleep, type RetryPolicy } from "./retry.ts";
import type { Transport } from "./transport.ts";

/** A pulled message as a handler sees it: settle it yourself, or let the loop (ack on return, retry on throw). */
export interface ConsumedMessage<Body = unknown> extends PulledMessage<Body> {
  ack(): void;
  retry(options?: { delaySeconds?: number }): void;
}

export type MessageHandler<Body = unknown> = (message: ConsumedMessage<Body>) => unknown;

export type ConsumeStage = "handler" | "pull" | "ack" | "extend";

export interface ConsumeOptions<Body = unknown> {
  /** Handlers running at once. Default 10. */
  concurrency?: number;
  /** The most messages one pull asks for (1 to 100); never more than the free slots. Default 100. */
  batchSize?: number;
  /** How long an empty pull waits for messages (0 to 20,000 ms). Default 20,000. */
  waitTimeMs?: number;
  /** The lease each pull takes; extended while a handler runs. Default 30,000 ms. */
  visibilityTimeoutMs?: number;
  /** The delay of a retry after the handler threw: seconds, or a function of the message. Default 2^(attempts-1) s, at most 60. */
  retryDelaySeconds?: number | ((message: PulledMessage<Body>, error: unknown) => number);
  /** Stops the loop: no more pulls; running handlers finish and are settled; then consume() resolves. */
  signal?: AbortSignal;
  /** Hears of every error the loop carries on after. Default: console.error. */
  onError?: (error: unknown, context: { stage: ConsumeStage; message?: PulledMessage<Body> }) => void;
}

export interface ConsumeSummary {
  /** Handlers that returned. */
  handled: number;
  /** Handlers that threw. */
  failed: number;
  /** Messages the service acked / took back for a retry, as its answers counted them. */
  acked: number;
  retried: number;
  pulls: number;
}

/** A pulled message the loop holds, from its pull to the answer of its ack. */
interface Held<Body> {
  message: PulledMessage<Body>;
  /** When its lease ends, by this machine's clock, counted from before the pull was sent. */
  leaseEnds: number;
}

/** A wait for the next change in the loop's state: a handler done, a settle sent. */
class Wakeup {
  #waiters: Array<() => void> = [];
  wait(): Promise<void> {
    return new Promise((resolve) => this.#waiters.push(resolve));
  }
  notify(): void {
    const w = this.#waiters;
    this.#waiters = [];
    for (const resolve of w) resolve();
  }
}

export class ConsumerLoop<Body = unknown> {
  readonly #transport: Transport;
  readonly #queue: string;
  readonly #handler: MessageHandler<Body>;
  readonly #concurrency: number;
  readonly #batchSize: number;
  readonly #waitMs: number;
  readonly #visibilityMs: number;
  readonly #retryDelay: (m: PulledMessage<Body>, e: unknown) => number;
  readonly #onError: NonNullable<ConsumeOptions<Body>["onError"]>;
  readonly #stop: AbortSignal;
  /** Resolves when the stop signal fires: one listener for the loop's whole life. */
  readonly #stopped: Promise<void>;
  /** Leases held, by lease id: extended until their ack is answered. */
  readonly #held = new Map<string, Held<Body>>();
  /** The last handler of each ordering key, so the next one of the key starts after it. */
  readonly #keyTails = new Map<string, Promise<void>>();
  readonly #tasks = new Set<Promise<void>>();
  readonly #wakeup = new Wakeup();
  readonly #settles: Settles<Body>;
  #running = 0;
  readonly #summary: ConsumeSummary = { handled: 0, failed: 0, acked: 0, retried: 0, pulls: 0 };

  constructor(transport: Transport, queue: string, handler: MessageHandler<Body>, options: ConsumeOptions<Body> = {}) {
    if (typeof handler !== "function") throw new TypeError("the handler must be a function");
    this.#transport = transport;
    this.#queue = queue;
    this.#handler = handler;
    this.#concurrency = whole(options.concurrency ?? 10, "concurrency", 1, 10_000);
    this.#batchSize = whole(options.batchSize ?? 100, "batchSize", 1, 100);
    this.#waitMs = whole(options.waitTimeMs ?? 20_000, "waitTimeMs", 0, 20_000);
    this.#visibilityMs = whole(options.visibilityTimeoutMs ?? 30_000, "visibilityTimeoutMs", 1000, 43_200_000);
    const delay =
      options.retryDelaySeconds ?? ((m: PulledMessage<Body>) => Math.min(60, 2 ** Math.max(0, m.attempts - 1)));
    this.#retryDelay = typeof delay === "number" ? () => delay : delay;
    this.#onError =
      options.onError ??
      ((err, { stage, message }) =>
        console.error(`shardq consumer: ${stage}${message ? ` of message ${message.id}` : ""} failed:`, err));
    this.#stop = options.signal ?? new AbortController().signal;
    this.#stopped = aborted(this.#stop);
    this.#settles = new Settles<Body>({
      transport,
      queue,
      retry: transport.retry,
      done: (leaseIds) => this.#release(leaseIds),
      report: (err, m) => this.#report(err, "ack", m),
      summary: this.#summary,
    });
  }

  async run(): Promise<ConsumeSummary> {
    const extender = setInterval(() => void this.#extendDue(), Math.max(100, Math.min(5000, this.#visibilityMs / 6)));
    let fatal: unknown;
    try {
      fatal = await this.#pullLoop();
    } finally {
      // Running handlers finish and are settled, their leases extended until then.
      while (this.#tasks.size > 0) await Promise.all([...this.#tasks]);
      await this.#settles.flushAll();
      clearInterval(extender);
    }
    if (fatal !== undefined) throw fatal;
    return { ...this.#summary };
  }

  /** Pulls until stopped; answers the error that ended it, if one did. */
  async #pullLoop(): Promise<unknown> {
    let failures = 0;
    while (!this.#stop.aborted) {
      const free = this.#concurrency - this.#running;
      if (free <= 0) {
        await Promise.race([this.#wakeup.wait(), this.#stopped]);
        continue;
      }
      const pulledAt = Date.now();
      try {
        const { messages } = await pull<Body>(this.#transport, this.#queue, {
          batchSize: Math.min(free, this.#batchSize),
          visibilityTimeoutMs: this.#visibilityMs,
          waitTimeMs: this.#waitMs,
          signal: this.#stop,
          retry: { ...this.#transport.retry, attempts: 1 },
        });
        this.#summary.pulls++;
        failures = 0;
        for (const message of messages) this.#start(message, pulledAt + this.#visibilityMs);
      } catch (err) {
        if (this.#stop.aborted) return undefined;
        // A paused queue, or one whose consumer is not http_pull yet, is the operator's to change: wait for it.
        if (!isRetryable(err) && !(err instanceof ConflictError)) return err;
        this.#report(err, "pull");
        failures++;
        await sleep(
          backoffMs(
            failures,
            { ...this.#transport.retry, maxDelayMs: Math.max(this.#transport.retry.maxDelayMs, 1000) },
            err,
          ),
          this.#stop,
        ).catch(ignoreAbort);
      }
    }
    return undefined;
  }

  #start(message: PulledMessage<Body>, leaseEnds: number): void {
    this.#held.set(message.leaseId, { message, leaseEnds });
    this.#running++;
    const key = message.orderingKey;
    const before = key === undefined ? undefined : this.#keyTails.get(key);
    const task = (before ?? Promise.resolve()).then(() => this.#handle(message));
    if (key !== undefined) {
      this.#keyTails.set(key, task);
      void task.then(() => {
        if (this.#keyTails.get(key) === task) this.#keyTails.delete(key);
      });
    }
    this.#tasks.add(task);
    void task.finally(() => {
      this.#tasks.delete(task);
      this.#running--;
      this.#wakeup.notify();
    });
  }

  async #handle(message: PulledMessage<Body>): Promise<void> {
    let decided: { retry: boolean; delaySeconds?: number | undefined } | undefined;
    const consumed: ConsumedMessage<Body> = {
      ...message,
      ack: () => void (decided ??= { retry: false }),
      retry: (o) => void (decided ??= { retry: true, delaySeconds: o?.delaySeconds }),
    };
    try {
      await this.#handler(consumed);
      this.#summary.handled++;
      decided ??= { retry: false };
    } catch (err) {
      this.#summary.failed++;
      this.#report(err, "handler", message);
      decided ??= { retry: true, delaySeconds: this.#delayFor(message, err) };
    }
    this.#settles.add(message, decided.retry, decided.delaySeconds);
  }

  #delayFor(message: PulledMessage<Body>, err: unknown): number | undefined {
    try {
      const d = this.#retryDelay(message, err);
      return Number.isInteger(d) && d >= 0 ? Math.min(d, 86_400) : undefined;
    } catch {
      return undefined;
    }
  }

  /** Extends, in calls of up to 100, every lease that is half gone. */
  async #extendDue(): Promise<void> {
    const now = Date.now();
    const due = [...this.#held.values()].filter((h) => h.leaseEnds - now <= this.#visibilityMs / 2);
    for (let i = 0; i < due.length; i += MAX_LEASES_PER_CALL) {
      const part = due.slice(i, i + MAX_LEASES_PER_CALL);
      const sentAt = Date.now();
      try {
        const r = await extend(
          this.#transport,
          this.#queue,
          part.map((h) => h.message.leaseId),
          this.#visibilityMs,
          { retry: { ...this.#transport.retry, attempts: 1 } },
        );
        for (const h of part) {
          const warning = r.warnings[h.message.leaseId];
          if (warning === undefined) h.leaseEnds = sentAt + this.#visibilityMs;
          else if (this.#held.delete(h.message.leaseId))
            this.#report(new ShardqError(`lease of message ${h.message.id} ${warning}`), "extend", h.message);
        }
      } catch (err) {
        // The next tick tries again, well before the lease ends.
        this.#report(err, "extend");
      }
    }
  }

  #release(leaseIds: string[]): void {
    for (const id of leaseIds) this.#held.delete(id);
    this.#wakeup.notify();
  }

  #report(err: unknown, stage: ConsumeStage, message?: PulledMessage<Body>): void {
    try {
      this.#onError(err, message ? { stage, message } : { stage });
    } catch {
      // An onError that throws must not stop the loop.
    }
  }
}

/**
 * Acks and retries, gathered over a turn of the event loop and sent in calls of up to 100
 * each; a call that fails is sent again as the client's retry policy says. A settle that
 * never gets through leaves its message to come back when its lease ends.
 */
class Settles<Body> {
  #acks: Array<PulledMessage<Body>> = [];
  #retries: Array<{ message: PulledMessage<Body>; delaySeconds: number | undefined }> = [];
  #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #sending = new Set<Promise<void>>();

  readonly #transport: Transport;
  readonly #queue: string;
  readonly #retry: RetryPolicy;
  readonly #done: (leaseIds: string[]) => void;
  readonly #report: (err: unknown, message?: PulledMessage<Body>) => void;
  readonly #summary: ConsumeSummary;

  constructor(o: {
    transport: Transport;
    queue: string;
    retry: RetryPolicy;
    done: (leaseIds: string[]) => void;
    report: (err: unknown, message?: PulledMessage<Body>) => void;
    summary: ConsumeSummary;
  }) {
    this.#transport = o.transport;
    this.#queue = o.queue;
    this.#retry = o.retry;
    this.#done = o.done;
    this.#report = o.report;
    this.#summary = o.summary;
  }

  add(message: PulledMessage<Body>, retry: boolean, delaySeconds: number | undefined): void {
    if (retry) this.#retries.push({ message, delaySeconds });
    else this.#acks.push(message);
    if (this.#acks.length >= MAX_LEASES_PER_CALL || this.#retries.length >= MAX_LEASES_PER_CALL) this.#flush();
    else this.#timer ??= setTimeout(() => this.#flush(), 0);
  }

  async flushAll(): Promise<void> {
    while (this.#acks.length > 0 || this.#retries.length > 0 || this.#sending.size > 0) {
      this.#flush();
      await Promise.all([...this.#sending]);
    }
  }

  #flush(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    while (this.#acks.length > 0 || this.#retries.length > 0) {
      const acks = this.#acks.splice(0, MAX_LEASES_PER_CALL);
      const retries = this.#retries.splice(0, MAX_LEASES_PER_CALL);
      const sending = this.#send(acks, retries);
      this.#sending.add(sending);
      void sending.finally(() => this.#sending.delete(sending));
    }
  }

  async #send(
    acks: Array<PulledMessage<Body>>,
    retries: Array<{ message: PulledMessage<Body>; delaySeconds: number | undefined }>,
  ): Promise<void> {
    const all = [...acks, ...retries.map((r) => r.message)];
    try {
      const r = await ack(
        this.#transport,
        this.#queue,
        {
          acks: acks.map((m) => m.leaseId),
          retries: retries.map((x) =>
            x.delaySeconds === undefined
              ? { leaseId: x.message.leaseId }
              : { leaseId: x.message.leaseId, delaySeconds: x.delaySeconds },
          ),
        },
        { retry: this.#retry },
      );
      this.#summary.acked += r.ackCount;
      this.#summary.retried += r.retryCount;
      for (const m of all) {
        const warning = r.warnings[m.leaseId];
        if (warning !== undefined) this.#report(new ShardqError(`settling message ${m.id} ${warning}`), m);
      }
    } catch (err) {
      this.#report(err instanceof ShardqError ? err : new ShardqError(String(err), { cause: err }));
    } finally {
      this.#done(all.map((m) => m.leaseId));
    }
  }
}

function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
}

function ignoreAbort(err: unknown): void {
  if (!(err instanceof AbortedError)) throw err;
}

function whole(n: unknown, name: string, min: number, max: number): number {
  if (typeof n !== "number" || !Number.isInteger(n) || n < min || n > max)
    throw new RangeError(`${name} must be a whole number from ${min} to ${max}`);
  return n;
}
