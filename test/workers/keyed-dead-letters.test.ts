/**
 * Keyed messages in a dead-letter queue: a redrive, a
 * peek and `remaining_matching` see them, and a redrive gives a key's messages back in their
 * order with their key; an operator's release moves only the head it names of a key that is
 * held, a delayed head holds its key visibly, and a failed release leaves nothing held; a
 * purge during a redrive deletes only what it reports, and the redrive moves the rest.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { moveMessages } from "../../src/routing/move-messages";
import {
  ack,
  api,
  backlog,
  createQueue,
  pull,
  type Pulled,
  queuePath,
  send,
  shardsOnFakeClock,
  storedMessages,
} from "./helpers";

const redrive = (q: string, body?: unknown) => api("POST", `${queuePath(q)}/redrive`, body);
const held = (q: string) => api("GET", `${queuePath(q)}/ordering/held`);
const release = (q: string, body: unknown) => api("POST", `${queuePath(q)}/ordering/release`, body);
const bodies = (ms: Pulled[]) => ms.map((m) => JSON.parse(atob(m.body)) as string);

/** A source queue whose pull consumer dead-letters into `dlq`, its shards on a fake clock. */
async function withDeadLetters(source: string, dlq: string, maxRetries = 0) {
  await createQueue(dlq);
  const q = await createQueue(source);
  const res = await api("POST", `${queuePath(source)}/consumers`, {
    type: "http_pull",
    settings: { max_retries: maxRetries, visibility_timeout_ms: 1000 },
    dead_letter_queue: dlq,
  });
  expect(res.status).toBe(201);
  return { ...q, ...(await shardsOnFakeClock(q.queue_id)) };
}

/** Pulls until nothing more comes, leaving everything leased. */
async function pullAll(q: string): Promise<Pulled[]> {
  const out: Pulled[] = [];
  for (let i = 0; i < 8; i++) out.push(...((await pull(q, { batch_size: 100 })).json.result.messages as Pulled[]));
  return out;
}

/** Sends each message after the one before it was accepted. */
async function sendInOrder(q: string, messages: Array<[body: string, key?: string]>): Promise<string[]> {
  const ids: string[] = [];
  for (const [body, key] of messages) {
    const res = await send(q, body, { ordering_key: key });
    expect(res.status).toBe(200);
    ids.push(res.json.result.message_id);
  }
  return ids;
}

/** Fails every message of the source once, in rounds (a key gives one batch at a time), until none is left. */
async function failAll(q: string): Promise<void> {
  for (let round = 0; round < 20 && (await backlog(q)) > 0; round++) {
    const got = await pullAll(q);
    if (got.length > 0) await ack(q, { retries: got.map((m) => ({ lease_id: m.lease_id })) });
  }
  expect(await backlog(q)).toBe(0);
}

