import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { decideGather, MIN_GATHER_WAIT_MS, oldestFirst, reserveFor } from "../../consumer-shard/gather";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage } from "../../src/kernel/protocol";
import { locate } from "../../src/kernel/ids";
import { forgetSticks } from "../../src/routing/sticky-placement";
import { addConsumer, backlog, createQueue, eventually, fakeConsumer, producer } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

const shardOf = (id: string) => locate(id)!.shard;

/** A send placed at random, as a broker isolate of its own would place it: sticky placement forgotten first. */
async function sendToRandomShard(queue: string, body: unknown): Promise<string> {
  forgetSticks();
  return (await producer(queue).send(body)).messageId;
}

describe("deciding a batch over several storage shards", () => {
  const now = 1_000_000;
  it("takes a batch when the shards' ready messages fill it together, or once the oldest has waited max_wait_time_ms, however few; the oldest first", () => {
    const filling = [
      { name: "a", ready: 30, waitUntil: now + 900 },
      { name: "b", ready: 50, waitUntil: now + 950 },
      { name: "c", ready: 40, waitUntil: now + 990 },
    ];
    expect(decideGather(filling, 100, 1000, now)).toEqual({ gather: true });
    expect(
      decideGather(
        [
          { name: "a", ready: 2, waitUntil: now + 500 },
          { name: "b", ready: 1, waitUntil: now },
        ],
        100,
        1000,
        now,
      ),
    ).toEqual({ gather: true });
    // The oldest waiting messages first; shards not known to be filling last.
    const known = new Map(filling.map((f) => [f.name, f]));
    const order = oldestFirst([{ name: "z" }, { name: "c" }, { name: "b" }, { name: "a" }], known);
    expect(order.map((s) => s.name)).toEqual(["a", "b", "c", "z"]);
    // A batch leased from one shard leaves room for what waits on the others: all but one message at most.
    expect(reserveFor(known, 100)).toBe(99);
    expect(reserveFor(new Map([["a", filling[0]!]]), 100)).toBe(30);
    expect(reserveFor(new Map(), 100)).toBe(0);
    // Not what waits on the shard the batch is leased from: that comes with the lease.
    expect(reserveFor(known, 100, "b")).toBe(70);
  });

  it("waits for the time the queue's rate needs to fill the batch, never past the oldest message's deadline", () => {
    // 40 ready, the oldest 100 ms ago: 60 more take about 150 ms at that rate.
    const d = decideGather(
      [
        { name: "a", ready: 20, waitUntil: now + 900 },
        { name: "b", ready: 20, waitUntil: now + 950 },
      ],
      100,
      1000,
      now,
    );
    expect(d).toEqual({ gather: false, wakeAt: now + 150 });
    // 2 ready, the oldest 900 ms ago: the deadline (100 ms away) comes first.
    expect(
      decideGather(
        [
          { name: "a", ready: 1, waitUntil: now + 100 },
          { name: "b", ready: 1, waitUntil: now + 990 },
        ],
        100,
        1000,
        now,
      ),
    ).toEqual({ gather: false, wakeAt: now + 100 });
    // A stream that has just begun does not make a consumer shard look again at once.
    expect(
      decideGather(
        [
          { name: "a", ready: 50, waitUntil: now + 1000 },
          { name: "b", ready: 40, waitUntil: now + 1000 },
        ],
        100,
        1000,
        now,
      ),
    ).toEqual({ gather: false, wakeAt: now + MIN_GATHER_WAIT_MS });
  });

  it("leaves one filling shard to wake consumers itself when its batch fills: no early looks", () => {
    expect(decideGather([{ name: "a", ready: 50, waitUntil: now + 700 }], 100, 1000, now)).toEqual({
      gather: false,
      wakeAt: now + 700,
    });
  });
});

