/**
 * shardq/producer: the sends of one isolate turned into sendBatch() calls, behind Cloudflare's
 * own `Queue` type.
 *
 *   import { batchingQueue } from "shardq/producer";
 *   const queue = batchingQueue(env.QUEUE, { maxBatch: 100, lingerMs: 2 });
 *
 * Why: every send() through a producer binding is one RPC (and on shardq one write), whatever it
 * carries; a batch of 100 costs about what one message costs. The helper is meant to live at
 * module scope, so that the sends of concurrent requests share batches.
 *
 * What each send() promises, as with the binding: it resolves once its own message is durable
 * (its batch's sendBatch() answered), with its own response (on shardq its own `messageId`), and
 * rejects with its own error. A message the binding would refuse (too large, a body its content
 * type cannot carry, a bad option) is refused here, before it joins a batch, with the binding's
 * error (src/kernel/send-rules.ts, the checks the broker runs): it fails alone. If a sendBatch()
 * call fails, every send in it rejects with that error.
 *
 * Nothing is left unsent when a request ends: each send() hands its own promise to `waitUntil`
 * of "cloudflare:workers", which belongs to the request that made the call, so each request
 * stays alive until its own messages are durable, whether it awaits its sends or not. No `ctx`
 * to pass: a module-scope helper serves many requests, and each send must extend its own.
 *
 * Across requests: the sendBatch() call runs in the request that cut the batch (the one whose
 * send filled it, the one of its first message when the linger timer fires, or one that called
 * flush()), which waits for that batch, so it lives until the call returns. The other requests
 * wait on a promise that call settles; workerd would take such a request, with nothing of its
 * own pending, for hung and cancel it, so each waiting send (and flush) keeps a timer of its
 * own pending until it settles (src/routing/coalesce.ts met the same).
 */
import { waitUntil } from "cloudflare:workers";
import { decodeBody } from "../kernel/encoding";
import { LIMITS } from "../kernel/limits";
import { bindingError, checkSend, fitsOneBatch } from "../kernel/send-rules";

export interface BatchingOptions {
  /** Most messages one sendBatch() carries: 1 to 100 (default 100, Cloudflare's limit). */
  maxBatch?: number;
  /** How long a batch waits for more messages after its first, in ms (default 2). */
  lingerMs?: number;
}

/** Cloudflare's `Queue`, and flush(). */
export interface BatchingQueue<Body = unknown> extends Queue<Body> {
  /** Sends the batch being filled now; resolves once every batch sent so far has settled. */
  flush(): Promise<void>;
}

/** A batch's wait: long enough for the sends of one turn of concurrent requests, short beside a write. */
const DEFAULT_LINGER_MS = 2;
/** Any period does: the timer only has to be pending. */
const KEEP_ALIVE_MS = 10_000;

interface Waiting<Body> {
  message: MessageSendRequest<Body>;
  resolve(response: QueueSendResponse): void;
  reject(error: unknown): void;
}

interface Batch<Body> {
  waiting: Array<Waiting<Body>>;
  /** The encoded size of its bodies, as the service counts a batch. */
  bytes: number;
  timer?: ReturnType<typeof setTimeout>;
}

export function batchingQueue<Body = unknown>(queue: Queue<Body>, options: BatchingOptions = {}): BatchingQueue<Body> {
  const maxBatch = options.maxBatch ?? LIMITS.maxBatchMessages;
  const lingerMs = options.lingerMs ?? DEFAULT_LINGER_MS;
  if (!Number.isInteger(maxBatch) || maxBatch < 1 || maxBatch > LIMITS.maxBatchMessages) {
    throw new RangeError(`batchingQueue: maxBatch must be a whole number from 1 to ${LIMITS.maxBatchMessages}`);
  }
  if (!Number.isFinite(lingerMs) || lingerMs < 0)
    throw new RangeError("batchingQueue: lingerMs must be a number of ms, 0 or more");

  let open: Batch<Body> | undefined;
  const inFlight = new Set<Promise<void>>();

  const cut = (): void => {
    const batch = open;
    if (!batch) return;
    open = undefined;
    if (batch.timer !== undefined) clearTimeout(batch.timer);
    const sent = write(batch);
    inFlight.add(sent);
    void sent.then(() => inFlight.delete(sent));
  };

  /** One sendBatch() for the batch; settles every send in it. Never rejects. */
  const write = async (batch: Batch<Body>): Promise<void> => {
    try {
      const response = await queue.sendBatch(batch.waiting.map((w) => w.message));
      // shardq's binding adds the ids, in the order sent; Cloudflare's has none to give.
      const ids = (response as { messageIds?: unknown }).messageIds;
      const own = Array.isArray(ids) && ids.length === batch.waiting.length ? (ids as unknown[]) : null;
      batch.waiting.forEach((w, i) =>
        w.resolve(
          own
            ? ({ metadata: response.metadata, messageId: own[i] } as QueueSendResponse)
            : { metadata: response.metadata },
        ),
      );
    } catch (error) {
      for (const w of batch.waiting) w.reject(error);
    }
  };

  const send = (body: Body, sendOptions?: QueueSendOptions): Promise<QueueSendResponse> => {
    let checked: ReturnType<typeof checkSend>;
    try {
      checked = checkSend(body, sendOptions);
    } catch (error) {
      return Promise.reject(bindingError(error));
    }
    const size = checked.bytes.byteLength;
    if (open && !(open.waiting.length < maxBatch && fitsOneBatch(open.waiting.length + 1, open.bytes + size))) cut();
    const batch: Batch<Body> = (open ??= { waiting: [], bytes: 0 });
    // The body as it is now, as the consumer will see it: the binding copies it at the call, and
    // a caller may change the object before the batch leaves.
    const message: MessageSendRequest<Body> = { body: decodeBody(checked.bytes, checked.contentType) as Body };
    if (sendOptions?.contentType !== undefined) message.contentType = sendOptions.contentType;
    if (sendOptions?.delaySeconds !== undefined) message.delaySeconds = sendOptions.delaySeconds;
    // shardq's ordering key (docs/ordered-lanes.md) rides along; a batch keeps the sends' order.
    if (checked.orderingKey !== undefined)
      (message as MessageSendRequest<Body> & { orderingKey?: string }).orderingKey = checked.orderingKey;
    const result = new Promise<QueueSendResponse>((resolve, reject) =>
      batch.waiting.push({ message, resolve, reject }),
    );
    batch.bytes += size;
    if (batch.waiting.length >= maxBatch) cut();
    else if (batch.waiting.length === 1) batch.timer = setTimeout(() => open === batch && cut(), lingerMs);
    return keptAlive(result);
  };

  return {
    send,
    sendBatch: (messages, batchOptions) => keptAlive(queue.sendBatch(messages, batchOptions)),
    metrics: () => queue.metrics(),
    flush() {
      cut();
      return keptAlive(Promise.all(inFlight).then(noop));
    },
  };
}

/**
 * Keeps the calling request alive until `p` settles: through waitUntil once it has answered,
 * and meanwhile with a timer of its own, since a request whose only pending work is a promise
 * another request will settle looks hung to workerd, which cancels it. The copy handed to
 * waitUntil never rejects: an error reaches the caller through `p` alone, reported once.
 */
function keptAlive<T>(p: Promise<T>): Promise<T> {
  const timer = setInterval(noop, KEEP_ALIVE_MS);
  const stop = (): void => clearInterval(timer);
  waitUntil(p.then(stop, stop));
  return p;
}

const noop = (): void => {};
