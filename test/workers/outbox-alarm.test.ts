/**
 * shardq/outbox and the object's one alarm (test/fixtures/outbox-probe's OutboxProducer, whose
 * alarm() calls outbox.alarm() first and logs what it says): failed sends retried from the alarm
 * with a growing backoff, nothing lost; a delivery cut off by a reset taken up by the backstop;
 * the object's own alarm kept at its time, and reported due when it comes.
 */
import { describe, expect, it } from "vitest";
import { unwrap } from "../../src/inbox/inbox";
import { eventually } from "./helpers";
import { producerObject, producerHandle } from "./outbox-helpers";
import { sleep } from "../../src/kernel/sleep";

const emptied = (p: { rows(): Promise<number> }, timeoutMs = 15_000) =>
  eventually(
    () => p.rows(),
    (n) => n === 0,
    timeoutMs,
  );

describe("failed sends", () => {
  it("are retried from the alarm with a doubling backoff, the same messages with the same ids, then deleted", async () => {
    const p = await producerObject("retry", { queue: "fake", options: { retry: { baseMs: 200, maxMs: 2_000 } } });
    await p.setFailures(3);
    const first = await p.add(1);
    const second = await p.add(2);
    await emptied(p);
    const calls = await p.calls();
    expect(calls.map((c) => c.ok)).toEqual([false, false, false, true]);
    // The second message was recorded while the first call failed: it joined the retries, not a call of its own.
    const ids = (c: (typeof calls)[number]) => c.messages.map((m) => unwrap({ id: "-", body: m.body }).id);
    expect(ids(calls[3]!)).toEqual([first.id, second.id]);
    for (const c of calls.slice(1)) expect(ids(c)).toEqual([first.id, second.id]);
    const gaps = calls.slice(1).map((c, i) => c.at - calls[i]!.at);
    // 200, 400, 800 ms, each less up to a fifth: every gap longer than the one before.
    expect(gaps[0]).toBeGreaterThanOrEqual(150);
    expect(gaps[1]).toBeGreaterThan(gaps[0]!);
    expect(gaps[2]).toBeGreaterThan(gaps[1]!);
    const alarms = await p.alarms();
    expect(alarms.length).toBeGreaterThanOrEqual(3);
    expect(alarms.every((a) => a.own_due === 0)).toBe(true);
    expect(await p.status()).toMatchObject({ pending: 0, attempts: 0, lastError: null, nextAttemptAt: null });
    expect(await p.alarmAt()).toBeNull();
  });

  it("say so in status() while they last, and a new send waits for the retry rather than calling again", async () => {
    const p = await producerObject("retry-status", { queue: "fake", options: { retry: { baseMs: 5_000 } } });
    await p.setFailures(1);
    await p.add(1);
    const failing = await eventually(
      () => p.status(),
      (s) => s.attempts === 1,
    );
    expect(failing).toMatchObject({ pending: 1, lastError: "Error: queue unavailable" });
    expect(failing.nextAttemptAt).toBeGreaterThan(Date.now() + 3_000);
    expect(await p.alarmAt()).toBe(failing.nextAttemptAt);
    await p.add(2);
    await sleep(100);
    expect((await p.calls()).length).toBe(1);
    // flush() does not wait for the backoff.
    expect(await p.flush()).toMatchObject({ pending: 0, attempts: 0 });
    expect(await p.alarmAt()).toBeNull();
  });

  it("a delivery cut off by a reset of the object is sent by the backstop alarm", async () => {
    const p = await producerObject("reset", { queue: "fake", options: { backstopMs: 300 } });
    await p.setHold(true);
    const { id } = await p.add(1);
    await eventually(
      () => p.calls(),
      (c) => c.length === 1,
    );
    await Promise.resolve(p.abort()).catch(() => {});
    const again = producerHandle("reset");
    await again.setHold(false);
    // Nothing in memory survived: only the alarm set in the recording transaction brings it out.
    await emptied(again);
    const last = (await again.calls()).at(-1)!;
    expect(last.ok).toBe(true);
    expect(unwrap({ id: "-", body: last.messages[0]!.body }).id).toBe(id);
    expect((await again.alarms()).length).toBeGreaterThanOrEqual(1);
    expect(await again.alarmAt()).toBeNull();
  });
});

describe("the object's own alarm", () => {
  it("keeps its time: the outbox moves the alarm earlier while it needs it, then puts the object's back", async () => {
    const p = await producerObject("own-kept", { queue: "fake", options: { retry: { baseMs: 200 } } });
    const own = Date.now() + 60_000;
    await p.setOwnAlarm(own);
    expect(await p.alarmAt()).toBe(own);
    await p.setFailures(1);
    await p.add(1);
    const during = await eventually(
      () => p.status(),
      (s) => s.attempts === 1,
    );
    expect(await p.alarmAt()).toBe(during.nextAttemptAt);
    expect(during.nextAttemptAt!).toBeLessThan(own);
    await emptied(p);
    await eventually(
      () => p.alarmAt(),
      (t) => t === own,
    );
    expect(await p.ownAlarm()).toBe(own);
    expect((await p.alarms()).every((a) => a.own_due === 0)).toBe(true);
  });

  it("is reported due when it comes, and no alarm is left after it", async () => {
    const p = await producerObject("own-due", { queue: "fake" });
    await p.setOwnAlarm(Date.now() + 200);
    const [ran] = await eventually(
      () => p.alarms(),
      (a) => a.length === 1,
    );
    expect(ran).toMatchObject({ own_due: 1, next: null });
    expect(await p.ownAlarm()).toBeNull();
    expect(await p.alarmAt()).toBeNull();
    expect(await p.calls()).toEqual([]);
  });

  it("is never moved later by a send: an earlier own alarm stays and serves as the outbox's too", async () => {
    const p = await producerObject("own-earlier", { queue: "fake", options: { backstopMs: 60_000 } });
    const own = Date.now() + 30_000;
    await p.setOwnAlarm(own);
    await p.add(1);
    expect(await p.alarmAt()).toBe(own);
    await emptied(p);
    expect(await p.alarmAt()).toBe(own);
  });

  it("set directly on ctx.storage while a retry waits, is taken in at the next delivery and kept after it", async () => {
    // A retry far enough off that the direct set comes before it.
    const p = await producerObject("own-direct", { queue: "fake", options: { retry: { baseMs: 3_000 } } });
    await p.setFailures(1);
    await p.add(1);
    await eventually(
      () => p.status(),
      (s) => s.attempts === 1,
    );
    const own = Date.now() + 60_000;
    await p.setAlarmDirectly(own);
    await p.add(2);
    await emptied(p);
    await eventually(
      () => p.alarmAt(),
      (t) => t === own,
    );
    expect(await p.ownAlarm()).toBe(own);
  });
});
