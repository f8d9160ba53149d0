/**
 * Moves between queues: dead-lettering and redrive store a message at the
 * target, then settle its source copy. A message that comes back to a queue it was in
 * before is a new copy and is stored again; only a repeat of the same move (a crash
 * between store and settle) is stored once.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { moveMessages } from "../../src/routing/move-messages";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage, LeasedMessage } from "../../src/kernel/protocol";
import { api, backlog, createQueue, pull, type Pulled, queuePath, storedMessages } from "./helpers";

const utf8 = new TextEncoder();
/** The messages of one pull of up to 100, leased for a minute. */
const leaseAll = async (q: string) =>
  (await pull(q, { batch_size: 100, visibility_timeout_ms: 60_000 })).json.result.messages as Pulled[];
const retryAll = async (q: string, leases: Array<{ lease_id: string }>) => {
  const res = await api("POST", `${queuePath(q)}/messages/ack`, {
    retries: leases.map((m) => ({ lease_id: m.lease_id })),
  });
  expect(res.status).toBe(200);
  expect(res.json.result.warnings).toEqual({});
};
const lookup = (q: string, id: string) => api("GET", `${queuePath(q)}/messages/${id}`);
const redrive = (q: string, body: unknown) => api("POST", `${queuePath(q)}/redrive`, body);

/** `q` with an http_pull consumer that dead-letters into `dlq` on the first failure; `dlq` pulls too. */
async function pair(q: string, dlq: string) {
  await createQueue(dlq);
  await createQueue(q);
  expect(
    (
      await api("POST", `${queuePath(q)}/consumers`, {
        type: "http_pull",
        settings: { max_retries: 0 },
        dead_letter_queue: dlq,
      })
    ).status,
  ).toBe(201);
  expect(
    (await api("POST", `${queuePath(dlq)}/consumers`, { type: "http_pull", settings: { max_retries: 0 } })).status,
  ).toBe(201);
}

/** Pulls the one message of `q` and fails it: with max_retries 0 it leaves for the dead-letter queue. */
async function failOnce(q: string, id: string) {
  const got = await leaseAll(q);
  expect(got.map((m) => m.id)).toEqual([id]);
  await retryAll(q, got);
}

const sends: Array<[string, (q: string) => Promise<string>]> = [
  [
    "a plain send",
    async (q) => (await api("POST", `${queuePath(q)}/messages`, { body: "plain" })).json.result.message_id,
  ],
  [
    "an Idempotency-Key",
    async (q) =>
      (await api("POST", `${queuePath(q)}/messages`, { body: "keyed" }, { headers: { "idempotency-key": `k-${q}` } }))
        .json.result.message_id,
  ],
  [
    "a producer-chosen id",
    async (q) => {
      const id = crc32(utf8.encode(q)).toString(16).padStart(32, "a");
      expect((await api("POST", `${queuePath(q)}/messages`, { body: "chosen", id })).json.result.message_id).toBe(id);
      return id;
    },
  ],
];

