/**
 * Ordered lanes (docs/ordered-lanes.md): messages sent with an ordering key are
 * delivered in the order they were accepted, a key has at most one batch in flight, a
 * retried message holds the rest of its key back (its delay too) until it is acked or
 * dead-lettered, and different keys never wait for one another. Pull consumers, storage
 * shards on a fake clock. Lookups, purges, retention and the operators' routes:
 * ordered-lanes-operations.test.ts.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { StorageShard } from "../../storage-shard/storage-shard";
import {
  ack,
  addConsumer,
  api,
  backlog,
  createQueue,
  eventually,
  fakeConsumer,
  producer,
  pull,
  type Pulled,
  queuePath,
  send,
  shardsOnFakeClock,
} from "./helpers";
import { unsettledKeyed } from "./keyed-helpers";
import { bodies, orderedQueue, pullAll, sendInOrder } from "./ordered-lanes-helpers";
import { sleep } from "../../src/kernel/sleep";

describe("ordered lanes", () => {
  it("delivers a key's messages in the order they were accepted, the next ones sharing the head's batch", async () => {
    await orderedQueue("lanes-order");
    await sendInOrder("lanes-order", "k", ["k1", "k2", "k3", "k4", "k5"]);
    const got = await pullAll("lanes-order");
    expect(bodies(got)).toEqual(["k1", "k2", "k3", "k4", "k5"]);
    expect(got.every((m) => m.ordering_key === "k" && m.attempts === 1)).toBe(true);
  });

  it("keeps every message of a key on one shard", async () => {
    const { shards } = await orderedQueue("lanes-one-shard");
    await sendInOrder(
      "lanes-one-shard",
      "order-7",
      Array.from({ length: 30 }, (_, i) => `m${i}`),
    );
    const perShard: number[] = [];
    for (const s of shards) {
      perShard.push(await unsettledKeyed(s));
    }
    expect(perShard.filter((n) => n > 0)).toEqual([30]);
  });

  it("has at most one batch of a key in flight, while other keys go on", async () => {
    await orderedQueue("lanes-one-batch");
    await sendInOrder("lanes-one-batch", "a", ["a1", "a2"]);
    const first = (await pull("lanes-one-batch", { batch_size: 1 })).json.result.messages as Pulled[];
    expect(bodies(first)).toEqual(["a1"]);
    await sendInOrder("lanes-one-batch", "b", ["b1"]);
    // a2 waits behind a1's lease; b1 is another key.
    const rest = await pullAll("lanes-one-batch");
    expect(bodies(rest)).toEqual(["b1"]);
    expect((await ack("lanes-one-batch", { acks: [{ lease_id: first[0]!.lease_id }] })).json.result.ackCount).toBe(1);
    expect(bodies(await pullAll("lanes-one-batch"))).toEqual(["a2"]);
  });

  it("holds the rest of a key behind a retried message for its delay, then delivers it first, attempts counted", async () => {
    const { clock } = await orderedQueue("lanes-retry");
    await sendInOrder("lanes-retry", "r", ["r1", "r2", "r3"]);
    const [r1] = (await pull("lanes-retry", { batch_size: 1 })).json.result.messages as Pulled[];
    expect(r1!.body).toBe(btoa('"r1"'));
    await sendInOrder("lanes-retry", "other", ["o1"]);
    expect(
      (await ack("lanes-retry", { retries: [{ lease_id: r1!.lease_id, delay_seconds: 30 }] })).json.result.retryCount,
    ).toBe(1);
    // Only the other key moves while r1 waits out its delay.
    const during = await pullAll("lanes-retry");
    expect(bodies(during)).toEqual(["o1"]);
    await ack("lanes-retry", { acks: [{ lease_id: during[0]!.lease_id }] });
    clock.advance(29_999);
    expect(await pullAll("lanes-retry")).toEqual([]);
    clock.advance(1);
    const after = await pullAll("lanes-retry");
    expect(bodies(after)).toEqual(["r1", "r2", "r3"]);
    expect(after.map((m) => m.attempts)).toEqual([2, 1, 1]);
  });

  it("keeps the order when a whole batch is retried, and when its lease runs out", async () => {
    const { clock } = await orderedQueue("lanes-retry-all");
    await sendInOrder("lanes-retry-all", "x", ["x1", "x2", "x3"]);
    const batch = await pullAll("lanes-retry-all");
    expect(bodies(batch)).toEqual(["x1", "x2", "x3"]);
    // Retried in the reverse order: the key's order is where the messages were accepted, not settled.
    await ack("lanes-retry-all", { retries: [...batch].reverse().map((m) => ({ lease_id: m.lease_id })) });
    const again = await pullAll("lanes-retry-all");
    expect(bodies(again)).toEqual(["x1", "x2", "x3"]);
    // Nothing settled: the lease runs out, and the key comes back whole, in order.
    clock.advance(1000);
    const third = await pullAll("lanes-retry-all");
    expect(bodies(third)).toEqual(["x1", "x2", "x3"]);
    expect(third.map((m) => m.attempts)).toEqual([3, 3, 3]);
  });

  it("lets a key go on once its blocking message is dead-lettered", async () => {
    await createQueue("lanes-dlq-dead");
    await orderedQueue("lanes-dlq", { dead_letter_queue: "lanes-dlq-dead", settings: { max_retries: 1 } });
    await sendInOrder("lanes-dlq", "d", ["poison", "next"]);
    const [p1] = (await pull("lanes-dlq", { batch_size: 1 })).json.result.messages as Pulled[];
    await ack("lanes-dlq", { retries: [{ lease_id: p1!.lease_id }] });
    const [p2] = (await pull("lanes-dlq", { batch_size: 1 })).json.result.messages as Pulled[];
    expect(p2).toMatchObject({ id: p1!.id, attempts: 2 });
    // Out of retries: to the dead-letter queue, and the key goes on.
    await ack("lanes-dlq", { retries: [{ lease_id: p2!.lease_id }] });
    expect(bodies(await pullAll("lanes-dlq"))).toEqual(["next"]);
    expect(await backlog("lanes-dlq-dead")).toBe(1);
  });

  it("leaves messages without a key as they were, in the same batches as keyed ones", async () => {
    await orderedQueue("lanes-mixed");
    await send("lanes-mixed", "plain-1");
    await sendInOrder("lanes-mixed", "m", ["m1", "m2"]);
    await send("lanes-mixed", "plain-2");
    const got = await pullAll("lanes-mixed");
    expect(bodies(got).sort()).toEqual(["m1", "m2", "plain-1", "plain-2"]);
    expect(got.filter((m) => m.ordering_key === undefined).map((m) => m.id)).toHaveLength(2);
    await ack("lanes-mixed", { acks: got.map((m) => ({ lease_id: m.lease_id })) });
    expect(await backlog("lanes-mixed")).toBe(0);
  });

  it("takes orderingKey on the producer binding, send and sendBatch, in the batch's order", async () => {
    await orderedQueue("lanes-binding");
    const q = producer("lanes-binding");
    await q.send("s1", { orderingKey: "p" });
    await q.sendBatch([{ body: "s2", orderingKey: "p" }, { body: "s3", orderingKey: "p" }, { body: "free" }]);
    const got = await pullAll("lanes-binding");
    expect(bodies(got.filter((m) => m.ordering_key === "p"))).toEqual(["s1", "s2", "s3"]);
    await expect(q.send("bad", { orderingKey: "" })).rejects.toThrow(/options.orderingKey/);
  });

  it("refuses an ordering key that is not 1 to 128 printable characters: 400 naming the field, nothing stored", async () => {
    await orderedQueue("lanes-bad-key");
    for (const bad of ["", "x".repeat(129), "tab\there", 42]) {
      const one = await send("lanes-bad-key", "x", { ordering_key: bad });
      expect(one.status).toBe(400);
      expect(one.json.errors[0].field).toBe("ordering_key");
    }
    const batch = await api("POST", `${queuePath("lanes-bad-key")}/messages/batch`, {
      messages: [
        { body: 1, ordering_key: "ok" },
        { body: 2, ordering_key: "" },
      ],
    });
    expect(batch.status).toBe(400);
    expect(batch.json.errors[0].field).toBe("messages[1].ordering_key");
    expect(await backlog("lanes-bad-key")).toBe(0);
    expect((await send("lanes-bad-key", "x", { ordering_key: "x".repeat(128) })).status).toBe(200);
  });

  it("keeps each key's order for a push consumer through retryAll() and a throwing handler", async () => {
    const q = await createQueue("lanes-push");
    await addConsumer("lanes-push", {
      settings: { max_retries: 5, retry_delay: 0, max_wait_time_ms: 0, batch_size: 3 },
    });
    const seen: string[] = [];
    let calls = 0;
    const deliveries = await fakeConsumer(q.queue_id, (batch) => {
      calls++;
      for (const m of batch.messages) seen.push(`${m.body as string}@${m.attempts}`);
      // First batch: retryAll(); second: ack the first message, then throw (the rest are retried).
      if (calls === 1) return batch.retryAll();
      if (calls === 2) {
        batch.messages[0]!.ack();
        throw new Error("handler failed");
      }
      batch.ackAll();
    });
    const p = producer("lanes-push");
    for (const n of ["p1", "p2", "p3", "p4"]) await p.send(n, { orderingKey: "push" });
    await eventually(
      () => backlog("lanes-push"),
      (n) => n === 0,
    );
    const firsts = new Map<string, number>();
    seen.forEach((s, i) => firsts.set(s.split("@")[0]!, firsts.get(s.split("@")[0]!) ?? i));
    // First deliveries in the order sent; each redelivery in order too.
    expect(["p1", "p2", "p3", "p4"].map((n) => firsts.get(n))).toEqual([...firsts.values()].sort((a, b) => a - b));
    expect(seen.slice(0, 6)).toEqual(["p1@1", "p2@1", "p3@1", "p1@2", "p2@2", "p3@2"]);
    // p1 was acked before the throw: it never came back; p2 and p3 came back ahead of p4.
    expect(seen.slice(6, 9)).toEqual(["p2@3", "p3@3", "p4@1"]);
    expect(deliveries.every((d) => d.ids.length <= 3)).toBe(true);
  });

  it("wakes a push consumer for a key's next message when the batch before it was settled by someone who does not come back", async () => {
    const q = await createQueue("lanes-wake");
    const { shards } = await shardsOnFakeClock(q.queue_id);
    const p = producer("lanes-wake");
    for (const n of ["w1", "w2"]) await p.send(n, { orderingKey: "wake" });
    // The key's head leased by hand (as an HTTP pull's ack comes from outside any consumer shard's round).
    let held: { shard: string; id: string; leaseId: string } | undefined;
    for (const name of shards) {
      const got = await runInDurableObject(storageShardFor(env, name), (obj: StorageShard) =>
        obj.lease({ queueId: q.queue_id, limit: 1, leaseMs: 60_000, maxWaitMs: 0, retentionMs: 86_400_000 }),
      );
      if (got.messages.length > 0) held = { shard: name, id: got.messages[0]!.id, leaseId: got.messages[0]!.leaseId };
    }
    expect(held).toBeDefined();
    await addConsumer("lanes-wake", { settings: { batch_size: 10, max_wait_time_ms: 0 } });
    const seen: string[] = [];
    await fakeConsumer(q.queue_id, (batch) => {
      for (const m of batch.messages) seen.push(m.body as string);
      batch.ackAll();
    });
    // The consumer finds the key leased; nothing of the shards' clock moves, so no lease runs out.
    await sleep(200);
    expect(seen).toEqual([]);
    await runInDurableObject(storageShardFor(env, held!.shard), (obj: StorageShard) =>
      obj.settle({
        queueId: q.queue_id,
        acks: [{ id: held!.id, leaseId: held!.leaseId }],
        retries: [],
        deadLettered: [],
        dropped: [],
      }),
    );
    await eventually(
      async () => seen,
      (s) => s.length === 1,
      3_000,
    );
    expect(seen).toEqual(["w2"]);
  }, 15_000);

  it("leases and settles the head of a deep lane reading what it takes, not the whole lane", async () => {
    const { queue_id } = await createQueue("lanes-deep");
    const p = producer("lanes-deep");
    for (let b = 0; b < 20; b++)
      await p.sendBatch(Array.from({ length: 100 }, (_, i) => ({ body: `d${b * 100 + i}`, orderingKey: "deep" })));
    const map = (await coordinatorFor(env, queue_id).shardMap())!;
    let read: number | undefined;
    for (const s of map.shards) {
      const r = await runInDurableObject(storageShardFor(env, s.name), (obj: StorageShard) => {
        const before = obj.stats().cost.rowsRead ?? 0;
        const got = obj.lease({ queueId: queue_id, limit: 10, leaseMs: 60_000, maxWaitMs: 0, retentionMs: 86_400_000 });
        if (got.messages.length === 0) return undefined;
        expect(got.messages.map((m) => new TextDecoder().decode(m.body))).toEqual(
          Array.from({ length: 10 }, (_, i) => JSON.stringify(`d${i}`)),
        );
        const settled = obj.settle({
          queueId: queue_id,
          acks: got.messages.map((m) => ({ id: m.id, leaseId: m.leaseId })),
          retries: [],
          deadLettered: [],
          dropped: [],
        });
        expect(settled.acked).toBe(10);
        return (obj.stats().cost.rowsRead ?? 0) - before;
      });
      if (r !== undefined) read = r;
    }
    // 2,000 messages wait on the key; a lease of 10 and its settle read tens of rows per message
    // taken, whatever waits behind them (reading the whole lane, they read over 8,000).
    expect(read).toBeDefined();
    expect(read!).toBeLessThan(500);
    expect(await backlog("lanes-deep")).toBe(1990);
  });

  it("dead-letters every keyed message, however many went before: a lane message's copy is never named twice", async () => {
    // Found by the full fault run: lane numbers given out again after a delete made a second
    // dead-lettering look like a repeat of the first, and the message was dropped from both queues.
    await createQueue("lanes-dlq-twice-dead");
    await orderedQueue("lanes-dlq-twice", { dead_letter_queue: "lanes-dlq-twice-dead", settings: { max_retries: 0 } });
    for (const n of ["first", "second", "third"]) {
      await sendInOrder("lanes-dlq-twice", "poison", [n]);
      const [m] = (await pull("lanes-dlq-twice", { batch_size: 1 })).json.result.messages as Pulled[];
      expect(bodies([m!])).toEqual([n]);
      await ack("lanes-dlq-twice", { retries: [{ lease_id: m!.lease_id }] });
      expect(await backlog("lanes-dlq-twice")).toBe(0);
    }
    expect(await backlog("lanes-dlq-twice-dead")).toBe(3);
  });
});