describe("one batch from several storage shards", () => {
  it("delivers a full batch from messages spread over the shards long before the batch timeout, each shard settling its own", async () => {
    const q = await createQueue("gather-fill");
    expect((await coordinatorFor(env, q.queue_id).shardMap())!.shards.length).toBeGreaterThan(1);
    const deliveries = await fakeConsumer(q.queue_id, () => {});
    await addConsumer("gather-fill", { settings: { batch_size: 10, max_wait_time_ms: 60_000 } });
    const sentAt = Date.now();
    // One at a time, each to a random shard (no sticky placement), so no shard holds a whole batch.
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push(await sendToRandomShard("gather-fill", { i }));
    expect(new Set(ids.map(shardOf)).size).toBeGreaterThan(1);
    await eventually(
      async () => deliveries.length,
      (n) => n > 0,
      10_000,
    );
    // Well inside the minute the batch timeout allows: one shard at a time would wait all of it.
    expect(Date.now() - sentAt).toBeLessThan(10_000);
    expect(deliveries[0]!.ids.toSorted()).toEqual(ids.toSorted());
    // Every shard got its acks.
    await eventually(
      () => backlog("gather-fill"),
      (n) => n === 0,
    );
  });

  // Waits out max_wait_time_ms and a retry's delay in real time, which a loaded CI machine can take near the default timeout to do.
  it("sends a partial batch gathered from several shards once its oldest message has waited max_wait_time_ms, and retries each message on its own shard", async () => {
    const q = await createQueue("gather-wait");
    let firstTry = true;
    const deliveries = await fakeConsumer(q.queue_id, (batch) => {
      if (firstTry) {
        firstTry = false;
        batch.retryAll();
      }
    });
    await addConsumer("gather-wait", { settings: { batch_size: 100, max_wait_time_ms: 1500, max_retries: 3 } });
    const ids: string[] = [];
    for (let i = 0; i < 8; i++) ids.push(await sendToRandomShard("gather-wait", { i }));
    expect(new Set(ids.map(shardOf)).size).toBeGreaterThan(1);
    const sentAt = Date.now();
    await eventually(
      async () => deliveries.length,
      (n) => n >= 1,
      10_000,
    );
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(1000);
    expect(deliveries[0]!.ids.toSorted()).toEqual(ids.toSorted());
    // The retried messages come back, all of them, once each, as a second attempt.
    await eventually(
      async () => deliveries.flatMap((d) => d.ids).length,
      (n) => n >= 16,
      15_000,
    );
    const second = deliveries.slice(1).flatMap((d) => d.ids.map((id, i) => [id, d.attempts[i]]));
    expect(second.map(([id]) => id).toSorted()).toEqual(ids.toSorted());
    expect(second.every(([, a]) => a === 2)).toBe(true);
    await eventually(
      () => backlog("gather-wait"),
      (n) => n === 0,
    );
  }, 15_000);

  it("lets the messages left waiting on one shard join the next full batch another shard fills, instead of the batch timeout", async () => {
    const q = await createQueue("gather-rest");
    const [a, b] = (await coordinatorFor(env, q.queue_id).shardMap())!.shards.map((s) => s.name) as [string, string];
    const deliveries = await fakeConsumer(q.queue_id, () => {});
    await addConsumer("gather-rest", { settings: { batch_size: 10, max_wait_time_ms: 60_000 } });
    // A remainder on shard a: fewer than a batch, young beside the minute the timeout allows.
    const rest = (await storageShardFor(env, a).append({ queueId: q.queue_id, messages: [0, 1, 2].map(text) })) as {
      ids: string[];
    };
    await sleep(300); // a consumer shard has looked, found 3 of 10 and gone to sleep
    expect(deliveries).toHaveLength(0);
    // A full batch on shard b, which wakes consumers at once.
    const fresh = (await storageShardFor(env, b).append({
      queueId: q.queue_id,
      messages: Array.from({ length: 10 }, (_, i) => text(10 + i)),
    })) as { ids: string[] };
    await eventually(
      async () => deliveries.length,
      (n) => n > 0,
      4000,
    );
    // The remainder goes first, in the first batch, topped up from b.
    expect(deliveries[0]!.ids).toHaveLength(10);
    expect(deliveries[0]!.ids).toEqual(expect.arrayContaining(rest.ids));
    expect(deliveries[0]!.ids.filter((id) => fresh.ids.includes(id))).toHaveLength(7);
  });
});

const utf8 = new TextEncoder();
/** A fresh message as the broker hands it to a shard. */
function text(i: number): EncodedMessage {
  const body = utf8.encode(`message ${i}`);
  return { body, contentType: "text", delayMs: 0, checksum: crc32(body) };
}
