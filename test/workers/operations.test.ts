import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { purgeShards } from "../../broker/http/operations-api";
import { moveMessages } from "../../src/routing/move-messages";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage, LeaseRequest } from "../../src/kernel/protocol";
import { api, backlog, createQueue, OTHER_TOKEN, queuePath, send, shardsOnFakeClock, storedMessages } from "./helpers";

const lookup = (q: string, id: string) => api("GET", `${queuePath(q)}/messages/${id}`);
const cancel = (q: string, id: string) => api("DELETE", `${queuePath(q)}/messages/${id}`);
const purge = (q: string, body: unknown = { delete_messages_permanently: true }) =>
  api("POST", `${queuePath(q)}/purge`, body);
const redrive = (q: string, body?: unknown) => api("POST", `${queuePath(q)}/redrive`, body);
const leaseAll = (queueId: string, leaseMs = 10_000): LeaseRequest => ({
  queueId,
  limit: 100,
  leaseMs,
  maxWaitMs: 0,
  retentionMs: 345_600_000,
});

/** A queue whose storage shards all run on one fake clock. */
async function opsQueue(name: string, settings?: Record<string, unknown>) {
  const q = await createQueue(name, settings);
  return { ...q, ...(await shardsOnFakeClock(q.queue_id)) };
}

async function sumTotals(shards: string[]) {
  const all = await Promise.all(shards.map((s) => storageShardFor(env, s).stats()));
  return {
    backlogCount: all.reduce((n, s) => n + s.backlogCount, 0),
    backlogBytes: all.reduce((n, s) => n + s.backlogBytes, 0),
    purged: all.reduce((n, s) => n + (s.totals.purged ?? 0), 0),
    cancelled: all.reduce((n, s) => n + (s.totals.cancelled ?? 0), 0),
  };
}

const utf8 = new TextEncoder();
let seq = 0;
function encoded(attempts: number): EncodedMessage {
  const body = utf8.encode(`"dead ${seq}"`);
  return {
    id: (0xd0000000 + seq++).toString(16).padStart(32, "0"),
    body,
    contentType: "json",
    delayMs: 0,
    checksum: crc32(body),
    attempts,
  };
}

/** A queue with an http_pull consumer that dead-letters on the first failed delivery. */
async function withDeadLetters(source: string, dlq: string) {
  await createQueue(dlq);
  await createQueue(source);
  const res = await api("POST", `${queuePath(source)}/consumers`, {
    type: "http_pull",
    settings: { max_retries: 0 },
    dead_letter_queue: dlq,
  });
  expect(res.status).toBe(201);
}

/** Sends, pulls and fails each message once: it moves to the dead-letter queue, id kept. */
async function deadLetter(source: string, count: number): Promise<string[]> {
  const ids: string[] = (
    await api("POST", `${queuePath(source)}/messages/batch`, {
      messages: Array.from({ length: count }, (_, i) => ({ body: i })),
    })
  ).json.result.message_ids;
  const pulled = (await api("POST", `${queuePath(source)}/messages/pull`, { batch_size: 100 })).json.result
    .messages as Array<{ lease_id: string }>;
  expect(pulled).toHaveLength(count);
  const acked = await api("POST", `${queuePath(source)}/messages/ack`, {
    retries: pulled.map((m) => ({ lease_id: m.lease_id })),
  });
  expect(acked.json.result.warnings).toEqual({});
  return ids;
}

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

