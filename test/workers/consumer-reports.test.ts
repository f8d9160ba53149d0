/**
 * A consumer shard's reports to its Coordinator (consumer-shard/reports.ts): how often, and
 * what they claim, with the shard's clock stood in for.
 */
import { env } from "cloudflare:test";
import { expect, it, describe, onTestFinished } from "vitest";
import { Coordinator } from "../../coordinator/coordinator";
import type { ConsumerShardReport } from "../../coordinator/heartbeats";
import { ConsumerReports, REPORT_EVERY_MS, SLOW_REPORT_EVERY_MS } from "../../consumer-shard/reports";
import { newMeter } from "../../src/kernel/sql-meter";
import { createQueue } from "./helpers";

describe("a consumer shard's reports", () => {
  it("come every REPORT_EVERY_MS while it delivers much, every SLOW_REPORT_EVERY_MS at a trickle, each saying it delivers until the next is due", async () => {
    const q = await createQueue("report-cadence");
    const sent: ConsumerShardReport[] = [];
    const consumerReport = Coordinator.prototype.consumerReport;
    Coordinator.prototype.consumerReport = function (this: Coordinator, r) {
      sent.push(r);
      return consumerReport.call(this, r);
    };
    onTestFinished(() => void (Coordinator.prototype.consumerReport = consumerReport));
    let now = 1_000_000;
    const reports = new ConsumerReports(
      env,
      () => now,
      async () => 0,
      newMeter(),
      0,
    );
    const deliver = async (n: number, ms: number) => {
      now += ms;
      reports.counts.delivered += n;
      reports.counts.batches++;
      await reports.ifDue(q.queue_id, now + 1000, false);
    };
    // The first report knows no rate yet: it claims REPORT_EVERY_MS and an interval.
    await deliver(1, 0);
    expect(sent).toHaveLength(1);
    const at = () => now;
    // A message a second: the next once that claim ran out, claiming two minutes; then none
    // for two minutes (a report every 30 s was two Coordinator requests and rows a minute).
    while (sent.length < 2) await deliver(1, 1000);
    const second = at();
    expect(second - 1_000_000).toBeLessThanOrEqual(REPORT_EVERY_MS + 10_000);
    expect(sent[1]!.runningUntil! - now).toBeGreaterThanOrEqual(SLOW_REPORT_EVERY_MS);
    while (sent.length < 3) await deliver(1, 1000);
    expect(at() - second).toBe(SLOW_REPORT_EVERY_MS);
    // A hundred a second: every REPORT_EVERY_MS, the claim that long.
    const third = at();
    while (sent.length < 4) await deliver(100, 1000);
    expect(at() - third).toBe(REPORT_EVERY_MS);
    expect(sent[3]!.runningUntil! - now).toBeGreaterThanOrEqual(REPORT_EVERY_MS);
    expect(sent[3]!.runningUntil! - now).toBeLessThan(SLOW_REPORT_EVERY_MS);
    // Stopping is said at once, trickle or not.
    now += 1000;
    await reports.ifDue(q.queue_id, null, false);
    expect(sent.at(-1)).toMatchObject({ running: false, runningUntil: null });
  });
});