describe("keyed messages in a dead-letter queue", () => {
  it("redrives keyed dead letters with their keys, each key in its order, and peek and remaining_matching count them", async () => {
    await withDeadLetters("kd-src", "kd-src-dead");
    const sent: Array<[string, string?]> = [];
    for (let i = 0; i < 5; i++) sent.push([`a${i}`, "a"], [`b${i}`, "b"], [`plain${i}`], [`plain${i + 5}`]);
    await sendInOrder("kd-src", sent);
    await failAll("kd-src");
    expect(await backlog("kd-src-dead")).toBe(20);

    // Peek shows the keyed ones too.
    const peeked = (await api("GET", `${queuePath("kd-src-dead")}/messages?limit=100`)).json.result.messages as Array<{
      body: string;
      ordering_key?: string;
    }>;
    expect(peeked).toHaveLength(20);
    expect(peeked.filter((m) => m.ordering_key === "a").map((m) => JSON.parse(atob(m.body)))).toEqual([
      "a0",
      "a1",
      "a2",
      "a3",
      "a4",
    ]);

    // A limited redrive leaves the rest counted.
    const first = await redrive("kd-src-dead", { limit: 3 });
    expect(first.json.result).toEqual({ moved: 3, target_queue: "kd-src", remaining_matching: 17 });
    const rest = await redrive("kd-src-dead", {});
    expect(rest.json.result).toEqual({ moved: 17, target_queue: "kd-src", remaining_matching: 0 });
    expect(await backlog("kd-src-dead")).toBe(0);
    expect(await backlog("kd-src")).toBe(20);

    // Back in the source with their keys, and each key in the order it was sent.
    const back: Pulled[] = [];
    for (let round = 0; round < 10 && back.length < 20; round++) {
      const got = await pullAll("kd-src");
      back.push(...got);
      if (got.length > 0) await ack("kd-src", { acks: got.map((m) => ({ lease_id: m.lease_id })) });
    }
    expect(back).toHaveLength(20);
    expect(bodies(back.filter((m) => m.ordering_key === "a"))).toEqual(["a0", "a1", "a2", "a3", "a4"]);
    expect(bodies(back.filter((m) => m.ordering_key === "b"))).toEqual(["b0", "b1", "b2", "b3", "b4"]);
    expect(back.filter((m) => m.ordering_key === undefined)).toHaveLength(10);
  });

  it("moves keyed dead letters a filter matches, and counts the ones it leaves", async () => {
    const dlq = await createQueue("kd-filter-dead");
    await createQueue("kd-filter-src");
    const { clock } = await shardsOnFakeClock(dlq.queue_id);
    await sendInOrder("kd-filter-dead", [
      ["old1", "k"],
      ["old2", "k"],
    ]);
    clock.advance(3_600_000);
    await sendInOrder("kd-filter-dead", [["new1", "k"], ["newplain"]]);
    const to = { target_queue: "kd-filter-src" };
    const older = await redrive("kd-filter-dead", { ...to, filter: { min_age_seconds: 1800 } });
    expect(older.json.result).toEqual({ moved: 2, target_queue: "kd-filter-src", remaining_matching: 0 });
    expect((await redrive("kd-filter-dead", { ...to, filter: { max_age_seconds: 60 }, limit: 1 })).json.result).toEqual(
      { moved: 1, target_queue: "kd-filter-src", remaining_matching: 1 },
    );
    expect((await redrive("kd-filter-dead", to)).json.result).toEqual({
      moved: 1,
      target_queue: "kd-filter-src",
      remaining_matching: 0,
    });
    expect(await backlog("kd-filter-src")).toBe(4);
  });

  it("leaves to a redrive what it is moving when the dead-letter queue is purged meanwhile: the purge's count is what it deleted, and none of it arrives", async () => {
    const dlq = await createQueue("kd-purge-dead");
    await createQueue("kd-purge-src");
    const map = (await coordinatorFor(env, dlq.queue_id).shardMap())!;
    const plain = (
      await api("POST", `${queuePath("kd-purge-dead")}/messages/batch`, {
        messages: Array.from({ length: 6 }, (_, i) => ({ body: `p${i}` })),
      })
    ).json.result.message_ids as string[];
    const keyed = await sendInOrder("kd-purge-dead", [
      ["k0", "k"],
      ["k1", "k"],
      ["j0", "j"],
    ]);
    expect(plain.length + keyed.length).toBe(9);
    // A redrive between its lease and its write: it holds some messages of each shard.
    const moving = await Promise.all(
      map.shards.map(async (s) => ({
        shard: s.name,
        messages: await storageShardFor(env, s.name).leaseMatching(dlq.queue_id, {}, 3, 60_000),
      })),
    );
    const movingIds = moving.flatMap((m) => m.messages.map((x) => x.id));
    expect(movingIds.length).toBeGreaterThan(0);
    const purged = await api("POST", `${queuePath("kd-purge-dead")}/purge`, {
      delete_messages_permanently: true,
      return_ids: true,
    });
    expect(purged.status).toBe(200);
    // The redrive writes what it leased, then acks it.
    let acked = 0;
    for (const m of moving) {
      await moveMessages(env, "local", "kd-purge-src", { queueId: dlq.queue_id, shard: m.shard }, m.messages);
      acked += (
        await storageShardFor(env, m.shard).settle({
          queueId: dlq.queue_id,
          acks: m.messages.map((x) => ({ id: x.id, leaseId: x.leaseId })),
          retries: [],
          deadLettered: [],
          dropped: [],
        })
      ).acked;
    }
    // What the purge reported gone is not what arrived; what arrived was acked where it was.
    expect(purged.json.result.purged).toBe(9 - movingIds.length);
    expect(acked).toBe(movingIds.length);
    const arrived = (await storedMessages("kd-purge-src")).messages.map((m) => m.id);
    expect(await backlog("kd-purge-src")).toBe(movingIds.length);
    expect(arrived.filter((id) => !movingIds.includes(id))).toEqual([]);
    // It names what it deleted: every message but those moving.
    expect([...purged.json.result.ids].sort()).toEqual(
      [...plain, ...keyed].filter((id) => !movingIds.includes(id)).sort(),
    );
    // Keyed messages were among those moving.
    expect(moving.flatMap((m) => m.messages).some((x) => x.orderingKey !== undefined)).toBe(true);
    expect(await backlog("kd-purge-dead")).toBe(0);
  });
});