describe("redriving a dead-letter queue", () => {
  it("moves everything back to the queue that dead-letters into it, ids kept, attempts reset, nothing twice", async () => {
    await withDeadLetters("rd-src", "rd-src-dead");
    const ids = await deadLetter("rd-src", 7);
    expect(await backlog("rd-src")).toBe(0);
    expect(await backlog("rd-src-dead")).toBe(7);

    const res = await redrive("rd-src-dead", {});
    expect(res.status).toBe(200);
    expect(res.json.result).toEqual({ moved: 7, target_queue: "rd-src", remaining_matching: 0 });
    const back = (await storedMessages("rd-src")).messages;
    expect(back.map((m) => m.id).sort()).toEqual([...ids].sort());
    expect(back.every((m) => m.attempts === 0)).toBe(true);
    expect(await backlog("rd-src-dead")).toBe(0);

    // No body at all means the same; nothing is left to move, and nothing is copied twice.
    expect((await redrive("rd-src-dead")).json.result).toEqual({
      moved: 0,
      target_queue: "rd-src",
      remaining_matching: 0,
    });
    expect((await storedMessages("rd-src")).messages).toHaveLength(7);
    expect(await backlog("rd-src")).toBe(7);
    // Redriven messages are delivered again like new ones.
    const pulled = (await api("POST", `${queuePath("rd-src")}/messages/pull`, { batch_size: 100 })).json.result
      .messages;
    expect(pulled.map((m: { attempts: number }) => m.attempts)).toEqual(Array(7).fill(1));
  });

  it("moves only what a filter matches, by age and by attempts, up to a limit", async () => {
    const dlq = await opsQueue("rd-filter-dead");
    await createQueue("rd-filter-src");
    const shardA = storageShardFor(env, dlq.shards[0]!);
    const shardB = storageShardFor(env, dlq.shards[1]!);
    const [oldFew, oldMany] = [encoded(1), encoded(4)];
    await shardA.append({ queueId: dlq.queue_id, messages: [oldFew, oldMany] });
    dlq.clock.advance(3_600_000);
    const [newFew, newMany, newMost] = [encoded(1), encoded(4), encoded(9)];
    await shardB.append({ queueId: dlq.queue_id, messages: [newFew, newMany, newMost] });
    const to = { target_queue: "rd-filter-src" };
    const moved = async () => (await storedMessages("rd-filter-src")).messages.map((m) => m.id).sort();

    const older = await redrive("rd-filter-dead", { ...to, filter: { min_age_seconds: 1800 } });
    expect(older.json.result).toEqual({ moved: 2, target_queue: "rd-filter-src", remaining_matching: 0 });
    expect(await moved()).toEqual([oldFew.id, oldMany.id].sort());

    const few = await redrive("rd-filter-dead", { ...to, filter: { max_attempts: 2, max_age_seconds: 60 } });
    expect(few.json.result).toEqual({ moved: 1, target_queue: "rd-filter-src", remaining_matching: 0 });
    expect(await moved()).toContain(newFew.id);

    const limited = await redrive("rd-filter-dead", { ...to, filter: { min_attempts: 3 }, limit: 1 });
    expect(limited.json.result).toEqual({ moved: 1, target_queue: "rd-filter-src", remaining_matching: 1 });
    const rest = await redrive("rd-filter-dead", { ...to, filter: { min_attempts: 3, max_attempts: 9 } });
    expect(rest.json.result).toEqual({ moved: 1, target_queue: "rd-filter-src", remaining_matching: 0 });
    expect(await moved()).toEqual([oldFew.id, oldMany.id, newFew.id, newMany.id, newMost.id].sort());
    expect(await backlog("rd-filter-dead")).toBe(0);
  });

  it("finishes a move that stopped between writing and acking, storing each message once", async () => {
    const dlq = await opsQueue("rd-crash-dead");
    await createQueue("rd-crash-src");
    const shard = storageShardFor(env, dlq.shards[0]!);
    const all = [encoded(1), encoded(1), ...Array.from({ length: 10 }, () => encoded(2))];
    await shard.append({ queueId: dlq.queue_id, messages: all });
    // A redrive that died after its write: ten messages written (each placed by its id), never acked.
    const taken = await shard.leaseMatching(dlq.queue_id, { minAttempts: 2 }, 10, 60_000);
    for (const m of taken)
      await moveMessages(env, "local", "rd-crash-src", { queueId: dlq.queue_id, shard: dlq.shards[0]! }, [m]);
    dlq.clock.advance(60_000);
    // Their lease ran out: the next redrive moves them again, now behind two others in one batch.
    expect((await redrive("rd-crash-dead", { target_queue: "rd-crash-src" })).json.result).toMatchObject({
      moved: 12,
      remaining_matching: 0,
    });
    const stored = (await storedMessages("rd-crash-src")).messages.map((m) => m.id).sort();
    expect(stored).toEqual(all.map((m) => m.id).sort());
    expect(await backlog("rd-crash-src")).toBe(12);
  });

  it("keeps to messages_per_second by pausing between batches", async () => {
    const dlq = await createQueue("rd-rate-dead");
    await createQueue("rd-rate-src");
    const map = (await coordinatorFor(env, dlq.queue_id).shardMap())!;
    await storageShardFor(env, map.shards[0]!.name).append({
      queueId: dlq.queue_id,
      messages: Array.from({ length: 6 }, () => encoded(1)),
    });
    const started = Date.now();
    const res = await redrive("rd-rate-dead", { target_queue: "rd-rate-src", messages_per_second: 3 });
    expect(res.json.result).toEqual({ moved: 6, target_queue: "rd-rate-src", remaining_matching: 0 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
  });

  it.each([
    [{ limit: 0 }, "limit", "at least 1"],
    [{ limit: 10_001 }, "limit", "at most 10000"],
    [{ limit: 1.5 }, "limit", "whole number"],
    [{ messages_per_second: 0 }, "messages_per_second", "at least 1"],
    [{ messages_per_second: 5001 }, "messages_per_second", "at most 5000"],
    [{ filter: 3 }, "filter", "must be an object"],
    [{ filter: { min_age_seconds: -1 } }, "filter.min_age_seconds", "at least 0"],
    [{ filter: { max_attempts: "2" } }, "filter.max_attempts", "must be a number"],
    [{ filter: { oldest: 1 } }, "filter.oldest", "not a known field"],
    [
      { filter: { min_age_seconds: 10, max_age_seconds: 5 } },
      "filter.max_age_seconds",
      "at least filter.min_age_seconds",
    ],
    [{ filter: { min_attempts: 3, max_attempts: 2 } }, "filter.max_attempts", "at least filter.min_attempts"],
    [{ target_queue: "" }, "target_queue", "must not be empty"],
    [{ target_queue: 5 }, "target_queue", "queue name or id"],
    [{ target_queue: "$self" }, "target_queue", "another queue"],
    [{ to: "x" }, "to", "not a known field"],
    [{}, "target_queue", "no queue's consumer"],
  ])("refuses %j with 400 naming %s, moving nothing", async (body, field, text) => {
    const name = `rd-bad-${seq++}`;
    const dlq = await createQueue(name);
    const map = (await coordinatorFor(env, dlq.queue_id).shardMap())!;
    await storageShardFor(env, map.shards[0]!.name).append({ queueId: dlq.queue_id, messages: [encoded(1)] });
    const res = await redrive(name, JSON.parse(JSON.stringify(body).replace("$self", name)));
    expect(res.status).toBe(400);
    expect(res.json.errors[0].field).toBe(field);
    expect(res.json.errors[0].message).toContain(text);
    expect(await backlog(name)).toBe(1);
  });

  it("asks for target_queue when two queues dead-letter into the same one, and 404s an unknown target", async () => {
    await withDeadLetters("rd-two-a", "rd-two-dead");
    await createQueue("rd-two-b");
    await api("POST", `${queuePath("rd-two-b")}/consumers`, { type: "http_pull", dead_letter_queue: "rd-two-dead" });
    const res = await redrive("rd-two-dead", {});
    expect(res.status).toBe(400);
    expect(res.json.errors[0]).toMatchObject({ field: "target_queue" });
    expect(res.json.errors[0].message).toMatch(/"rd-two-a", "rd-two-b" all name/);
    const missing = await redrive("rd-two-dead", { target_queue: "rd-nowhere" });
    expect(missing.status).toBe(404);
    expect(missing.json.errors[0].field).toBe("target_queue");
    const chosen = await redrive("rd-two-dead", { target_queue: "rd-two-b" });
    expect(chosen.json.result).toEqual({ moved: 0, target_queue: "rd-two-b", remaining_matching: 0 });
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
