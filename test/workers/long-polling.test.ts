/**
 * Long polling: POST .../messages/pull with `wait_time_ms` holds a pull that found
 * nothing until messages are ready or the wait ends (an empty answer), waiting at the queue's
 * Coordinator (coordinator/pull-waiters.ts). The Coordinator's waits run on timers the tests
 * drive, so a 20 s wait ends when a test says so.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import { PullWaiters, type WaitTimers } from "../../coordinator/pull-waiters";
import { coordinatorFor } from "../../src/kernel/addressing";
import { api, backlog, eventually, pull, pullQueue, queuePath, send } from "./helpers";

/** Timers that fire only when advanced. */
class ManualTimers implements WaitTimers {
  private t = 0;
  private due: Array<{ at: number; fn: () => void }> = [];
  set(fn: () => void, ms: number): unknown {
    const entry = { at: this.t + ms, fn };
    this.due.push(entry);
    return entry;
  }
  clear(handle: unknown): void {
    this.due = this.due.filter((d) => d !== handle);
  }
  advance(ms: number): void {
    this.t += ms;
    const fire = this.due.filter((d) => d.at <= this.t);
    this.due = this.due.filter((d) => d.at > this.t);
    for (const d of fire) d.fn();
  }
}

/** The bodies of a pull's answer (sent as JSON: base64 of the JSON text). */
const bodiesOf = (res: { json: { result: { messages: Array<{ body: string }> } } }) =>
  res.json.result.messages.map((m) => JSON.parse(atob(m.body)) as unknown);

/** A pull queue whose Coordinator waits on manual timers, which `advance` moves. */
async function timedPullQueue(name: string) {
  const q = await pullQueue(name, { settings: { visibility_timeout_ms: 30_000 } });
  const coordinator = coordinatorFor(env, q.queue_id);
  const timers = new ManualTimers();
  await runInDurableObject(coordinator, (obj: Coordinator) => {
    obj.pullWaiters.timers = timers;
  });
  const waiting = () => runInDurableObject(coordinator, (obj: Coordinator) => obj.pullWaiters.count);
  const advance = (ms: number) => runInDurableObject(coordinator, () => timers.advance(ms));
  return { ...q, coordinator, waiting, advance };
}

