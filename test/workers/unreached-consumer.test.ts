/**
 * A consumer Worker that cannot be reached (its process restarting, a deploy under way): the
 * dispatch throws instead of answering. Each try counts as an attempt, as a thrown handler's does,
 * but the retry waits a backoff that doubles with the attempts, so the seconds a Worker takes to
 * come back cost a message a few tries instead of every one a tight loop would spend at a
 * retry_delay of 0 (src/delivery/outcome.ts unreachedDispatch).
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import type { Dispatch } from "../../consumer-shard/transports";
import { createBatch } from "../../src/consumer/entrypoint";
import { dispositionOf, unreachedDispatch } from "../../src/delivery/outcome";
import { consumerShardFor } from "../../src/kernel/addressing";
import { addConsumer, backlog, createQueue, eventually, producer } from "./helpers";
import { leased } from "./leased-message";

describe("a dispatch that never came back", () => {
  it("retries each message after 1, 2, 4 ... 60 s by its attempts, or the retry_delay when longer, and still runs out of retries", () => {
    const settings = { max_retries: 9, retry_delay: 0 };
    const messages = Array.from({ length: 10 }, (_, i) => leased(`m${i + 1}`, i + 1));
    const d = dispositionOf(messages, unreachedDispatch(messages, settings), settings);
    expect(d.retries.map((r) => r.delayMs / 1000)).toEqual([1, 2, 4, 8, 16, 32, 60, 60, 60]);
    expect(d.outOfRetries).toEqual([{ id: "m10", leaseId: "L" }]);
    const slow = { max_retries: 9, retry_delay: 10 };
    const s = dispositionOf(messages, unreachedDispatch(messages, slow), slow);
    expect(s.retries.map((r) => r.delayMs / 1000)).toEqual([10, 10, 10, 10, 16, 32, 60, 60, 60]);
  });

  it("waits the backoff between tries, counting each, and delivers once the consumer is back", async () => {
    const q = await createQueue("unreached");
    await addConsumer("unreached", {
      settings: { batch_size: 10, max_wait_time_ms: 0, retry_delay: 0, max_retries: 5 },
    });
    const calls: Array<{ at: number; attempts: number }> = [];
    const dispatch: Dispatch = async (queueName, messages, metadata) => {
      calls.push({ at: Date.now(), attempts: messages[0]!.attempts });
      if (calls.length <= 3) throw new Error('Worker "gone" not found. Make sure it is running locally.');
      return createBatch(queueName, messages, metadata).outcome("ok");
    };
    await runInDurableObject(consumerShardFor(env, q.queue_id, 0), (obj: ConsumerShard) => {
      obj.dispatchOverride = dispatch;
    });
    await producer("unreached").send({ n: 1 });
    await eventually(
      async () => calls.length,
      (n) => n >= 4,
      20_000,
    );
    expect(calls.map((c) => c.attempts)).toEqual([1, 2, 3, 4]);
    const gaps = calls.slice(1).map((c, i) => c.at - calls[i]!.at);
    // At least the backoff (a round may come a little after the message is due, never before).
    expect(gaps[0]).toBeGreaterThanOrEqual(950);
    expect(gaps[1]).toBeGreaterThanOrEqual(1950);
    expect(gaps[2]).toBeGreaterThanOrEqual(3950);
    await eventually(
      () => backlog("unreached"),
      (n) => n === 0,
    );
    expect(calls).toHaveLength(4);
  }, 30_000);
});
