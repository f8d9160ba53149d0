/**
 * The client: `createClient({ url, token })`, then `client.queue("orders")` for sending,
 * pulling and the consumer loop. `client.request()` reaches any other route of the API
 * (queues, consumers, purge, redrive) with the same token, retries and typed errors.
 */
import { ConsumerLoop, type ConsumeOptions, type ConsumeSummary, type MessageHandler } from "./consumer.ts";
import {
  ack,
  extend,
  pull,
  type AckRequest,
  type AckResult,
  type ExtendResult,
  type PullOptions,
  type PullResult,
} from "./pull.ts";
import {
  send,
  sendBatch,
  type MessageSendRequest,
  type SendBatchOptions,
  type SendBatchResult,
  type SendOptions,
  type SendResult,
} from "./producer.ts";
import { retryPolicy, type RetryOptions } from "./retry.ts";
import { Transport, type Envelope, type TransportOptions } from "./transport.ts";

export interface ClientOptions extends TransportOptions {
  /**
   * Sends without an idempotency key of yours get one the client draws, so that a send
   * retried after a network error or a 503 is stored once. Default true; false saves the
   * service the key's bookkeeping, and a retried send may then be stored twice.
   */
  idempotentSends?: boolean;
}

export interface RequestOptions {
  body?: unknown;
  /** Query parameters, added to the path. */
  query?: Record<string, string | number | boolean | undefined>;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  retry?: RetryOptions;
}

export class ShardqClient {
  readonly #transport: Transport;
  readonly #idempotent: boolean;

  constructor(options: ClientOptions) {
    this.#transport = new Transport(options);
    this.#idempotent = options.idempotentSends ?? true;
  }

  /** The service's base URL, as given. */
  get url(): string {
    return this.#transport.url;
  }

  get account(): string {
    return this.#transport.account;
  }

  /** A queue by name (or id). Nothing is called until you use it. */
  queue<Body = unknown>(name: string): QueueClient<Body> {
    if (typeof name !== "string" || name === "") throw new TypeError("the queue's name must be a non-empty string");
    return new QueueClient<Body>(this.#transport, name, this.#idempotent);
  }

  /**
   * Any route of the API, below the account: `request("GET", "/queues")`. Answers the
   * envelope's `result` (and `result_info` on lists); errors are thrown typed.
   */
  async request<T = unknown>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return (await this.requestEnvelope<T>(method, path, opts)).result;
  }

  /** As request(), with the whole envelope: `result_info` of a list, `messages`. */
  async requestEnvelope<T = unknown>(method: string, path: string, opts: RequestOptions = {}): Promise<Envelope<T>> {
    if (!path.startsWith("/")) throw new TypeError('path must start with "/" (it is below /accounts/<account>)');
    const query = Object.entries(opts.query ?? {}).filter(
      (e): e is [string, string | number | boolean] => e[1] !== undefined,
    );
    const qs = query.length ? `?${new URLSearchParams(query.map(([k, v]) => [k, String(v)])).toString()}` : "";
    return this.#transport.call<T>(method, path + qs, {
      body: opts.body,
      headers: opts.headers ?? {},
      signal: opts.signal,
      retry: opts.retry === undefined ? undefined : retryPolicy(opts.retry, this.#transport.retry),
    });
  }
}

export class QueueClient<Body = unknown> {
  readonly name: string;
  readonly #transport: Transport;
  readonly #idempotent: boolean;

  constructor(transport: Transport, name: string, idempotent: boolean) {
    this.#transport = transport;
    this.name = name;
    this.#idempotent = idempotent;
  }

  /** One message. JSON unless `contentType: "text"`. */
  send(body: Body, options?: SendOptions): Promise<SendResult> {
    return send(this.#transport, this.name, body, options, this.#idempotent);
  }

  /** Any number of messages, in requests of at most 100 messages and 256 KB, sent in order. */
  sendBatch(messages: Array<MessageSendRequest<Body>>, options?: SendBatchOptions): Promise<SendBatchResult> {
    return sendBatch(this.#transport, this.name, messages, options, this.#idempotent);
  }

  /** One pull: leases up to `batchSize` messages; waits up to `waitTimeMs` when none is ready. */
  pull(options?: PullOptions): Promise<PullResult<Body>> {
    return pull<Body>(this.#transport, this.name, options);
  }

  /** Acks (deletes) and retries (delivers again after a delay) leased messages, by lease id. */
  ack(request: AckRequest, options?: { signal?: AbortSignal }): Promise<AckResult> {
    return ack(this.#transport, this.name, request, options);
  }

  /** Keeps leases alive: each ends `visibilityTimeoutMs` from now. */
  extend(leaseIds: string[], visibilityTimeoutMs: number, options?: { signal?: AbortSignal }): Promise<ExtendResult> {
    return extend(this.#transport, this.name, leaseIds, visibilityTimeoutMs, options);
  }

  /**
   * Runs `handler` on the queue's messages until `options.signal` aborts, then lets the
   * running handlers finish, settles them, and resolves with what it did. Rejects (after
   * the same wind-down) on an error that pulling again cannot mend: 400, 401, 403, 404.
   */
  consume(handler: MessageHandler<Body>, options?: ConsumeOptions<Body>): Promise<ConsumeSummary> {
    return new ConsumerLoop<Body>(this.#transport, this.name, handler, options).run();
  }
}

export function createClient(options: ClientOptions): ShardqClient {
  return new ShardqClient(options);
}
