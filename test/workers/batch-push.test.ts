/**
 * A storage shard's pushed batches (storage-shard/batch-push.ts) with its shard's parts stood in
 * for: what it does with the consumer shard's reply.
 */
import { describe, expect, it } from "vitest";
import { BatchPush, type BatchPushDeps, type PushTarget } from "../../storage-shard/batch-push";
import type { LeasedMessage } from "../../src/kernel/protocol";
import type { PushReply } from "../../src/kernel/push-reply";

function harness(reply: PushReply, stillReady: boolean) {
  const fired: Array<() => void> = [];
  const seen = { leases: [] as PushTarget[], settles: [] as PushTarget[], wakes: 0 };
  const waits: Array<Promise<unknown>> = [];
  const message = {
    id: "m",
    body: new Uint8Array(1),
    contentType: "json",
    enqueuedAt: 0,
    attempts: 1,
    leaseId: "l",
    copyKey: "c",
  } as LeasedMessage;
  const deps: BatchPushDeps = {
    timers: () => ({ set: (fn) => (fired.push(fn), fired.length), clear: () => {} }),
    now: () => 1000,
    lease: (t) => (seen.leases.push(t), { messages: [message], waitUntil: null, figures: [] }),
    deliver: async () => reply,
    settle: (t) => (seen.settles.push(t), stillReady),
    release: () => {},
    unleased: () => 1,
    wakeConsumers: () => void seen.wakes++,
    waitUntil: (p) => void waits.push(p),
  };
  return { push: new BatchPush(deps), fired, seen, waits };
}

describe("a storage shard's pushed batches", () => {
  const target: PushTarget = { shard: 0, limit: 5, maxWaitMs: 300, leaseMs: 30_000 };
  const settle = { acks: [], retries: [], deadLettered: [], dropped: [] };

  it("push the next batch by the consumer's settings its reply carries", async () => {
    const h = harness({ taken: true, settle, batch: { limit: 2, maxWaitMs: 100 } }, true);
    expect(h.push.arm(target, 1000)).toBe(true);
    h.fired.shift()!();
    await Promise.all(h.waits);
    // Settled, and the next push armed, by the new settings.
    expect(h.seen.settles[0]).toMatchObject({ limit: 2, maxWaitMs: 100 });
    h.fired.shift()!();
    await Promise.all(h.waits);
    expect(h.seen.leases[1]).toMatchObject({ limit: 2, maxWaitMs: 100 });
    expect(h.seen.wakes).toBe(0);
  });

  it("wake the consumer shard for what is still ready when its settings now wait longer than a push's timer carries", async () => {
    const h = harness({ taken: true, settle, batch: { limit: 5, maxWaitMs: 10_000 } }, true);
    expect(h.push.arm(target, 1000)).toBe(true);
    h.fired.shift()!();
    await Promise.all(h.waits);
    expect(h.fired).toHaveLength(0);
    expect(h.seen.wakes).toBe(1);
  });
});
