import { createExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { verdictOf } from "../../broker/http/ack-api";
import type { LeaseToken } from "../../broker/http/lease-tokens";
import { decide } from "../../src/delivery/disposition";
import { dispositionOf, FAILED_DISPATCH } from "../../src/delivery/outcome";
import { consumerEntrypoint, createBatch } from "../../src/consumer/entrypoint";
import type { DispatchOutcome } from "../../src/kernel/protocol";
import { sleep } from "../../src/kernel/sleep";
import { leased } from "./leased-message";

const settings = { max_retries: 3, retry_delay: 7 };
const batchOf = (...ids: string[]) => ids.map((id) => ({ id, timestamp: new Date(0), body: id, attempts: 1 }));

/** Runs a handler against a MessageBatch exactly as the ShardqConsumer entrypoint does. */
async function run(ids: string[], handler: (batch: MessageBatch) => void | Promise<void>): Promise<DispatchOutcome> {
  const { batch, outcome } = createBatch("q", batchOf(...ids));
  try {
    await handler(batch);
    return outcome("ok");
  } catch {
    return outcome("exception");
  }
}

const summary = (d: ReturnType<typeof dispositionOf>) => ({
  acks: d.acks.map((r) => r.id),
  retries: d.retries.map((r) => [r.ref.id, r.delayMs]),
  outOfRetries: d.outOfRetries.map((r) => r.id),
});

describe("consumer outcome semantics (Cloudflare's)", () => {
  const msgs = ["a", "b", "c"].map((id) => leased(id));

  it("acks every message when the handler returns normally", async () => {
    expect(summary(dispositionOf(msgs, await run(["a", "b", "c"], () => {}), settings))).toEqual({
      acks: ["a", "b", "c"],
      retries: [],
      outOfRetries: [],
    });
  });

  it("retries every message not explicitly acked when the handler throws, with the consumer's retry_delay", async () => {
    const outcome = await run(["a", "b", "c"], (batch) => {
      batch.messages[0]!.ack();
      throw new Error("boom");
    });
    expect(summary(dispositionOf(msgs, outcome, settings))).toEqual({
      acks: ["a"],
      retries: [
        ["b", 7000],
        ["c", 7000],
      ],
      outOfRetries: [],
    });
  });

  it("lets a per-message retry win over ackAll, and a per-message ack win over retryAll", async () => {
    const a = await run(["a", "b", "c"], (batch) => {
      batch.messages[1]!.retry({ delaySeconds: 3 });
      batch.ackAll();
    });
    expect(summary(dispositionOf(msgs, a, settings))).toEqual({
      acks: ["a", "c"],
      retries: [["b", 3000]],
      outOfRetries: [],
    });
    const b = await run(["a", "b", "c"], (batch) => {
      batch.messages[2]!.ack();
      batch.retryAll({ delaySeconds: 9 });
    });
    expect(summary(dispositionOf(msgs, b, settings))).toEqual({
      acks: ["c"],
      retries: [
        ["a", 9000],
        ["b", 9000],
      ],
      outOfRetries: [],
    });
  });

  it("keeps the first call on a message: ack then retry stays acked, retry then ack stays retried", async () => {
    const outcome = await run(["a", "b", "c"], (batch) => {
      batch.messages[0]!.ack();
      batch.messages[0]!.retry();
      batch.messages[1]!.retry({ delaySeconds: 1 });
      batch.messages[1]!.ack();
    });
    expect(summary(dispositionOf(msgs, outcome, settings))).toEqual({
      acks: ["a", "c"],
      retries: [["b", 1000]],
      outOfRetries: [],
    });
  });

  it("uses the message's delay, else the batch's, else retry_delay", async () => {
    const outcome = await run(["a", "b", "c"], (batch) => {
      batch.messages[0]!.retry({ delaySeconds: 2 });
      batch.messages[1]!.retry();
      batch.retryAll({ delaySeconds: 5 });
    });
    expect(summary(dispositionOf(msgs, outcome, settings))).toEqual({
      acks: [],
      retries: [
        ["a", 2000],
        ["b", 5000],
        ["c", 5000],
      ],
      outOfRetries: [],
    });
    const plain = await run(["a"], (batch) => batch.messages[0]!.retry());
    expect(summary(dispositionOf([leased("a")], plain, settings)).retries).toEqual([["a", 7000]]);
  });

  it("counts deliveries: after max_retries + 1 failed deliveries a message is out of retries", async () => {
    const outcome = await run(["a", "b"], () => {
      throw new Error("always");
    });
    const d = dispositionOf([leased("a", 3), leased("b", 4)], outcome, settings);
    expect(summary(d)).toEqual({ acks: [], retries: [["a", 7000]], outOfRetries: ["b"] });
    const none = dispositionOf([leased("a", 1)], outcome, { max_retries: 0, retry_delay: 0 });
    expect(summary(none).outOfRetries).toEqual(["a"]);
  });

  it("keeps ackAll() and explicit acks made before a throw (the documented behaviour, unlike miniflare's simulator)", async () => {
    const outcome = await run(["a", "b"], (batch) => {
      batch.ackAll();
      throw new Error("after ackAll");
    });
    expect(summary(dispositionOf([leased("a"), leased("b")], outcome, settings))).toEqual({
      acks: ["a", "b"],
      retries: [],
      outOfRetries: [],
    });
  });
});

describe("one settlement rule for push and pull consumers", () => {
  const token = (id: string, attempts: number): LeaseToken => ({
    accountId: "acc",
    queueId: "q",
    shard: "s",
    messageId: id,
    leaseId: "L",
    attempts,
  });
  const cases = [
    { max_retries: 0, retry_delay: 0 },
    { max_retries: 1, retry_delay: 7 },
    { max_retries: 3, retry_delay: 30 },
  ];

  it("decides a retry alike whether a handler threw or a pull consumer retried, for every attempts and settings", () => {
    for (const s of cases) {
      for (let attempts = 1; attempts <= 5; attempts++) {
        const push = dispositionOf([leased("m", attempts)], FAILED_DISPATCH, s);
        const pull = decide([verdictOf(token("m", attempts), true, undefined)], s);
        expect(pull).toEqual(push);
        // The rule itself: out of retries after max_retries + 1 deliveries, else retry_delay.
        expect(summary(push)).toEqual(
          attempts > s.max_retries
            ? { acks: [], retries: [], outOfRetries: ["m"] }
            : { acks: [], retries: [["m", s.retry_delay * 1000]], outOfRetries: [] },
        );
      }
    }
  });

  it("takes a retry's own delay alike, and acks alike whatever the attempts", async () => {
    const own = await run(["m"], (batch) => batch.messages[0]!.retry({ delaySeconds: 4 }));
    const ok = await run(["m"], () => {});
    for (const s of cases) {
      for (let attempts = 1; attempts <= 5; attempts++) {
        expect(decide([verdictOf(token("m", attempts), true, 4)], s)).toEqual(
          dispositionOf([leased("m", attempts)], own, s),
        );
        expect(decide([verdictOf(token("m", attempts), false, undefined)], s)).toEqual(
          dispositionOf([leased("m", attempts)], ok, s),
        );
      }
    }
  });

  it("names each message by its lease ref only, in the batch's order", () => {
    const msgs = [leased("a", 1), leased("b", 9), leased("c", 2)];
    const d = dispositionOf(msgs, FAILED_DISPATCH, settings);
    expect(d).toEqual({
      acks: [],
      retries: [
        { ref: { id: "a", leaseId: "L" }, delayMs: 7000 },
        { ref: { id: "c", leaseId: "L" }, delayMs: 7000 },
      ],
      outOfRetries: [{ id: "b", leaseId: "L" }],
    });
  });
});

describe('the ShardqConsumer entrypoint (transport "rpc")', () => {
  const deliver = (queue: QueueHandler) => {
    const Entrypoint = consumerEntrypoint(queue);
    return new Entrypoint(createExecutionContext(), {}).deliver("q", batchOf("a", "b", "c"));
  };
  type QueueHandler = Parameters<typeof consumerEntrypoint>[0];

  it("counts acks and retries made in ctx.waitUntil() after the handler returned, as Cloudflare does", async () => {
    // Found by the fault run's push consumer: these were dropped and the message acked.
    const r = await deliver({
      async queue(batch, _env, ctx) {
        batch.messages[1]!.ack();
        ctx.waitUntil(sleep(50).then(() => batch.messages[0]!.retry({ delaySeconds: 5 })));
        ctx.waitUntil(sleep(20).then(() => batch.messages[2]!.ack()));
      },
    });
    expect(r.outcome).toBe("ok");
    expect(r.explicitAcks.sort()).toEqual(["b", "c"]);
    expect(r.retryMessages).toEqual([{ msgId: "a", delaySeconds: 5 }]);
  });

  it("waits for them after a throw too: explicit acks survive it, the rest is retried", async () => {
    const r = await deliver({
      async queue(batch, _env, ctx) {
        ctx.waitUntil(sleep(20).then(() => batch.messages[0]!.ack()));
        throw new Error("handler failed");
      },
    });
    expect(r.outcome).toBe("exception");
    expect(r.explicitAcks).toEqual(["a"]);
  });
});