describe("releasing a held ordering key", () => {
  it("refuses to release a key that is not held, and a head other than the one named, moving nothing", async () => {
    await withDeadLetters("kr-src", "kr-src-dead", 3);
    const [ready] = await sendInOrder("kr-src", [["r1", "ready"]]);
    const notHeld = await release("kr-src", { ordering_key: "ready", message_id: ready });
    expect(notHeld.status).toBe(404);
    expect(notHeld.json.errors[0].field).toBe("ordering_key");

    const [s1, s2] = await sendInOrder("kr-src", [
      ["s1", "stuck"],
      ["s2", "stuck"],
    ]);
    const got = await pullAll("kr-src");
    const head = got.find((m) => m.id === s1)!;
    await ack("kr-src", { retries: [{ lease_id: head.lease_id, delay_seconds: 3600 }] });
    // The operator saw s1 hold the key; it is named, so the head after it is never taken by mistake.
    const wrong = await release("kr-src", { ordering_key: "stuck", message_id: s2 });
    expect(wrong.status).toBe(409);
    expect(wrong.json.errors[0].field).toBe("message_id");
    const unnamed = await release("kr-src", { ordering_key: "stuck" });
    expect(unnamed.status).toBe(400);
    expect(unnamed.json.errors[0].field).toBe("message_id");
    expect(await backlog("kr-src-dead")).toBe(0);
    expect(await backlog("kr-src")).toBe(3);

    const right = await release("kr-src", { ordering_key: "stuck", message_id: s1 });
    expect(right.status).toBe(200);
    expect(right.json.result).toEqual({ ordering_key: "stuck", message_id: s1, moved_to: "kr-src-dead" });
    expect(await backlog("kr-src-dead")).toBe(1);
    // Between the operator's look and the release, the key went on: the same release now refuses.
    const again = await release("kr-src", { ordering_key: "stuck", message_id: s1 });
    expect([404, 409]).toContain(again.status);
    expect(await backlog("kr-src-dead")).toBe(1);
  });

  it("lists a key held by a delayed first message, as delayed, and lets it be released", async () => {
    const q = await withDeadLetters("kh-src", "kh-src-dead", 3);
    const res = await send("kh-src", "later", { ordering_key: "slow", delay_seconds: 86_400 });
    const id = res.json.result.message_id as string;
    await sendInOrder("kh-src", [["after", "slow"]]);
    const list = (await held("kh-src")).json.result;
    expect(list.held_by_reason).toEqual({ leased: 0, retry: 0, delayed: 1, handoff: 0 });
    expect(list.keys).toEqual([
      expect.objectContaining({
        ordering_key: "slow",
        reason: "delayed",
        message_id: id,
        messages: 2,
        since_ms: q.clock.now(),
      }),
    ]);
    const metrics = (await api("GET", `${queuePath("kh-src")}/metrics`)).json.result;
    expect(metrics.ordering.held_by_reason.delayed).toBe(1);
    const released = await release("kh-src", { ordering_key: "slow", message_id: id });
    expect(released.status).toBe(200);
    expect(bodies(await pullAll("kh-src"))).toEqual(["after"]);
  });

  it("no longer counts a key as delayed once its head is due", async () => {
    const q = await withDeadLetters("kh-due-src", "kh-due-src-dead", 3);
    await send("kh-due-src", "soon", { ordering_key: "due", delay_seconds: 5 });
    expect((await held("kh-due-src")).json.result.held_by_reason.delayed).toBe(1);
    q.clock.advance(5_000);
    const list = (await held("kh-due-src")).json.result;
    expect(list.held_keys).toBe(0);
    expect(list.keys).toEqual([]);
  });

  it("answers 404 naming dead_letter_queue when that queue is gone, and leaves the key as it was", async () => {
    const q = await withDeadLetters("kg-src", "kg-src-dead", 3);
    const [g1] = await sendInOrder("kg-src", [
      ["g1", "g"],
      ["g2", "g"],
    ]);
    const [head] = (await pull("kg-src", { batch_size: 1 })).json.result.messages as Pulled[];
    await ack("kg-src", { retries: [{ lease_id: head!.lease_id, delay_seconds: 30 }] });
    // The consumer names a dead-letter queue that no longer exists.
    const coordinator = coordinatorFor(env, q.queue_id);
    const [consumer] = await coordinator.consumers();
    await coordinator.updateConsumer(consumer!.consumer_id, {}, "kg-gone");
    const res = await release("kg-src", { ordering_key: "g", message_id: g1 });
    expect(res.status).toBe(404);
    expect(res.json.errors[0].field).toBe("dead_letter_queue");
    // Nothing leased: still held by its retry, and delivered once the delay has passed.
    const after = (await held("kg-src")).json.result;
    expect(after.keys).toEqual([expect.objectContaining({ ordering_key: "g", reason: "retry", message_id: g1 })]);
    const found = (await api("GET", `${queuePath("kg-src")}/messages/${g1}`)).json.result;
    expect(found.state).not.toBe("leased");
    q.clock.advance(30_000);
    expect(bodies(await pullAll("kg-src"))).toEqual(["g1", "g2"]);
  });
});