describe("long polling", () => {
  it("refuses a wait_time_ms out of 0 to 20,000 or not a whole number: 400 naming the field, nothing leased", async () => {
    await timedPullQueue("lp-bad");
    expect((await send("lp-bad", "kept")).status).toBe(200);
    for (const bad of [20_001, -1, 1.5, "5000", null]) {
      const res = await pull("lp-bad", { wait_time_ms: bad });
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(JSON.stringify(res.json.errors)).toContain("wait_time_ms");
    }
    const ok = await pull("lp-bad", { wait_time_ms: 0, batch_size: 10 });
    expect(bodiesOf(ok)).toEqual(["kept"]);
  });

  it("answers a waiting pull with a message sent while it waits", async () => {
    const q = await timedPullQueue("lp-arrives");
    const pending = pull("lp-arrives", { wait_time_ms: 20_000, batch_size: 10 });
    await eventually(q.waiting, (n) => n === 1);
    expect((await send("lp-arrives", "late")).status).toBe(200);
    const res = await pending;
    expect(res.status).toBe(200);
    expect(bodiesOf(res)).toEqual(["late"]);
    expect(await q.waiting()).toBe(0);
  });

  it("answers an empty batch, not an error, when the wait ends with nothing sent", async () => {
    const q = await timedPullQueue("lp-empty");
    const pending = pull("lp-empty", { wait_time_ms: 20_000 });
    await eventually(q.waiting, (n) => n === 1);
    await q.advance(20_000);
    const res = await pending;
    expect(res.status).toBe(200);
    expect(res.json.result.messages).toEqual([]);
    expect(await q.waiting()).toBe(0);
  });

  it("wakes one waiting pull per message, the one that waited longest, and the others wait on", async () => {
    const q = await timedPullQueue("lp-one");
    const first = pull("lp-one", { wait_time_ms: 20_000 });
    await eventually(q.waiting, (n) => n === 1);
    const others = [pull("lp-one", { wait_time_ms: 20_000 }), pull("lp-one", { wait_time_ms: 20_000 })];
    await eventually(q.waiting, (n) => n === 3);
    expect((await send("lp-one", "one")).status).toBe(200);
    expect(bodiesOf(await first)).toEqual(["one"]);
    expect(await q.waiting()).toBe(2);
    // A second message wakes the next one: the shard says so again while pulls wait.
    expect((await send("lp-one", "two")).status).toBe(200);
    await eventually(q.waiting, (n) => n === 1);
    await q.advance(20_000);
    const bodies = (await Promise.all(others)).map(bodiesOf);
    expect(bodies.flat()).toEqual(["two"]);
  });

  it("ends a pull whose client went away (pull/cancel by its wait_id): it leases nothing, and the message goes to the next pull", async () => {
    const q = await timedPullQueue("lp-cancel");
    const abandoned = pull("lp-cancel", { wait_time_ms: 20_000, batch_size: 10, wait_id: "client-gone-000001" });
    await eventually(q.waiting, (n) => n === 1);
    const cancelled = await api("POST", `${queuePath("lp-cancel")}/messages/pull/cancel`, {
      wait_id: "client-gone-000001",
    });
    expect(cancelled.json.result).toEqual({ cancelled: true });
    expect((await abandoned).json.result.messages).toEqual([]);
    expect(await q.waiting()).toBe(0);
    expect((await send("lp-cancel", "for the next")).status).toBe(200);
    expect(bodiesOf(await pull("lp-cancel", { batch_size: 10 }))).toEqual(["for the next"]);
    // Again: nothing waits under that id now.
    expect(
      (await api("POST", `${queuePath("lp-cancel")}/messages/pull/cancel`, { wait_id: "client-gone-000001" })).json
        .result,
    ).toEqual({ cancelled: false, reason: "not_waiting" });
    for (const bad of [undefined, "short", "has space in it!!", 12345678901234567]) {
      const res = await api(
        "POST",
        `${queuePath("lp-cancel")}/messages/pull/cancel`,
        bad === undefined ? {} : { wait_id: bad },
      );
      expect(res.status, String(bad)).toBe(400);
      expect(res.json.errors[0].field).toBe("wait_id");
    }
  });

  it("keeps waiting across a Coordinator restart and still gets the message", async () => {
    const q = await timedPullQueue("lp-restart");
    const pending = pull("lp-restart", { wait_time_ms: 5_000, batch_size: 10 });
    await eventually(q.waiting, (n) => n === 1);
    await runInDurableObject(q.coordinator, (_o: Coordinator, state) => state.abort("reset while a pull waits")).catch(
      () => {},
    );
    // The restarted Coordinator runs on the system's timers; the pull has asked it again.
    await eventually(
      () => runInDurableObject(coordinatorFor(env, q.queue_id), (obj: Coordinator) => obj.pullWaiters.count),
      (n) => n === 1,
    );
    expect((await send("lp-restart", "after")).status).toBe(200);
    const res = await pending;
    expect(bodiesOf(res)).toEqual(["after"]);
    expect(await backlog("lp-restart")).toBe(1);
  });
});

