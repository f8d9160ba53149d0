/**
 * An optional ceiling on how many messages a storage shard accepts per second.
 * In production one Durable Object tops out near 1,000 requests/s (Cloudflare's documented
 * soft limit: https://developers.cloudflare.com/durable-objects/reference/faq/); on one machine
 * nothing pushes back like that, so this reproduces the ceiling (SHARD_CAPACITY_PER_SECOND)
 * to let the autoscaler be exercised and measured locally. Off by default.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;

  /** Holds one second's worth; starts full. */
  constructor(
    private readonly perSecond: number,
    now: number,
  ) {
    this.tokens = perSecond;
    this.last = now;
  }

  /**
   * Takes `n` tokens while the bucket holds at least one; false (and nothing taken) when
   * it is empty or in debt. A batch larger than what is left passes and leaves a debt,
   * repaid before the next one passes, so the average rate still holds. Asking for all `n`
   * would starve batches: a batch is stored whole or not at all, and the coalescer's
   * batches of many single sends would wait behind small ones for a bucket full enough,
   * refused while the shard had room for most of them.
   */
  take(n: number, now: number): boolean {
    this.tokens = Math.min(this.perSecond, this.tokens + ((now - this.last) / 1000) * this.perSecond);
    this.last = now;
    if (this.tokens < Math.min(n, 1)) return false;
    this.tokens -= n;
    return true;
  }
}

/** One heartbeat's period: what happened since the previous one. */
export interface Period {
  messagesIn: number;
  messagesOut: number;
  refusals: number;
  periodMs: number;
  inFrom?: Record<string, number>;
}

/** What one heartbeat reports about the period since the previous one. */
export class ActivityMeter {
  messagesIn = 0;
  messagesOut = 0;
  refusals = 0;
  /** Of messagesIn, those sent from other regions, by region. */
  inFrom: Record<string, number> = {};
  periodStart: number;

  constructor(now: number) {
    this.periodStart = now;
  }

  /** Returns the period's figures and starts a new period. */
  roll(now: number): Period {
    const out: Period = {
      messagesIn: this.messagesIn,
      messagesOut: this.messagesOut,
      refusals: this.refusals,
      periodMs: Math.max(0, now - this.periodStart),
    };
    if (Object.keys(this.inFrom).length > 0) out.inFrom = this.inFrom;
    this.inFrom = {};
    this.messagesIn = 0;
    this.messagesOut = 0;
    this.refusals = 0;
    this.periodStart = now;
    return out;
  }

  /** Takes back a period whose report failed, so the next report counts it. */
  unroll(period: Period, now: number): void {
    for (const [region, n] of Object.entries(period.inFrom ?? {})) this.inFrom[region] = (this.inFrom[region] ?? 0) + n;
    this.messagesIn += period.messagesIn;
    this.messagesOut += period.messagesOut;
    this.refusals += period.refusals;
    this.periodStart = now - period.periodMs;
  }
}
