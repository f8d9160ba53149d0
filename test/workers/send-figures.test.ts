/**
 * The queue's figures a send answers with (QueueSendResponse.metadata.metrics): the
 * shard written to exact, every other shard as of its latest report, handed on by the shard
 * written to (its Coordinator's heartbeat reply) instead of a Coordinator read per second.
 */
import { env, runDurableObjectAlarm } from "cloudflare:test";
import { describe, expect, it, onTestFinished } from "vitest";
import { Coordinator } from "../../coordinator/coordinator";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { crc32 } from "../../src/kernel/checksum";
import { findQueue } from "../../src/routing/queue-lookup";
import { ACCOUNT, createQueue, producer } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

/**
 * Counts the reads of the queue's figures asked of the Coordinator (RPC reaches class methods only:
 * listen on the prototype). Its own reads, for a heartbeat's reply or a delivery plan, are not asked.
 */
function countFigureReads(): () => number {
  let reads = 0;
  let own = 0;
  const proto = Coordinator.prototype;
  const { backlogByShard, heartbeat, deliveryPlan } = proto;
  proto.backlogByShard = function (this: Coordinator) {
    if (own === 0) reads++;
    return backlogByShard.call(this);
  };
  const itself = <A extends unknown[], R>(method: (this: Coordinator, ...args: A) => R) =>
    function (this: Coordinator, ...args: A): R {
      own++;
      try {
        return method.apply(this, args);
      } finally {
        own--;
      }
    };
  proto.heartbeat = itself(heartbeat);
  proto.deliveryPlan = itself(deliveryPlan);
  onTestFinished(() => {
    Object.assign(proto, { backlogByShard, heartbeat, deliveryPlan });
  });
  return () => reads;
}

describe("the figures a send answers with", () => {
  it("on a queue whose map has one shard that may hold messages, come from that shard alone: no Coordinator request", async () => {
    const q = await createQueue("figures-one-shard");
    const coordinator = coordinatorFor(env, q.queue_id);
    const map = (await coordinator.shardMap())!;
    for (const s of map.shards.slice(1)) await coordinator.setShardState(s.name, "retired");
    // The map this isolate cached when the queue was created, and KV's until its publication lands, still name four
    // shards: read the current one into the cache (a stale map would make the send read the Coordinator).
    await findQueue(env, ACCOUNT, "figures-one-shard", { current: true });
    const reads = countFigureReads();
    const sent = [];
    for (let i = 0; i < 3; i++) {
      sent.push(await producer("figures-one-shard").send("abc", { contentType: "text" }));
      await sleep(600); // past a second between sends: the isolate's figures were read again then
    }
    expect(sent.map((s) => s.metadata.metrics.backlogCount)).toEqual([1, 2, 3]);
    expect(sent[2]!.metadata.metrics.backlogBytes).toBe(9);
    expect(reads()).toBe(0);
  });

  it("on a two-shard queue, count the other shard as its latest report gave it, handed on by the shard written to", async () => {
    const q = await createQueue("figures-two-shards");
    const coordinator = coordinatorFor(env, q.queue_id);
    const map = (await coordinator.shardMap())!;
    for (const s of map.shards.slice(2)) await coordinator.setShardState(s.name, "retired");
    await findQueue(env, ACCOUNT, "figures-two-shards", { current: true });
    const [a, b] = map.shards.map((s) => s.name) as [string, string];
    // Four messages on b, which then drains: sends go to a, and b's messages still count.
    const body = new TextEncoder().encode('"y"');
    await storageShardFor(env, b).append({
      queueId: q.queue_id,
      messages: Array.from({ length: 4 }, () => ({
        body,
        contentType: "json" as const,
        delayMs: 0,
        checksum: crc32(body),
      })),
    });
    await coordinator.setShardState(b, "draining");
    await findQueue(env, ACCOUNT, "figures-two-shards", { current: true });
    // The first send: this isolate has no word of b yet, and reads the Coordinator (which has no report of it yet).
    await producer("figures-two-shards").send("x", { contentType: "text" });
    // b reports, then a reports and hears of b in the Coordinator's reply.
    expect(await runDurableObjectAlarm(storageShardFor(env, b))).toBe(true);
    expect(await runDurableObjectAlarm(storageShardFor(env, a))).toBe(true);
    await sleep(1100); // past the second an isolate kept the Coordinator's figures before
    const reads = countFigureReads();
    // a exact, b as its latest report gave it, handed on by a.
    const later = await producer("figures-two-shards").send("z", { contentType: "text" });
    expect(later.metadata.metrics.backlogCount).toBe(6);
    expect(reads()).toBe(0);
  });
});