describe("pull waiters", () => {
  it("lets a pull that comes just after an unclaimed notification go at once, once", async () => {
    let now = 0;
    const waiters = new PullWaiters(() => now, new ManualTimers());
    expect(waiters.wakeOne()).toBe(false);
    expect(await waiters.wait(20_000)).toBe(true);
    // Taken: the next waits.
    const next = waiters.wait(20_000);
    expect(waiters.count).toBe(1);
    now += 5000;
    expect(waiters.wakeOne()).toBe(false);
    expect(await next).toBe(true);
    // Kept only for a moment.
    expect(waiters.wakeOne()).toBe(false);
    now += 1000;
    const late = waiters.wait(20_000);
    expect(waiters.count).toBe(1);
    waiters.wakeOne();
    expect(await late).toBe(true);
  });

  it("drops a cancelled waiter, so that the next message wakes the one after it", async () => {
    const waiters = new PullWaiters(() => 0, new ManualTimers());
    const gone = waiters.wait(20_000, "gone");
    const next = waiters.wait(20_000, "next");
    expect(waiters.cancel("gone")).toBe(true);
    expect(await gone).toBe(false);
    expect(waiters.wakeOne()).toBe(false);
    expect(await next).toBe(true);
  });

  it("hands the wake-up of a waiter whose client left after it was woken to the next waiter", async () => {
    const waiters = new PullWaiters(() => 0, new ManualTimers());
    const gone = waiters.wait(20_000, "gone");
    const next = waiters.wait(20_000, "next");
    expect(waiters.wakeOne()).toBe(true);
    expect(await gone).toBe(true);
    expect(waiters.count).toBe(1);
    expect(waiters.cancel("gone")).toBe(true);
    expect(await next).toBe(true);
    // With nobody left waiting, the wake-up is kept for the next pull.
    const third = waiters.wait(20_000, "third");
    expect(waiters.cancel("gone")).toBe(false);
    const woken = waiters.wait(20_000);
    expect(waiters.cancel("third")).toBe(true);
    expect(await third).toBe(false);
    waiters.wakeOne();
    expect(await woken).toBe(true);
  });

  it("counts a token's waiting pulls down again however their waits end: woken, timed out, cancelled, or ended by a pause", async () => {
    const timers = new ManualTimers();
    const waiters = new PullWaiters(() => 0, timers);
    waiters.limits = { perQueue: 10, perToken: 2 };
    const a = waiters.wait(1000, "a-wait", "t1");
    const b = waiters.wait(2000, "b-wait", "t1");
    expect(waiters.overCap("t1")).toEqual({ capped: "token", limit: 2 });
    expect(waiters.overCap("t2")).toBeNull();
    waiters.wakeOne();
    expect(await a).toBe(true);
    expect(waiters.overCap("t1")).toBeNull();
    const c = waiters.wait(1000, "c-wait", "t1");
    timers.advance(2000);
    expect([await b, await c]).toEqual([false, false]);
    const d = waiters.wait(20_000, "d-wait", "t1");
    const e = waiters.wait(20_000, "e-wait", "t1");
    expect(waiters.cancel("d-wait")).toBe(true);
    expect(await d).toBe(false);
    expect(waiters.overCap("t1")).toBeNull();
    expect(waiters.endAll()).toBe(1);
    expect(await e).toBe(false);
    expect(waiters.count).toBe(0);
    expect(waiters.overCap("t1")).toBeNull();
  });

  it("does not let a pull cancelled between two waits wait again", async () => {
    const waiters = new PullWaiters(() => 0, new ManualTimers());
    expect(waiters.cancel("between")).toBe(false);
    expect(await waiters.wait(20_000, "between")).toBe(false);
    expect(waiters.count).toBe(0);
  });
});

