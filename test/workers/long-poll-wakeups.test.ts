/**
 * A waiting pull answers as soon as any message of its queue becomes ready, whatever made it
 * ready: a send, its delay ending, a retry delay ending, a lease running
 * out, a redrive into the queue, a key released. The Coordinator's waits run on timers the
 * test drives, so a pull answers only because it was woken, never because its wait ended.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import type { WaitTimers } from "../../coordinator/pull-waiters";
import { coordinatorFor } from "../../src/kernel/addressing";
import { api, createQueue, eventually, pull, type Pulled, pullQueue, queuePath, send } from "./helpers";

class ManualTimers implements WaitTimers {
  private due: Array<{ fn: () => void }> = [];
  set(fn: () => void): unknown {
    const entry = { fn };
    this.due.push(entry);
    return entry;
  }
  clear(handle: unknown): void {
    this.due = this.due.filter((d) => d !== handle);
  }
  endAll(): void {
    const fire = this.due;
    this.due = [];
    for (const d of fire) d.fn();
  }
}

type PullAnswer = Awaited<ReturnType<typeof api<{ messages: Pulled[] }>>>;

/** A pull queue whose Coordinator waits on manual timers, which `endWaits` ends. */
async function timedPullQueue(name: string, consumer: Record<string, unknown> = {}) {
  const q = await pullQueue(name, consumer);
  const coordinator = coordinatorFor(env, q.queue_id);
  const timers = new ManualTimers();
  await runInDurableObject(coordinator, (obj: Coordinator) => {
    obj.pullWaiters.timers = timers;
  });
  const waiting = () => runInDurableObject(coordinator, (obj: Coordinator) => obj.pullWaiters.count);
  const endWaits = () => runInDurableObject(coordinator, () => timers.endAll());
  return { ...q, waiting, endWaits };
}

/** The pull's answer and when it came, or "still waiting" after `ms` (real time). */
async function within(
  pending: Promise<PullAnswer>,
  ms: number,
): Promise<{ answer: PullAnswer; at: number } | "still waiting"> {
  return Promise.race([
    pending.then((answer) => ({ answer, at: Date.now() })),
    new Promise<"still waiting">((r) => setTimeout(() => r("still waiting"), ms)),
  ]);
}

/** Starts a waiting pull and waits until it waits at the Coordinator (wrapped: an async function would await it). */
async function waitingPull(
  q: Awaited<ReturnType<typeof timedPullQueue>>,
  name: string,
): Promise<{ pending: Promise<PullAnswer> }> {
  const pending = pull<{ messages: Pulled[] }>(name, {
    wait_time_ms: 20_000,
    batch_size: 10,
    visibility_timeout_ms: 60_000,
  });
  await eventually(q.waiting, (n) => n === 1);
  return { pending };
}

/** Asserts the pull answered with exactly `bodies`, no sooner than `readyAt` and at most `slackMs` after it. */
async function expectWokenWith(
  q: Awaited<ReturnType<typeof timedPullQueue>>,
  pending: Promise<PullAnswer>,
  bodies: string[],
  readyAt: number,
  slackMs = 1500,
) {
  const got = await within(pending, Math.max(0, readyAt - Date.now()) + slackMs);
  if (got === "still waiting") await q.endWaits();
  expect(got === "still waiting" ? "still waiting" : got.answer.json.result.messages.map((m) => m.body)).toEqual(
    bodies,
  );
  if (got !== "still waiting") expect(got.at).toBeGreaterThanOrEqual(readyAt - 50);
}

/** One short pull's messages (a lease of `visibility_timeout_ms`). */
async function shortPull(name: string, visibilityMs = 60_000, batchSize = 10): Promise<Pulled[]> {
  const res = await pull<{ messages: Pulled[] }>(name, { batch_size: batchSize, visibility_timeout_ms: visibilityMs });
  expect(res.status).toBe(200);
  return res.json.result.messages;
}

describe("a waiting pull is woken by a message becoming ready", () => {
  it("when it is sent", async () => {
    const q = await timedPullQueue("wake-send");
    const { pending } = await waitingPull(q, "wake-send");
    const at = Date.now();
    expect((await send("wake-send", "now", { content_type: "text" })).status).toBe(200);
    await expectWokenWith(q, pending, ["now"], at);
  });

  it("when its delay_seconds end", async () => {
    const q = await timedPullQueue("wake-delay");
    const { pending } = await waitingPull(q, "wake-delay");
    const at = Date.now() + 1000;
    expect((await send("wake-delay", "later", { content_type: "text", delay_seconds: 1 })).status).toBe(200);
    await expectWokenWith(q, pending, ["later"], at);
  });

  it("when its retry delay ends", async () => {
    const q = await timedPullQueue("wake-retry");
    expect((await send("wake-retry", "again", { content_type: "text" })).status).toBe(200);
    const [m] = await shortPull("wake-retry");
    const { pending } = await waitingPull(q, "wake-retry");
    const at = Date.now() + 1000;
    const res = await api("POST", `${queuePath("wake-retry")}/messages/ack`, {
      retries: [{ lease_id: m!.lease_id, delay_seconds: 1 }],
    });
    expect(res.json.result).toMatchObject({ retryCount: 1, warnings: {} });
    await expectWokenWith(q, pending, ["again"], at);
  });

  it("when its lease runs out", async () => {
    const q = await timedPullQueue("wake-lease");
    expect((await send("wake-lease", "unacked", { content_type: "text" })).status).toBe(200);
    const at = Date.now() + 1000;
    expect(await shortPull("wake-lease", 1000)).toHaveLength(1);
    const { pending } = await waitingPull(q, "wake-lease");
    await expectWokenWith(q, pending, ["unacked"], at);
  });

  it("when it is redriven into the queue", async () => {
    await createQueue("wake-redrive-dlq");
    expect((await api("POST", `${queuePath("wake-redrive-dlq")}/consumers`, { type: "http_pull" })).status).toBe(201);
    const q = await timedPullQueue("wake-redrive", {
      settings: { max_retries: 0 },
      dead_letter_queue: "wake-redrive-dlq",
    });
    expect((await send("wake-redrive", "dead", { content_type: "text" })).status).toBe(200);
    const [m] = await shortPull("wake-redrive");
    expect(
      (await api("POST", `${queuePath("wake-redrive")}/messages/ack`, { retries: [{ lease_id: m!.lease_id }] })).json
        .result.retryCount,
    ).toBe(1);
    const { pending } = await waitingPull(q, "wake-redrive");
    const at = Date.now();
    expect(
      (await api("POST", `${queuePath("wake-redrive-dlq")}/redrive`, { target_queue: "wake-redrive" })).json.result
        .moved,
    ).toBe(1);
    await expectWokenWith(q, pending, ["dead"], at);
  });

  it("when the key holding it is released (its predecessor acked)", async () => {
    const q = await timedPullQueue("wake-key");
    for (const body of ["k1", "k2"])
      expect((await send("wake-key", body, { content_type: "text", ordering_key: "k" })).status).toBe(200);
    const got = await shortPull("wake-key", 60_000, 1);
    expect(got.map((m) => m.body)).toEqual(["k1"]);
    const first = got[0];
    const { pending } = await waitingPull(q, "wake-key");
    const at = Date.now();
    expect(
      (await api("POST", `${queuePath("wake-key")}/messages/ack`, { acks: [{ lease_id: first!.lease_id }] })).json
        .result.ackCount,
    ).toBe(1);
    await expectWokenWith(q, pending, ["k2"], at);
  });
});
