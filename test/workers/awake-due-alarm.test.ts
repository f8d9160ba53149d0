import { env, runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor } from "../../src/kernel/addressing";
import { SLOW_REPORT_MS } from "../../src/kernel/heartbeat";
import { ack, api, producer, pull, queuePath } from "./helpers";
import { onlyShard } from "./shard-clock-helpers";

/** Fake time far ahead of real time (shard-clock-helpers.ts onlyShard). */
const FUTURE = Date.now() + 400_000_000_000;

/**
 * An awake storage shard's alarm covers the delayed and retried messages written since it woke.
 * Its quiet work (a timer in memory) would have put the alarm there; these shards are on a
 * manual clock, so that work never runs, as in a process killed before it did.
 */
describe("an awake storage shard's alarm", () => {
  /** A pull queue whose only shard has reported once and is on the slow cadence: its next report minutes away. */
  async function awakeOnSlowCadence(name: string) {
    const only = await onlyShard(name, FUTURE);
    const res = await api("POST", `${queuePath(name)}/consumers`, { type: "http_pull" });
    expect(res.status).toBe(201);
    await producer(name).send("now");
    only.clock.advance(5000);
    expect(await runDurableObjectAlarm(only.shard)).toBe(true);
    expect(await only.alarm()).toBe(only.clock.now() + SLOW_REPORT_MS);
    return only;
  }

  it("is no later than a delayed message written: at its due time a waiting pull is woken", async () => {
    const { q, shard, clock, alarm } = await awakeOnSlowCadence("awake-due-send");
    const [pulled] = (await pull("awake-due-send", { batch_size: 10 })).json.result.messages;
    expect(atob(pulled.body)).toBe('"now"');
    expect((await ack("awake-due-send", { acks: [{ lease_id: pulled.lease_id }] })).status).toBe(200);
    await producer("awake-due-send").send("later", { delaySeconds: 20 });
    expect(await alarm()).toBe(clock.now() + 20_000);
    const waiting = coordinatorFor(env, q.queue_id).waitForMessages(20_000);
    clock.advance(20_000);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(await waiting).toBe("woken");
    const [later] = (await pull("awake-due-send", { batch_size: 10 })).json.result.messages;
    expect(atob(later.body)).toBe('"later"');
  });

  it("is no later than a retry's delay", async () => {
    const { clock, alarm } = await awakeOnSlowCadence("awake-due-retry");
    const [pulled] = (await pull("awake-due-retry", { batch_size: 10, visibility_timeout_ms: 600_000 })).json.result
      .messages;
    const res = await ack("awake-due-retry", { retries: [{ lease_id: pulled.lease_id, delay_seconds: 30 }] });
    expect(res.json.result).toMatchObject({ ackCount: 0, retryCount: 1 });
    expect(await alarm()).toBe(clock.now() + 30_000);
  });

  it("moves on to the next scheduled segment once one came due, and only ever sooner", async () => {
    const { shard, clock, alarm } = await awakeOnSlowCadence("awake-due-next");
    await producer("awake-due-next").sendBatch([
      { body: "in 40 s", delaySeconds: 40 },
      { body: "in 10 s", delaySeconds: 10 },
    ]);
    const first = clock.now() + 10_000;
    expect(await alarm()).toBe(first);
    // A later delay does not move it.
    await producer("awake-due-next").send("in 90 s", { delaySeconds: 90 });
    expect(await alarm()).toBe(first);
    clock.set(first);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    // The next scheduled segment's; the 40 s message shares the segment that came due, and
    // its time comes with the lease that takes the first (shard-alarm.ts, not covered).
    expect(await alarm()).toBe(first + 80_000);
  });
});