describe("long polling under pause, cancel and load", () => {
  it("ends pulls already waiting with the 409 a short pull gets when delivery is paused, and leases nothing while paused", async () => {
    const q = await timedPullQueue("lp-paused");
    const waiting = Array.from({ length: 5 }, () => pull("lp-paused", { wait_time_ms: 20_000, batch_size: 100 }));
    await eventually(q.waiting, (n) => n === 5);
    expect((await api("PATCH", queuePath("lp-paused"), { settings: { delivery_paused: true } })).status).toBe(200);
    for (let i = 0; i < 5; i++)
      expect(
        (
          await api("POST", `${queuePath("lp-paused")}/messages/batch`, {
            messages: Array.from({ length: 100 }, (_, j) => ({ body: `m${i}-${j}` })),
          })
        ).status,
      ).toBe(200);
    // Whatever they answer, they answer now: a waiting pull does not outlast the pause (the timers are the test's).
    const answers = await Promise.race([
      Promise.all(waiting),
      new Promise<"still waiting">((r) => setTimeout(() => r("still waiting"), 3000)),
    ]);
    const leasedWhilePaused =
      answers === "still waiting"
        ? "still waiting"
        : answers.reduce((n, a) => n + (a.json.result?.messages?.length ?? 0), 0);
    expect(leasedWhilePaused).toBe(0);
    if (answers === "still waiting") return;
    for (const a of answers) {
      expect(a.status).toBe(409);
      expect(a.json.errors[0].field).toBe("queue");
      expect(a.json.errors[0].message).toContain("paused");
    }
    // A pull that comes while paused does not wait either.
    const late = await pull("lp-paused", { wait_time_ms: 20_000 });
    expect(late.status).toBe(409);
    expect(await q.waiting()).toBe(0);
    // Nothing was leased: after the resume one pull gets the oldest 100, and the backlog is whole.
    expect((await api("PATCH", queuePath("lp-paused"), { settings: { delivery_paused: false } })).status).toBe(200);
    const after = await pull("lp-paused", { batch_size: 100 });
    expect(after.json.result.messages).toHaveLength(100);
    expect(after.json.result.messages.every((m: { attempts: number }) => m.attempts === 1)).toBe(true);
    expect(await backlog("lp-paused")).toBe(500);
  });

  it("answers cancelled: false, and wakes nobody, for a pull that had already answered with messages", async () => {
    const q = await timedPullQueue("lp-cancel-late");
    const answered = pull("lp-cancel-late", { wait_time_ms: 20_000, batch_size: 10, wait_id: "answered-pull-000001" });
    await eventually(q.waiting, (n) => n === 1);
    const other = pull("lp-cancel-late", { wait_time_ms: 20_000, batch_size: 10, wait_id: "other-pull-00000001" });
    await eventually(q.waiting, (n) => n === 2);
    expect((await send("lp-cancel-late", "first")).status).toBe(200);
    expect(bodiesOf(await answered)).toEqual(["first"]);
    const res = await api("POST", `${queuePath("lp-cancel-late")}/messages/pull/cancel`, {
      wait_id: "answered-pull-000001",
    });
    expect(res.status).toBe(200);
    expect(res.json.result).toEqual({ cancelled: false, reason: "answered" });
    // The other pull still waits: it was not woken for nothing.
    expect(await q.waiting()).toBe(1);
    expect((await send("lp-cancel-late", "second")).status).toBe(200);
    expect(bodiesOf(await other)).toEqual(["second"]);
  });

  it("caps the pulls waiting at once, per token and per queue: 429 with Retry-After naming what was capped, nothing leased", async () => {
    const q = await timedPullQueue("lp-capped");
    await runInDurableObject(q.coordinator, (obj: Coordinator) => {
      (obj.pullWaiters as unknown as { limits: { perQueue: number; perToken: number } }).limits = {
        perQueue: 5,
        perToken: 3,
      };
    });
    const mine = Array.from({ length: 3 }, () => pull("lp-capped", { wait_time_ms: 20_000 }));
    await eventually(q.waiting, (n) => n === 3);
    const refused = await Promise.race([
      pull("lp-capped", { wait_time_ms: 20_000 }),
      new Promise<"waiting">((r) => setTimeout(() => r("waiting"), 2000)),
    ]);
    expect(refused === "waiting" ? "waiting" : refused.status).toBe(429);
    if (refused === "waiting") return;
    expect(refused.json.errors[0].field).toBe("authorization");
    expect(refused.json.errors[0].message).toContain("3");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    // Another token of the account may still wait, up to the queue's cap.
    const theirs = Array.from({ length: 2 }, () =>
      api("POST", `${queuePath("lp-capped")}/messages/pull`, { wait_time_ms: 20_000 }, { token: "consume-only-token" }),
    );
    await eventually(q.waiting, (n) => n === 5);
    const full = await api(
      "POST",
      `${queuePath("lp-capped")}/messages/pull`,
      { wait_time_ms: 20_000 },
      { token: "send-consume-token" },
    );
    expect(full.status).toBe(429);
    expect(full.json.errors[0].field).toBe("queue");
    expect(Number(full.headers.get("retry-after"))).toBeGreaterThan(0);
    // A pull that does not wait is never capped; the refused pulls leased nothing.
    expect((await pull("lp-capped", { batch_size: 10 })).status).toBe(200);
    expect((await send("lp-capped", "one")).status).toBe(200);
    await q.advance(20_000);
    const all = await Promise.all([...mine, ...theirs]);
    expect(all.flatMap(bodiesOf)).toEqual(["one"]);
    expect(await backlog("lp-capped")).toBe(1);
  });
});