describe("a message moved between queues", () => {
  it.each(sends.map(([what, send], i) => [what, send, i] as const))(
    "sent with %s, dead-lettered and redriven back, is in its queue again and delivered",
    async (_what, send, i) => {
      const [q, dlq] = [`mv-back-${i}`, `mv-back-${i}-dlq`];
      await pair(q, dlq);
      const id = await send(q);
      await failOnce(q, id);
      expect((await lookup(q, id)).json.result).toMatchObject({ id, state: "dead_lettered", dead_letter_queue: dlq });

      const res = await redrive(dlq, { target_queue: q });
      expect(res.json.result).toEqual({ moved: 1, target_queue: q, remaining_matching: 0 });
      const found = await lookup(q, id);
      expect(found.status).toBe(200);
      expect(found.json.result).toMatchObject({ id, state: "ready" });
      expect([await backlog(q), await backlog(dlq)]).toEqual([1, 0]);
      expect((await leaseAll(q)).map((m) => [m.id, m.attempts])).toEqual([[id, 1]]);
    },
  );

  it.each(sends.map(([what, send], i) => [what, send, i] as const))(
    "sent with %s, whose dead-lettering was cut off before the queue let go, is in the queue once after a redrive",
    async (_what, send, i) => {
      const [q, dlq] = [`mv-cut-${i}`, `mv-cut-${i}-dlq`];
      await pair(q, dlq);
      const id = await send(q);
      const queueId = (await api("GET", queuePath(q))).json.result.queue_id as string;
      // The dead-lettering stored its copy in the dead-letter queue and stopped there (a reset
      // before the source's settle): the message is in both queues, and ready in its own again.
      const shard = (await storedMessages(q)).messages.find((m) => m.id === id)!.shard;
      const leased = await storageShardFor(env, shard).leaseMatching(queueId, {}, 1, 60_000);
      expect(leased.map((m) => m.id)).toEqual([id]);
      await moveMessages(env, "local", dlq, { queueId, shard }, leased);
      await storageShardFor(env, shard).releaseLeases(
        queueId,
        leased.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      );
      expect([await backlog(q), await backlog(dlq)]).toEqual([1, 1]);

      expect((await redrive(dlq, { target_queue: q })).json.result).toEqual({
        moved: 1,
        target_queue: q,
        remaining_matching: 0,
      });
      expect([await backlog(q), await backlog(dlq)]).toEqual([1, 0]);
      expect((await storedMessages(q)).messages.map((m) => m.id)).toEqual([id]);
      expect((await lookup(q, id)).json.result).toMatchObject({ id, state: "ready" });
      // Failed again, the copy the cut-off move left in the queue goes to the dead-letter queue
      // under the same move key as the first time: its first copy there has left, so it is stored.
      const again = await leaseAll(q);
      expect(again.map((m) => m.id)).toEqual([id]);
      await retryAll(q, again);
      expect([await backlog(q), await backlog(dlq)]).toEqual([0, 1]);
      expect((await storedMessages(dlq)).messages.map((m) => m.id)).toEqual([id]);
    },
  );

  it.each(sends.map(([what, send], i) => [what, send, i] as const))(
    "sent with %s, dead-lettered a second time after a redrive, is held by the dead-letter queue",
    async (_what, send, i) => {
      const [q, dlq] = [`mv-twice-${i}`, `mv-twice-${i}-dlq`];
      await pair(q, dlq);
      const id = await send(q);
      await failOnce(q, id);
      expect((await redrive(dlq, { target_queue: q })).json.result.moved).toBe(1);
      await failOnce(q, id);

      expect([await backlog(q), await backlog(dlq)]).toEqual([0, 1]);
      expect((await storedMessages(dlq)).messages.map((m) => m.id)).toEqual([id]);
      expect((await lookup(q, id)).json.result).toMatchObject({ id, state: "dead_lettered", dead_letter_queue: dlq });
      // And round again: every move is a new copy, every one is stored.
      expect((await redrive(dlq, { target_queue: q })).json.result.moved).toBe(1);
      expect((await leaseAll(q)).map((m) => m.id)).toEqual([id]);
    },
  );

  it.each(sends.map(([what, send], i) => [what, send, i] as const))(
    "sent with %s, whose redrive was cut off before the dead-letter queue let go, is held once after it is dead-lettered and redriven again",
    async (_what, send, i) => {
      const [q, dlq] = [`mv-redrive-cut-${i}`, `mv-redrive-cut-${i}-dlq`];
      await pair(q, dlq);
      const id = await send(q);
      await failOnce(q, id);
      // The redrive stored its copy in the queue and stopped there: the message is in both queues.
      const dlqId = (await api("GET", queuePath(dlq))).json.result.queue_id as string;
      const shard = (await storedMessages(dlq)).messages.find((m) => m.id === id)!.shard;
      const leased = await storageShardFor(env, shard).leaseMatching(dlqId, {}, 1, 60_000);
      await moveMessages(env, "local", q, { queueId: dlqId, shard }, leased);
      await storageShardFor(env, shard).releaseLeases(
        dlqId,
        leased.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      );
      expect([await backlog(q), await backlog(dlq)]).toEqual([1, 1]);
      // Its copy in the queue fails out: the dead-letter queue still holds it, so it is not stored twice there.
      await failOnce(q, id);
      expect([await backlog(q), await backlog(dlq)]).toEqual([0, 1]);
      // The redrive again writes the same move as the cut-off one: the copy it stored has left, so it is stored again.
      expect((await redrive(dlq, { target_queue: q })).json.result.moved).toBe(1);
      expect([await backlog(q), await backlog(dlq)]).toEqual([1, 0]);
      expect((await leaseAll(q)).map((m) => m.id)).toEqual([id]);
    },
  );
});

