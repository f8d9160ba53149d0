/**
 * Ordered lanes (docs/ordered-lanes.md): messages sent with an ordering key are
 * delivered in the order they were accepted, a key has at most one batch in flight, a
 * retried message holds the rest of its key back (its delay too) until it is acked or
 * dead-lettered, and different keys never wait for one another. Pull consumers, storage
 * shards on a fake clock.
 */
import { env, runDurableObjectAlarm, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { ManualClock } from "../../src/kernel/clock";
import { locate } from "../../src/kernel/ids";
import { decodeHeaders, SEGMENT_MAX_MESSAGES } from "../../storage-shard/segments/segment";
import type { StorageShard } from "../../storage-shard/storage-shard";
import {
  ack,
  addConsumer,
  api,
  backlog,
  BASE,
  createQueue,
  eventually,
  fakeConsumer,
  producer,
  pull,
  type Pulled,
  pullQueue,
  queuePath,
  send,
  shardsOnFakeClock,
  TOKEN,
} from "./helpers";
import { unsettledKeyed } from "./keyed-helpers";
import { parseExposition, valueOf } from "./exposition";
import { sleep } from "../../src/kernel/sleep";

async function orderedQueue(name: string, consumer: Record<string, unknown> = {}) {
  const q = await pullQueue(name, {
    settings: { visibility_timeout_ms: 1000, max_retries: 3, ...(consumer.settings as object) },
    ...consumer,
  });
  return { ...q, ...(await shardsOnFakeClock(q.queue_id)) };
}

/** Pulls until nothing more comes (a pull asks the shards in turn), leaving everything leased. */
async function pullAll(q: string, batchSize = 100): Promise<Pulled[]> {
  const out: Pulled[] = [];
  for (let i = 0; i < 8; i++) {
    const got = (await pull(q, { batch_size: batchSize })).json.result.messages as Pulled[];
    out.push(...got);
  }
  return out;
}

/** Which of `ids` some shard's index of ids that do not say where they live (`message_ids`) holds. */
async function indexedOf(shards: string[], ids: string[]): Promise<string[]> {
  const out: string[] = [];
  for (const s of shards) {
    await runInDurableObject(storageShardFor(env, s), (_o: StorageShard, state) => {
      for (const id of ids)
        if (state.storage.sql.exec("SELECT 1 FROM message_ids WHERE id = ?", id).toArray().length > 0) out.push(id);
    });
  }
  return out;
}

const bodies = (ms: Pulled[]) => ms.map((m) => JSON.parse(atob(m.body)) as string);

/** Sends a key's messages one after another, each accepted before the next is sent. */
async function sendInOrder(q: string, key: string, names: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const n of names) {
    const res = await send(q, n, { ordering_key: key });
    expect(res.status).toBe(200);
    ids.push(res.json.result.message_id);
  }
  return ids;
}

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

  it("finds, cancels and purges keyed messages, and counts them in the backlog", async () => {
    await orderedQueue("lanes-ops");
    const [first, second, third] = await sendInOrder("lanes-ops", "ops", ["o1", "o2", "o3"]);
    expect(await backlog("lanes-ops")).toBe(3);
    const found = await api("GET", `${queuePath("lanes-ops")}/messages/${second}`);
    expect(found.json.result).toMatchObject({ id: second, state: "ready" });
    // Cancelling the head lets the key go on from the next one.
    expect((await api("DELETE", `${queuePath("lanes-ops")}/messages/${first}`)).status).toBe(200);
    expect(await backlog("lanes-ops")).toBe(2);
    const [head] = (await pull("lanes-ops", { batch_size: 1 })).json.result.messages as Pulled[];
    expect(head!.id).toBe(second);
    expect((await api("GET", `${queuePath("lanes-ops")}/messages/${second}`)).json.result.state).toBe("leased");
    expect(
      (await api("POST", `${queuePath("lanes-ops")}/purge`, { delete_messages_permanently: true })).status,
    ).toBeLessThan(300);
    await eventually(
      () => backlog("lanes-ops"),
      (n) => n === 0,
    );
    expect((await api("GET", `${queuePath("lanes-ops")}/messages/${third}`)).status).toBe(404);
    // The purged lane is gone: a new message of the key is delivered at once.
    await sendInOrder("lanes-ops", "ops", ["o4"]);
    expect(bodies(await pullAll("lanes-ops"))).toEqual(["o4"]);
  });

  it("finds a keyed message by an id the shard drew and by one an Idempotency-Key drew, and forgets both once settled", async () => {
    const { shards } = await orderedQueue("lanes-ids");
    const [drawn] = await sendInOrder("lanes-ids", "ids", ["d1"]);
    const keyed = await api(
      "POST",
      `${queuePath("lanes-ids")}/messages`,
      { body: "g1", ordering_key: "ids" },
      { headers: { "idempotency-key": "lanes-ids-1" } },
    );
    expect(keyed.status).toBe(200);
    const given = keyed.json.result.message_id as string;
    // The shard's id names the message's place, a slot of one of its segments; the other is one a
    // broker drew before any shard saw it, which the shard indexes.
    const at = locate(drawn!)!;
    expect(at.slot).toBeLessThan(SEGMENT_MAX_MESSAGES);
    const placed = await Promise.all(
      shards.map((s) =>
        runInDurableObject(storageShardFor(env, s), (_o: StorageShard, state) => {
          const row = state.storage.sql
            .exec<{ headers: string }>("SELECT headers FROM segments WHERE seg = ?", at.seg)
            .toArray()[0];
          const h = row ? decodeHeaders(row.headers)[at.slot] : undefined;
          return h !== undefined && h.id === drawn && h.key === "ids" && !h.indexed;
        }),
      ),
    );
    expect(placed.filter(Boolean)).toHaveLength(1);
    expect(await indexedOf(shards, [drawn!, given])).toEqual([given]);
    for (const id of [drawn!, given])
      expect((await api("GET", `${queuePath("lanes-ids")}/messages/${id}`)).json.result).toMatchObject({
        id,
        state: "ready",
      });
    // The same request again stores nothing: the shard knows the id it was given.
    const again = await api(
      "POST",
      `${queuePath("lanes-ids")}/messages`,
      { body: "g1", ordering_key: "ids" },
      { headers: { "idempotency-key": "lanes-ids-1" } },
    );
    expect(again.json.result.message_id).toBe(given);
    expect(await backlog("lanes-ids")).toBe(2);
    const pulled = await pullAll("lanes-ids");
    expect(pulled.map((m) => m.id)).toEqual([drawn, given]);
    expect((await ack("lanes-ids", { acks: pulled.map((m) => ({ lease_id: m.lease_id })) })).status).toBe(200);
    for (const id of [drawn!, given])
      expect((await api("GET", `${queuePath("lanes-ids")}/messages/${id}`)).status).toBe(404);
    expect(await indexedOf(shards, [drawn!, given])).toEqual([]);
    let held = 0;
    for (const s of shards) held += await unsettledKeyed(s, "ids");
    expect(held).toBe(0);
  });

  it("deletes keyed messages past the queue's retention at the shard's heartbeat, and the key goes on", async () => {
    const q = await createQueue("lanes-retention", { message_retention_period: 60 });
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    for (const s of map.shards.slice(1)) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    const shard = storageShardFor(env, map.shards[0]!.name);
    const clock = new ManualClock(Date.now() + 100_000_000_000);
    await runInDurableObject(shard, (obj: StorageShard) => {
      obj.clock = clock;
    });
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    await producer("lanes-retention").sendBatch([
      { body: "old-1", orderingKey: "t" },
      { body: "old-2", orderingKey: "t" },
    ]);
    clock.advance(30_000);
    await producer("lanes-retention").send("young", { orderingKey: "t" });
    clock.advance(30_001);
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    const stats = await shard.stats();
    expect(stats.backlogCount).toBe(1);
    expect(stats.totals.expired).toBe(2);
    expect(
      await api("POST", `${queuePath("lanes-retention")}/consumers`, { type: "http_pull" }).then((r) => r.status),
    ).toBe(201);
    const got = (await pull("lanes-retention", { batch_size: 10 })).json.result.messages as Pulled[];
    expect(bodies(got)).toEqual(["young"]);
  });

  it("lists the keys held back and why, longest held first, with counts", async () => {
    const { clock } = await orderedQueue("lanes-held");
    await sendInOrder("lanes-held", "h", ["h1", "h2"]);
    const [h1] = (await pull("lanes-held", { batch_size: 1 })).json.result.messages as Pulled[];
    const leased = await api("GET", `${queuePath("lanes-held")}/ordering/held`);
    expect(leased.status).toBe(200);
    expect(leased.json.result).toMatchObject({
      lanes: 1,
      held_keys: 1,
      held_by_reason: { leased: 1, retry: 0, delayed: 0, handoff: 0 },
    });
    expect(leased.json.result.keys).toEqual([
      expect.objectContaining({
        ordering_key: "h",
        reason: "leased",
        message_id: h1!.id,
        messages: 2,
        since_ms: clock.now(),
      }),
    ]);
    clock.advance(5);
    await ack("lanes-held", { retries: [{ lease_id: h1!.lease_id, delay_seconds: 30 }] });
    const retrying = (await api("GET", `${queuePath("lanes-held")}/ordering/held?limit=10`)).json.result;
    expect(retrying.keys).toEqual([
      expect.objectContaining({ ordering_key: "h", reason: "retry", message_id: h1!.id, since_ms: clock.now() }),
    ]);
    expect(retrying.oldest_held_since_ms).toBe(clock.now());
    // The counts in GET .../metrics and Prometheus' /metrics.
    const metrics = (await api("GET", `${queuePath("lanes-held")}/metrics`)).json.result;
    expect(metrics.ordering).toEqual({
      lanes: 1,
      held_keys: 1,
      held_by_reason: { leased: 0, retry: 1, delayed: 0, handoff: 0 },
      oldest_held_since_ms: clock.now(),
    });
    const scraped = parseExposition(
      await (await SELF.fetch(`${BASE}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text(),
    );
    const labels = { queue: "lanes-held", queue_id: (await api("GET", queuePath("lanes-held"))).json.result.queue_id };
    expect(valueOf(scraped, "shardq_ordering_held_keys", { ...labels, reason: "retry" })).toBe(1);
    expect(valueOf(scraped, "shardq_ordering_held_keys", { ...labels, reason: "leased" })).toBe(0);
    expect(valueOf(scraped, "shardq_ordering_lanes", labels)).toBe(1);
    const bad = await api("GET", `${queuePath("lanes-held")}/ordering/held?limit=0`);
    expect(bad.status).toBe(400);
    expect(bad.json.errors[0].field).toBe("limit");
  });

  it("releases a held key by moving its blocking message to the dead-letter queue; the key goes on", async () => {
    await createQueue("lanes-release-dead");
    await orderedQueue("lanes-release", { dead_letter_queue: "lanes-release-dead" });
    const [stuck] = await sendInOrder("lanes-release", "r", ["r1", "r2"]);
    const [r1] = (await pull("lanes-release", { batch_size: 1 })).json.result.messages as Pulled[];
    await ack("lanes-release", { retries: [{ lease_id: r1!.lease_id, delay_seconds: 3600 }] });
    expect(await pullAll("lanes-release")).toEqual([]);
    const released = await api("POST", `${queuePath("lanes-release")}/ordering/release`, {
      ordering_key: "r",
      message_id: stuck,
    });
    expect(released.status).toBe(200);
    expect(released.json.result).toMatchObject({
      ordering_key: "r",
      message_id: stuck,
      moved_to: "lanes-release-dead",
    });
    expect(bodies(await pullAll("lanes-release"))).toEqual(["r2"]);
    expect(await backlog("lanes-release-dead")).toBe(1);
    const missing = await api("POST", `${queuePath("lanes-release")}/ordering/release`, {
      ordering_key: "nothing-here",
      message_id: stuck,
    });
    expect(missing.status).toBe(404);
    expect(missing.json.errors[0].field).toBe("ordering_key");
    const invalid = await api("POST", `${queuePath("lanes-release")}/ordering/release`, { ordering_key: "" });
    expect(invalid.status).toBe(400);
    expect(invalid.json.errors[0].field).toBe("ordering_key");
  });

  it("refuses to release a key when the consumer has no dead-letter queue, moving nothing", async () => {
    await orderedQueue("lanes-release-nodlq");
    await sendInOrder("lanes-release-nodlq", "n", ["n1"]);
    const res = await api("POST", `${queuePath("lanes-release-nodlq")}/ordering/release`, {
      ordering_key: "n",
      message_id: "0".repeat(32),
    });
    expect(res.status).toBe(409);
    expect(res.json.errors[0].field).toBe("dead_letter_queue");
    expect(await backlog("lanes-release-nodlq")).toBe(1);
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
