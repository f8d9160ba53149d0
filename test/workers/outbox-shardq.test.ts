/**
 * The outbox and the inbox end to end through shardq: the probe's producer object sends through
 * shardq's own producer binding (QueueProducer, props { account: "local", queue: "outbox-e2e" },
 * bound by vitest.config.ts), shardq's consumer shards push the queue's batches to a handler
 * that hands them to the probe's consumer object (inbox.each()) and settles them by its outcomes,
 * as a Worker's queue() handler calling a consumer object does.
 */
import { describe, expect, it } from "vitest";
import { forInbox, settle, unwrap } from "../../src/inbox/inbox";
import { addConsumer, createQueue, eventually, fakeConsumer } from "./helpers";
import { consumerObject, producerObject } from "./outbox-helpers";

describe("through shardq's producer binding", () => {
  it("delivers each committed change once, in envelope mode, and a redelivery changes nothing", async () => {
    const q = await createQueue("outbox-e2e");
    const consumer = consumerObject("e2e");
    const delivered: Array<{ id: string; body: unknown }> = [];
    await fakeConsumer(q.queue_id, async (batch) => {
      delivered.push(...forInbox(batch.messages));
      // A stub of its own: the handler runs in the consumer shard's request, not the test's.
      const { outcomes } = await consumerObject("e2e").apply(forInbox(batch.messages));
      settle(batch.messages, outcomes);
    });
    await addConsumer("outbox-e2e", { settings: { batch_size: 10, max_wait_time_ms: 0 } });

    const producer = await producerObject("e2e", { queue: "shardq" });
    const ids = [(await producer.add(1)).id, ...(await producer.addMany([2, 3, 4])), (await producer.add(5)).id];
    expect(await producer.addThenThrow(100)).toEqual({ error: "changed my mind" });
    await eventually(
      () => consumer.balance(),
      (b) => b.total === 15,
    );
    expect(await producer.rows()).toBe(0);
    expect(await producer.alarmAt()).toBeNull();
    const applied = (await consumer.balance()).applied;
    expect(applied.toSorted()).toEqual(ids.toSorted());
    // What the queue held: each message in its envelope, under shardq's own id.
    const inside = delivered.map((m) => unwrap(m));
    expect(inside.map((m) => m.id).toSorted()).toEqual(ids.toSorted());
    for (const m of delivered) expect(m.id).not.toBe(unwrap(m).id);

    // The whole stream again, as a redelivery would bring it: acked, nothing applied.
    const again = await consumer.apply(delivered);
    expect(again.outcomes.every((o) => o.outcome === "duplicate")).toBe(true);
    expect(again.total).toBe(15);
  }, 30_000);
});
