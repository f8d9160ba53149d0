/**
 * The outbox and the inbox end to end through shardq: the probe's producer object sends through
 * shardq's own producer binding (QueueProducer, props { account: "local", queue: "outbox-e2e" },
 * bound by vitest.config.ts), shardq's consumer shards push the queue's batches to a handler
 * that hands them to the probe's consumer object (inbox.each()) and settles them by its outcomes,
 * as a Worker's queue() handler calling a consumer object does. Both id modes: envelopes, which
 * any binding carries, and ids: "id", where the outbox's id is the queue's message id.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { forInbox, settle, unwrap } from "../../src/inbox/inbox";
import { addConsumer, createQueue, eventually, fakeConsumer } from "./helpers";
import { consumerObject, producerObject } from "./outbox-helpers";

/** What the queue delivered, by the consumer object the batch's first body names. */
const delivered = new Map<string, Array<{ id: string; body: unknown }>>();

beforeAll(async () => {
  const q = await createQueue("outbox-e2e");
  await fakeConsumer(q.queue_id, async (batch) => {
    const name = (unwrap(batch.messages[0]!).body as { to: string }).to;
    delivered.set(name, [...(delivered.get(name) ?? []), ...forInbox(batch.messages)]);
    // A handle of its own: the handler runs in the consumer shard's request, not the test's.
    const { outcomes } = await consumerObject(name).apply(forInbox(batch.messages));
    settle(batch.messages, outcomes);
  });
  await addConsumer("outbox-e2e", { settings: { batch_size: 10, max_wait_time_ms: 0 } });
});

describe("through shardq's producer binding", () => {
  it("delivers each committed change once, in envelope mode, and a redelivery changes nothing", async () => {
    const consumer = consumerObject("e2e");
    const producer = await producerObject("e2e", { queue: "shardq", to: "e2e" });
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
    const got = delivered.get("e2e")!;
    const inside = got.map((m) => unwrap(m));
    expect(inside.map((m) => m.id).toSorted()).toEqual(ids.toSorted());
    for (const m of got) expect(m.id).not.toBe(unwrap(m).id);

    // The whole stream again, as a redelivery would bring it: acked, nothing applied.
    const again = await consumer.apply(got);
    expect(again.outcomes.every((o) => o.outcome === "duplicate")).toBe(true);
    expect(again.total).toBe(15);
  }, 30_000);

  it("sends under the outbox's own ids with ids: \"id\", bodies bare, a key's messages in order", async () => {
    const consumer = consumerObject("e2e-id");
    const producer = await producerObject("e2e-id", { queue: "shardq", to: "e2e-id", options: { ids: "id" } });
    const ids: string[] = [];
    for (let n = 1; n <= 12; n++) ids.push((await producer.add(n, { orderingKey: "account-7" })).id);
    ids.push(...(await producer.addMany([13, 14])));
    await eventually(
      () => consumer.balance(),
      (b) => b.total === 105,
    );
    expect(await producer.rows()).toBe(0);
    const got = delivered.get("e2e-id")!;
    // The queue's message id is the outbox's, and the body is the object's own: no envelope.
    expect(got.map((m) => m.id).toSorted()).toEqual(ids.toSorted());
    for (const m of got) expect(unwrap(m)).toEqual({ id: m.id, body: m.body });
    // The keyed messages were delivered and applied in the order they were recorded.
    const keyed = got.map((m) => (m.body as { n: number }).n).filter((n) => n <= 12);
    expect(keyed).toEqual(keyed.toSorted((a, b) => a - b));
    // Applied in that order too (the two unkeyed messages may come anywhere among them).
    const keyedIds = new Set(ids.slice(0, 12));
    expect((await consumer.balance()).applied.filter((id) => keyedIds.has(id))).toEqual(ids.slice(0, 12));

    const again = await consumer.apply(got);
    expect(again.outcomes.every((o) => o.outcome === "duplicate")).toBe(true);
    expect(again.total).toBe(105);
  }, 30_000);
});
