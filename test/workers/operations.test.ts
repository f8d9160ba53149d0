/**
 * Operations on a queue's messages over HTTP: purge, lookup by id, cancel, and what answers them on
 * queues one cannot reach. Redriving a dead-letter queue: redrive.test.ts.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { purgeShards } from "../../broker/http/operations-api";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { LeaseRequest } from "../../src/kernel/protocol";
import { api, backlog, createQueue, OTHER_TOKEN, queuePath, send, storedMessages } from "./helpers";
import { deadLetter, encoded, opsQueue, withDeadLetters } from "./operations-helpers";

const lookup = (q: string, id: string) => api("GET", `${queuePath(q)}/messages/${id}`);
const cancel = (q: string, id: string) => api("DELETE", `${queuePath(q)}/messages/${id}`);
const purge = (q: string, body: unknown = { delete_messages_permanently: true }) =>
  api("POST", `${queuePath(q)}/purge`, body);
const leaseAll = (queueId: string, leaseMs = 10_000): LeaseRequest => ({
  queueId,
  limit: 100,
  leaseMs,
  maxWaitMs: 0,
  retentionMs: 345_600_000,
});

async function sumTotals(shards: string[]) {
  const all = await Promise.all(shards.map((s) => storageShardFor(env, s).stats()));
  return {
    backlogCount: all.reduce((n, s) => n + s.backlogCount, 0),
    backlogBytes: all.reduce((n, s) => n + s.backlogBytes, 0),
    purged: all.reduce((n, s) => n + (s.totals.purged ?? 0), 0),
    cancelled: all.reduce((n, s) => n + (s.totals.cancelled ?? 0), 0),
  };
}

// A queue of its own for each refusal, named by this count.
let seq = 0;

describe("purging a queue", () => {
  it("removes ready, delayed and leased messages on every shard; counters end at exactly 0 and later sends work", async () => {
    const q = await opsQueue("purge-all");
    await api("POST", `${queuePath("purge-all")}/messages/batch`, {
      messages: Array.from({ length: 8 }, (_, i) => ({ body: `ready ${i}` })),
    });
    for (let i = 0; i < 3; i++) await send("purge-all", `later ${i}`, { delay_seconds: 60 });
    const leases = await Promise.all(
      q.shards.map((s) => storageShardFor(env, s).lease({ ...leaseAll(q.queue_id), limit: 1 })),
    );
    const leased = leases.flatMap((r, i) => r.messages.map((m) => ({ shard: q.shards[i]!, m })));
    expect(leased.length).toBeGreaterThan(0);

    const res = await purge("purge-all");
    expect(res.status).toBe(200);
    // The queue, as Cloudflare's purge answers it, with the counts beside its fields.
    expect(res.json.result).toMatchObject({ queue_name: "purge-all", purged: 11, completed: true });
    expect(await sumTotals(q.shards)).toEqual({ backlogCount: 0, backlogBytes: 0, purged: 11, cancelled: 0 });
    expect((await api("GET", `${queuePath("purge-all")}/metrics`)).json.result).toMatchObject({
      backlog_count: 0,
      backlog_bytes: 0,
      oldest_message_timestamp_ms: null,
    });
    expect((await storedMessages("purge-all")).messages).toEqual([]);
    // A consumer's ack for a purged message finds nothing.
    const { shard, m } = leased[0]!;
    const late = await storageShardFor(env, shard).settle({
      queueId: q.queue_id,
      acks: [{ id: m.id, leaseId: m.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(late.stale).toEqual([m.id]);

    const again = (await send("purge-all", "after")).json.result.message_id;
    expect(await backlog("purge-all")).toBe(1);
    expect((await lookup("purge-all", again)).json.result.state).toBe("ready");
    expect((await purge("purge-all")).json.result).toMatchObject({ purged: 1, completed: true });
    expect((await purge(q.queue_id)).json.result).toMatchObject({ purged: 0, completed: true });
  });

  it("deletes in bounded steps per shard, and answers completed: false when the request's budget runs out", async () => {
    const q = await opsQueue("purge-steps");
    const shard = storageShardFor(env, q.shards[0]!);
    await shard.append({ queueId: q.queue_id, messages: Array.from({ length: 12 }, () => encoded(0)) });
    expect(await shard.purge(q.queue_id, 5)).toEqual({ deleted: 5, more: true });
    expect(await shard.purge(q.queue_id, 5)).toEqual({ deleted: 5, more: true });
    expect(await shard.purge(q.queue_id, 5)).toEqual({ deleted: 2, more: false });

    await shard.append({ queueId: q.queue_id, messages: Array.from({ length: 10 }, () => encoded(0)) });
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    // Every shard takes a call at once (the other three are empty); then three more on this one, then the budget is spent.
    expect(await purgeShards(env, map, { perCall: 2, maxCalls: q.shards.length + 2 })).toEqual({
      purged: 6,
      completed: false,
    });
    expect(await backlog("purge-steps")).toBe(4);
    expect((await purge("purge-steps")).json.result).toMatchObject({ purged: 4, completed: true });
    expect(await sumTotals(q.shards)).toMatchObject({ backlogCount: 0, backlogBytes: 0, purged: 22 });
  });

  it.each([
    [{}, "delete_messages_permanently", "is required"],
    [{ delete_messages_permanently: false }, "delete_messages_permanently", "must be true"],
    [{ delete_messages_permanently: "true" }, "delete_messages_permanently", "must be true"],
    [{ delete_messages_permanently: true, force: true }, "force", "not a known field"],
    [null, "body", "required"],
  ])("refuses %j with 400 naming %s, deleting nothing", async (body, field, text) => {
    const name = `purge-bad-${seq++}`;
    await createQueue(name);
    await send(name, "kept");
    // null: no body at all.
    const res = body === null ? await api("POST", `${queuePath(name)}/purge`) : await purge(name, body);
    expect(res.status).toBe(400);
    expect(res.json.errors[0]).toMatchObject({ field });
    expect(res.json.errors[0].message).toContain(text);
    expect(await backlog(name)).toBe(1);
  });
});

describe("looking up a message by id", () => {
  it("reports ready, delayed and leased as the message moves between them", async () => {
    const q = await opsQueue("lookup-states");
    const t0 = q.clock.now();
    const id = (await send("lookup-states", { n: 1 })).json.result.message_id;
    const ready = await lookup("lookup-states", id);
    expect(ready.status).toBe(200);
    expect(ready.json.result).toEqual({
      id,
      state: "ready",
      attempts: 0,
      timestamp_ms: t0,
      visible_at_ms: t0,
      size: 7,
      content_type: "json",
      shard: expect.any(String),
    });
    const shard = storageShardFor(env, ready.json.result.shard);
    expect(q.shards).toContain(ready.json.result.shard);

    const delayed = (await send("lookup-states", "soon", { content_type: "text", delay_seconds: 30 })).json.result
      .message_id;
    expect((await lookup("lookup-states", delayed)).json.result).toMatchObject({
      state: "delayed",
      visible_at_ms: t0 + 30_000,
      content_type: "text",
    });
    q.clock.advance(30_000);
    expect((await lookup("lookup-states", delayed)).json.result.state).toBe("ready");

    const m = (await shard.lease(leaseAll(q.queue_id))).messages.find((x) => x.id === id)!;
    expect((await lookup("lookup-states", id)).json.result).toMatchObject({
      state: "leased",
      attempts: 1,
      visible_at_ms: q.clock.now() + 10_000,
    });
    await shard.settle({
      queueId: q.queue_id,
      acks: [],
      retries: [{ id, leaseId: m.leaseId, delayMs: 5000 }],
      deadLettered: [],
      dropped: [],
    });
    expect((await lookup("lookup-states", id)).json.result).toMatchObject({ state: "delayed", attempts: 1 });
    q.clock.advance(5000);
    expect((await lookup("lookup-states", id)).json.result.state).toBe("ready");
    // A lease that ran out holds nothing: the message is ready for the next consumer.
    await shard.lease(leaseAll(q.queue_id));
    expect((await lookup(q.queue_id, id)).json.result.state).toBe("leased");
    q.clock.advance(10_000);
    expect((await lookup(q.queue_id, id)).json.result).toMatchObject({ state: "ready", attempts: 2 });
  });

  it("finds a message its consumer gave up on in the dead-letter queue, as dead_lettered", async () => {
    await withDeadLetters("lookup-src", "lookup-src-dead");
    const [id] = await deadLetter("lookup-src", 1);
    const res = await lookup("lookup-src", id!);
    expect(res.status).toBe(200);
    // The dead-letter copy starts again: no delivery there yet.
    expect(res.json.result).toMatchObject({
      id,
      state: "dead_lettered",
      dead_letter_queue: "lookup-src-dead",
      content_type: "json",
      attempts: 0,
    });
    expect((await lookup("lookup-src-dead", id!)).json.result).toMatchObject({ id, state: "ready" });
    expect((await cancel("lookup-src", id!)).status).toBe(404);
  });

  it("answers 404 naming message_id for an unknown id, and 400 for one that is not 32 lowercase hex", async () => {
    await createQueue("lookup-bad");
    for (const res of [await lookup("lookup-bad", "0".repeat(32)), await cancel("lookup-bad", "f".repeat(32))]) {
      expect(res.status).toBe(404);
      expect(res.json.errors[0].field).toBe("message_id");
    }
    for (const bad of ["xyz", "A".repeat(32), "0".repeat(31), "0".repeat(33), "g".repeat(32), "%E0%A4%A"]) {
      for (const res of [await lookup("lookup-bad", bad), await cancel("lookup-bad", bad)]) {
        expect(res.status).toBe(400);
        expect(res.json.errors[0].field).toBe("message_id");
      }
    }
  });
});

describe("cancelling a message", () => {
  it("deletes it whether ready, delayed or leased, counts it, and a later ack finds nothing", async () => {
    const q = await opsQueue("cancel-any");
    const leasedId = (await send("cancel-any", "leased")).json.result.message_id;
    const shardName = (await lookup("cancel-any", leasedId)).json.result.shard;
    const held = (await storageShardFor(env, shardName).lease(leaseAll(q.queue_id))).messages[0]!;
    const readyId = (await send("cancel-any", "ready")).json.result.message_id;
    const delayedId = (await send("cancel-any", "delayed", { delay_seconds: 600 })).json.result.message_id;
    const keptId = (await send("cancel-any", "kept")).json.result.message_id;
    expect(await backlog("cancel-any")).toBe(4);

    for (const id of [leasedId, readyId, delayedId]) {
      const res = await cancel("cancel-any", id);
      expect(res.status).toBe(200);
      expect(res.json.result).toEqual({ id, cancelled: true });
      expect((await lookup("cancel-any", id)).status).toBe(404);
      expect((await cancel("cancel-any", id)).status).toBe(404);
    }
    const kept = (await storedMessages("cancel-any")).messages;
    expect(kept.map((m) => m.id)).toEqual([keptId]);
    expect(await sumTotals(q.shards)).toEqual({
      backlogCount: 1,
      backlogBytes: kept[0]!.size,
      purged: 0,
      cancelled: 3,
    });
    const late = await storageShardFor(env, shardName).settle({
      queueId: q.queue_id,
      acks: [{ id: held.id, leaseId: held.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(late).toMatchObject({ acked: 0, stale: [leasedId] });
  });
});

describe("operations on queues one cannot reach", () => {
  const calls = (base: string): Array<[string, string, unknown]> => [
    ["GET", `${base}/messages/${"0".repeat(32)}`, undefined],
    ["DELETE", `${base}/messages/${"0".repeat(32)}`, undefined],
    ["POST", `${base}/purge`, { delete_messages_permanently: true }],
    ["POST", `${base}/redrive`, { target_queue: "ops-mine" }],
  ];

  it("answers 404 for a missing queue, another account's queue (by name or id), and another account's path", async () => {
    const mine = await createQueue("ops-mine");
    const id = (await send("ops-mine", "private")).json.result.message_id;
    const attempts: Array<Promise<{ status: number; json: { errors: Array<{ field?: string }> } }>> = [];
    for (const [method, path, body] of [
      ...calls(queuePath("ops-nowhere")),
      ...calls(queuePath(mine.queue_id, "other")),
      ...calls(queuePath("ops-mine", "other")),
    ]) {
      attempts.push(api(method, path, body, { token: OTHER_TOKEN }));
    }
    for (const [method, path, body] of calls(queuePath("ops-mine")))
      attempts.push(api(method, path, body, { token: OTHER_TOKEN }));
    for (const [method, path, body] of calls(queuePath("ops-nowhere"))) attempts.push(api(method, path, body));
    for (const res of await Promise.all(attempts)) expect(res.status).toBe(404);
    // Nothing of ours was touched, and our own calls reach it by name or id.
    expect((await lookup(mine.queue_id, id)).json.result).toMatchObject({ id, state: "ready" });
  });

  it("answers 405 naming the methods a known path takes, and leaves pull, ack, extend, batch, peek and purge to POST", async () => {
    await createQueue("ops-methods");
    const cases: Array<[string, string, string]> = [
      ["DELETE", "purge", "GET or POST"],
      ["DELETE", "redrive", "POST"],
      ["GET", "messages/peek", "POST"],
      ["DELETE", "messages/purge", "POST"],
      ["PUT", `messages/${"0".repeat(32)}`, "GET or DELETE"],
      ["GET", "messages/pull", "POST"],
      ["DELETE", "messages/ack", "POST"],
      ["GET", "messages/extend", "POST"],
      ["GET", "messages/batch", "POST"],
    ];
    for (const [method, path, allowed] of cases) {
      const res = await api(method, `${queuePath("ops-methods")}/${path}`);
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.json.errors[0].message).toContain(`use ${allowed}`);
    }
  });
});