/** Messages leased from one shard of `queue`, as a mover holds them. */
async function leasedFrom(
  queue: string,
  count: number,
): Promise<{ shard: string; queueId: string; messages: LeasedMessage[] }> {
  const queueId = (await api("GET", queuePath(queue))).json.result.queue_id as string;
  const shard = (await coordinatorFor(env, queueId).shardMap())!.shards[0]!.name;
  const messages: EncodedMessage[] = Array.from({ length: count }, (_, i) => {
    const body = utf8.encode(JSON.stringify(`${queue} ${i}`));
    return {
      id: `${crc32(body).toString(16)}${i}`.padEnd(32, "0"),
      body,
      contentType: "json",
      delayMs: 0,
      checksum: crc32(body),
    };
  });
  await storageShardFor(env, shard).append({ queueId, messages });
  const leased = await storageShardFor(env, shard).leaseMatching(queueId, {}, count, 60_000);
  expect(leased).toHaveLength(count);
  return { shard, queueId, messages: leased };
}

describe("the target of a move", () => {
  it("stores a move repeated after a crash once, and a later copy of the same message again", async () => {
    await createQueue("mv-repeat-src");
    await createQueue("mv-repeat-dst");
    const from = await leasedFrom("mv-repeat-src", 5);
    const source = { queueId: from.queueId, shard: from.shard };
    await moveMessages(env, "local", "mv-repeat-dst", source, from.messages);
    // The mover died before settling: the same copies are moved again, in another company.
    await moveMessages(env, "local", "mv-repeat-dst", source, [...from.messages].reverse());
    expect(await backlog("mv-repeat-dst")).toBe(5);

    // The same ids in new copies (a message that came back and left again) are new moves.
    const dst = (await storedMessages("mv-repeat-dst")).messages;
    await api("POST", `${queuePath("mv-repeat-dst")}/purge`, { delete_messages_permanently: true });
    expect(await backlog("mv-repeat-dst")).toBe(0);
    const again = from.messages.map((m, i) => ({ ...m, copyKey: `${m.copyKey}-later-${i}` }));
    await moveMessages(env, "local", "mv-repeat-dst", source, again);
    expect((await storedMessages("mv-repeat-dst")).messages.map((m) => m.id).sort()).toEqual(
      dst.map((m) => m.id).sort(),
    );
  });

  it("stores a moved message whose id the shard remembers from a send", async () => {
    const q = await createQueue("mv-remembered");
    const shard = (await coordinatorFor(env, q.queue_id).shardMap())!.shards[0]!.name;
    const body = utf8.encode('"remembered"');
    const sent: EncodedMessage = { id: "b".repeat(32), body, contentType: "json", delayMs: 0, checksum: crc32(body) };
    const target = storageShardFor(env, shard);
    expect(await target.append({ queueId: q.queue_id, messages: [sent], remember: true })).toMatchObject({ stored: 1 });
    const [held] = await target.leaseMatching(q.queue_id, {}, 1, 60_000);
    await target.settle({
      queueId: q.queue_id,
      acks: [{ id: held!.id, leaseId: held!.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    // The same send again is the same message: skipped.
    expect(await target.append({ queueId: q.queue_id, messages: [sent], remember: true })).toMatchObject({
      stored: 0,
      duplicates: 1,
    });
    // A move of it from elsewhere is not: stored, and once only.
    const moved = { ...sent, moveKey: "elsewhere:wnam:0/7.42" };
    expect(await target.append({ queueId: q.queue_id, messages: [moved], remember: true, dedupe: true })).toMatchObject(
      { stored: 1 },
    );
    expect(await target.append({ queueId: q.queue_id, messages: [moved], remember: true, dedupe: true })).toMatchObject(
      { stored: 0, duplicates: 1 },
    );
  });

  it("refuses a move into the queue the messages come from, storing nothing", async () => {
    await createQueue("mv-self");
    const from = await leasedFrom("mv-self", 2);
    await expect(
      moveMessages(env, "local", from.queueId, { queueId: from.queueId, shard: from.shard }, from.messages),
    ).rejects.toThrow(/another queue/);
    await expect(
      moveMessages(env, "local", "mv-self", { queueId: from.queueId, shard: from.shard }, from.messages),
    ).rejects.toThrow(/another queue/);
    expect(await backlog("mv-self")).toBe(2);
  });
});
