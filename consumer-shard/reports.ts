/**
 * What a consumer shard tells its Coordinator (consumerReport): what it delivered since its
 * last report, and until when it counts as delivering (consumer scaling, the dashboard). Not
 * every round: at a message a second a report a round was a Coordinator request and a row per
 * message.
 */
import { coordinatorFor } from "../src/kernel/addressing";
import { serviceConfig } from "../src/kernel/config";
import type { Env } from "../src/kernel/env";
import { SLOW_BELOW_SHARE } from "../src/kernel/heartbeat";
import { readMeter, type CostMeter } from "../src/kernel/sql-meter";

/** How often a consumer shard at work reports. */
export const REPORT_EVERY_MS = 30_000;
/**
 * The same while it delivers fewer messages a second than a quiet storage shard takes
 * (SLOW_BELOW_SHARE of the target, as that shard's slow cadence): at a trickle the reports
 * were most of the Coordinator's cost per message, and no scaling reads them there.
 */
export const SLOW_REPORT_EVERY_MS = 2 * 60_000;

export class ConsumerReports {
  /** Delivered since the last report. */
  counts = { delivered: 0, batches: 0, errors: 0 };
  /** The last report sent: when, and until when it said this shard counts as delivering (null: stopped). */
  last: { at: number; runningUntil: number | null } = { at: -Infinity, runningUntil: null };

  constructor(
    private readonly env: Env,
    private readonly now: () => number,
    private readonly index: () => Promise<number>,
    private readonly cost: CostMeter,
    private readonly since: number,
  ) {}

  /**
   * At the end of a round: a report when the last is due (reportEvery) and there is news (a
   * count, or a change between delivering and not); at once when this shard stopped while its
   * last report said it delivers for a while yet, within an interval when it delivers again
   * after saying it stopped, and when a round failed for the first time.
   * `runningUntil`: when its next round is due plus a margin, or null when it stops.
   */
  async ifDue(queueId: string, runningUntil: number | null, failed: boolean): Promise<void> {
    const now = this.now();
    const last = this.last;
    const c = this.counts;
    const news =
      c.delivered + c.batches + c.errors > 0 ||
      (runningUntil === null) !== (last.runningUntil === null || last.runningUntil < now);
    const stopped = runningUntil === null && last.runningUntil !== null && last.runningUntil > now;
    // Delivering again after a report that it stopped (or whose claim ran out): said within an interval.
    const resumed =
      runningUntil !== null &&
      (last.runningUntil === null || last.runningUntil < now) &&
      now - last.at >= serviceConfig(this.env).heartbeatIntervalMs;
    if ((now - last.at >= this.every(now) && news) || stopped || resumed || (failed && last.at === -Infinity))
      await this.send(queueId, runningUntil);
  }

  /** A round still going after an interval reports when one is due, so the Coordinator sees it working. */
  async duringLongRound(queueId: string): Promise<void> {
    const now = this.now();
    if (now - this.last.at >= REPORT_EVERY_MS) await this.send(queueId, now);
  }

  /** How long after the last report the next is due: slower while this shard delivers a trickle. */
  private every(now: number): number {
    const since = now - this.last.at;
    if (!Number.isFinite(since) || since <= 0) return REPORT_EVERY_MS;
    const perSecond = (this.counts.delivered * 1000) / since;
    return perSecond < serviceConfig(this.env).targetPerShard * SLOW_BELOW_SHARE
      ? SLOW_REPORT_EVERY_MS
      : REPORT_EVERY_MS;
  }

  /** Tells the Coordinator what this shard delivered, and until when it counts as delivering (null: it stopped). */
  private async send(queueId: string, runningUntil: number | null): Promise<void> {
    const index = await this.index();
    const now = this.now();
    const every = this.every(now);
    const { delivered, batches, errors } = this.counts;
    this.counts = { delivered: 0, batches: 0, errors: 0 };
    // Delivering: it counts as such until its next report is due, unless it reports sooner that it stopped.
    if (runningUntil !== null)
      runningUntil = Math.max(runningUntil, now + every + serviceConfig(this.env).heartbeatIntervalMs);
    this.last = { at: now, runningUntil };
    try {
      await coordinatorFor(this.env, queueId).consumerReport({
        index,
        running: runningUntil !== null,
        runningUntil,
        delivered,
        batches,
        errors,
        cost: readMeter(this.cost, this.since),
      });
    } catch (err) {
      console.error("consumer shard report failed:", err);
    }
  }
}
