/**
 * Redriving a dead-letter queue over HTTP: everything or what a filter matches moved back to the
 * queue that dead-letters into it, ids kept and attempts reset; a move cut off half-way finished
 * without copies; the rate kept to; bad requests and ambiguous targets refused.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { moveMessages } from "../../src/routing/move-messages";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { api, backlog, createQueue, queuePath, storedMessages } from "./helpers";
import { deadLetter, encoded, opsQueue, redrive, withDeadLetters } from "./operations-helpers";

// A queue of its own for each refusal, named by this count.
let seq = 0;

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
