/**
 * The driver's ordered-lane sends (w8, bench/ordered.mjs). Message g of a run (g counts
 * across the driver's /run calls, from `offset`) belongs to key `k${g % keys}` and is that
 * key's message number floor(g / keys); both travel in the body, so that the sink can check
 * the order it receives them in, with or without the service ordering them.
 *
 * "Accepted order" is only defined for a key whose sends do not overlap, so a call waits for
 * the calls still carrying earlier messages of its keys: the order the driver assigns is then
 * the order the service accepted. The unordered half of a pair sends on the same schedule,
 * so the two differ only in the option.
 *
 * `orderingKey` is an extension of Cloudflare's options. A service that does not
 * know it refuses the call (its options are strict); the driver then sends the same messages
 * without it and says so (`refused`), so the workload still runs, as what it is: unordered.
 */

export interface KeyedBody {
  i: number;
  sent_at: number;
  k: string;
  s: number;
}

/** Cloudflare's send options with shardq's ordering key. */
type OrderedQueue = {
  send(body: unknown, options?: { orderingKey?: string }): Promise<unknown>;
  sendBatch(messages: Iterable<{ body: unknown; orderingKey?: string }>): Promise<unknown>;
};

export class KeyedSender {
  /** Per key, the call carrying its latest message, until it settles. */
  private readonly last = new Map<string, Promise<unknown>>();
  /** The service's words when it refused orderingKey; from then on this run sends without it. */
  refused: string | undefined;
  /**
   * The run's first ordered call, which the others wait for: a refusal then costs one failed
   * call, not one per call in flight (each is an error that wrangler dev logs, source-mapped,
   * which costs the stack more CPU than the sends themselves).
   */
  private probe: Promise<unknown> | undefined;

  constructor(
    private readonly queue: Queue<unknown>,
    private readonly keys: number,
    private readonly ordered: boolean,
    private readonly offset: number,
  ) {}

  /** Sends local messages [first, first + n): one send() when n is 1, else one sendBatch(). */
  async send(first: number, n: number): Promise<void> {
    const bodies = Array.from({ length: n }, (_, j) => this.body(first + j));
    const mine = [...new Set(bodies.map((b) => b.k))];
    const before = mine.map((k) => this.last.get(k)).filter((p) => p !== undefined);
    const call = (async () => {
      if (before.length) await Promise.allSettled(before);
      // sent_at once the call may leave: waiting on a key is the producer's, not the queue's.
      const now = Date.now();
      for (const b of bodies) b.sent_at = now;
      await this.call(bodies);
    })();
    for (const k of mine) this.last.set(k, call);
    try {
      await call;
    } finally {
      for (const k of mine) if (this.last.get(k) === call) this.last.delete(k);
    }
  }

  private body(local: number): KeyedBody {
    const g = this.offset + local;
    return { i: local, sent_at: 0, k: `k${g % this.keys}`, s: Math.floor(g / this.keys) };
  }

  private async call(bodies: KeyedBody[]): Promise<void> {
    const q = this.queue as unknown as OrderedQueue;
    if (this.ordered && this.probe) await this.probe.catch(() => {});
    if (this.ordered && this.refused === undefined) {
      const attempt =
        bodies.length === 1
          ? q.send(bodies[0], { orderingKey: bodies[0]!.k })
          : q.sendBatch(bodies.map((body) => ({ body, orderingKey: body.k })));
      this.probe ??= attempt;
      try {
        await attempt;
        return;
      } catch (err) {
        // Only a refusal of the option itself: any other failure is the run's error.
        if (!/orderingKey/.test(String(err))) throw err;
        this.refused ??= String(err);
      }
    }
    if (bodies.length === 1) await q.send(bodies[0]);
    else await q.sendBatch(bodies.map((body) => ({ body })));
  }
}
