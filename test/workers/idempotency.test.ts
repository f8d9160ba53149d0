/**
 * Idempotent sends: an Idempotency-Key on POST .../messages and
 * .../messages/batch, and message ids chosen by the producer, store a message once
 * however often the request is retried, across shard-map changes, consumption and a
 * request that died half-way; the same key or id with a different request is refused.
 */
import { createExecutionContext, env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { bucketOf } from "../../src/routing/idempotent-send";
import { router } from "../../broker/http/router";
import { forgetShardMap } from "../../src/routing/shard-map-cache";
import { IDEMPOTENCY_WINDOW_MS, IN_PROGRESS_MS, type IdempotencyKeys } from "../../coordinator/idempotency-keys";
import { coordinatorFor, idempotencyKeysFor } from "../../src/kernel/addressing";
import { api, backlog, BASE, createQueue, queuePath, send, storedMessages, TOKEN } from "./helpers";
import type { KeyClaim } from "../../src/kernel/id-claims";
import type { AppendRequest } from "../../src/kernel/protocol";
import { sleep } from "../../src/kernel/sleep";

const KEY = "idempotency-key";
/** `send`'s options for a request under Idempotency-Key `key`. */
const keyed = (key: string) => ({ headers: { [KEY]: key } });
const sendBatch = (q: string, body: unknown, key?: string) =>
  api("POST", `${queuePath(q)}/messages/batch`, body, { headers: key === undefined ? {} : { [KEY]: key } });
const hexId = (n: number) => n.toString(16).padStart(32, "0");

async function storedIds(q: string): Promise<string[]> {
  return (await storedMessages(q)).messages.map((m) => m.id).sort();
}

/** Moves the clock of the object holding `key` of a queue by `ms`. */
async function shiftKeyClock(queueId: string, key: string, ms: number) {
  const target = idempotencyKeysFor(env, queueId, bucketOf(key));
  await runInDurableObject(target, (obj: IdempotencyKeys) => {
    obj.clock = { now: () => Date.now() + ms };
  });
  return target;
}

/**
 * POST .../messages with `key` through a broker whose IdempotencyKeys never hear that
 * the send completed: the request stored its message and died before marking its key
 * done (as a storage shard reset after the write and before the reply makes it do).
 */
/** IdempotencyKeys objects that never hear that a send completed. */
const lostComplete = {
  idFromName: (name: string) => env.IDEMPOTENCY_KEYS.idFromName(name),
  get: (id: DurableObjectId) => {
    const target = env.IDEMPOTENCY_KEYS.get(id);
    return {
      claim: (claims: KeyClaim[], token: string) => target.claim(claims, token),
      release: (keys: string[], token: string, sent: boolean) => target.release(keys, token, sent),
      complete: () => Promise.reject(new Error("isolate gone")),
    };
  },
};

async function sendDyingBeforeDone(q: string, key: string): Promise<Response> {
  const request = new Request(`${BASE}${queuePath(q)}/messages`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", [KEY]: key },
    body: JSON.stringify({ body: "once" }),
  });
  return router.fetch(
    request,
    { ...env, IDEMPOTENCY_KEYS: lostComplete as unknown as typeof env.IDEMPOTENCY_KEYS },
    createExecutionContext(),
  );
}

/** Pulls every ready message of a queue with a pull consumer and acks it. */
async function consumeAll(q: string) {
  const pulled = await api("POST", `${queuePath(q)}/messages/pull`, { batch_size: 100 });
  const acks = pulled.json.result.messages.map((m: { lease_id: string }) => ({ lease_id: m.lease_id }));
  expect((await api("POST", `${queuePath(q)}/messages/ack`, { acks })).json.result.ackCount).toBe(acks.length);
}

describe("Idempotency-Key", () => {
  it("stores a message once however often the request is retried, answering with the first id each time", async () => {
    await createQueue("idem-single");
    const first = await send("idem-single", { order: 1 }, {}, keyed("order-1"));
    expect(first.status).toBe(200);
    for (let i = 0; i < 5; i++) {
      const again = await send("idem-single", { order: 1 }, {}, keyed("order-1"));
      expect(again.status).toBe(200);
      expect(again.json.result.message_id).toBe(first.json.result.message_id);
    }
    expect(await storedIds("idem-single")).toEqual([first.json.result.message_id]);
    // Another key is another message.
    expect((await send("idem-single", { order: 1 }, {}, keyed("order-1b"))).json.result.message_id).not.toBe(
      first.json.result.message_id,
    );
    expect(await backlog("idem-single")).toBe(2);
  });

  it("stores a batch once, in order, when the same request arrives many times at once", async () => {
    await createQueue("idem-batch");
    const body = {
      messages: [{ body: "a" }, { body: "b", delay_seconds: 5 }, { body: "c", content_type: "text" }],
      delay_seconds: 1,
    };
    const answers = await Promise.all(Array.from({ length: 8 }, () => sendBatch("idem-batch", body, "batch-1")));
    const ok = answers.filter((a) => a.status === 200);
    expect(ok.length).toBeGreaterThan(0);
    for (const a of answers.filter((x) => x.status !== 200)) {
      // Arrived while the first was storing: told to come back, storing nothing.
      expect(a.status).toBe(409);
      expect(a.json.errors[0].field).toBe(KEY);
      expect(Number(a.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    }
    const ids = ok[0]!.json.result.message_ids as string[];
    for (const a of ok) expect(a.json.result.message_ids).toEqual(ids);
    const later = await sendBatch("idem-batch", body, "batch-1");
    expect(later.json.result.message_ids).toEqual(ids);
    expect(await storedIds("idem-batch")).toEqual([...ids].sort());
  });

  it.each([
    ["another body", { body: { order: 2 } }, "messages"],
    ["another delay", { body: { order: 1 }, delay_seconds: 10 }, "messages"],
    ["another content type", { body: '{"order":1}', content_type: "text" }, "messages"],
    ["the batch route", { messages: [{ body: { order: 1 } }] }, "messages/batch"],
  ])("refuses the same key with %s: 409 naming idempotency-key, nothing stored", async (_what, body, route) => {
    const q = `idem-mismatch-${Math.random().toString(16).slice(2, 8)}`;
    await createQueue(q);
    const first = await send(q, { order: 1 }, {}, keyed("reused"));
    const res = await api("POST", `${queuePath(q)}/${route}`, body, { headers: { [KEY]: "reused" } });
    expect(res.status).toBe(409);
    expect(res.json).toMatchObject({ success: false, result: null });
    expect(res.json.errors[0].field).toBe(KEY);
    expect(await storedIds(q)).toEqual([first.json.result.message_id]);
  });

  it("keeps keys per queue: the same key on two queues is two messages", async () => {
    await createQueue("idem-per-queue-a");
    await createQueue("idem-per-queue-b");
    const a = await send("idem-per-queue-a", 1, {}, keyed("shared-key"));
    const b = await send("idem-per-queue-b", 1, {}, keyed("shared-key"));
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(a.json.result.message_id).not.toBe(b.json.result.message_id);
  });

  it("answers a retry after the message was consumed and acked, storing nothing again", async () => {
    await createQueue("idem-consumed");
    expect((await api("POST", `${queuePath("idem-consumed")}/consumers`, { type: "http_pull" })).status).toBe(201);
    const first = await sendBatch("idem-consumed", { messages: [{ body: 1 }, { body: 2 }] }, "consumed");
    await consumeAll("idem-consumed");
    expect(await backlog("idem-consumed")).toBe(0);
    const again = await sendBatch("idem-consumed", { messages: [{ body: 1 }, { body: 2 }] }, "consumed");
    expect(again.json.result.message_ids).toEqual(first.json.result.message_ids);
    expect(await backlog("idem-consumed")).toBe(0);
  });

  it("answers a retry after the shard that took the message stopped taking sends and the broker forgot its map", async () => {
    const q = await createQueue("idem-drained");
    const first = await send("idem-drained", "x", {}, keyed("drained"));
    const holder = (await storedMessages("idem-drained")).messages[0]!.shard;
    await coordinatorFor(env, q.queue_id).setShardState(holder, "draining");
    // As a fresh broker isolate would: no cached map.
    forgetShardMap("local", "idem-drained", q.queue_id);
    const again = await send("idem-drained", "x", {}, keyed("drained"));
    expect(again.json.result.message_id).toBe(first.json.result.message_id);
    expect(await storedIds("idem-drained")).toEqual([first.json.result.message_id]);
  });

  it("stores nothing again when the request that stored died and the shard it stored on stopped taking sends before the retry", async () => {
    // Found by the fault harness (abort-append during a stale shard map): the retry placed
    // the id over a different map, on a shard that had never seen it, and stored a copy
    // that was delivered again after the first was acked.
    const q = await createQueue("idem-died-moved");
    const res = await sendDyingBeforeDone("idem-died-moved", "moved");
    const id = ((await res.json()) as { result: { message_id: string } }).result.message_id;
    const holder = (await storedMessages("idem-died-moved")).messages[0]!.shard;
    await coordinatorFor(env, q.queue_id).setShardState(holder, "draining");
    forgetShardMap("local", "idem-died-moved", q.queue_id);

    await shiftKeyClock(q.queue_id, "key:moved", IN_PROGRESS_MS + 1000);
    const again = await send("idem-died-moved", "once", {}, keyed("moved"));
    expect(again.status).toBe(200);
    expect(again.json.result.message_id).toBe(id);
    expect((await storedMessages("idem-died-moved")).messages.map((m) => [m.id, m.shard])).toEqual([[id, holder]]);
  });

  it("asks retired shards too, and fails a retry it cannot check rather than store a second copy", async () => {
    const q = await createQueue("idem-died-retired");
    expect((await api("POST", `${queuePath("idem-died-retired")}/consumers`, { type: "http_pull" })).status).toBe(201);
    const res = await sendDyingBeforeDone("idem-died-retired", "retired");
    const id = ((await res.json()) as { result: { message_id: string } }).result.message_id;
    const holder = (await storedMessages("idem-died-retired")).messages[0]!.shard;
    await consumeAll("idem-died-retired");
    // Empty, drained and retired: it takes nothing and serves nothing, but still remembers the id.
    await coordinatorFor(env, q.queue_id).setShardState(holder, "draining");
    await coordinatorFor(env, q.queue_id).setShardState(holder, "retired");
    forgetShardMap("local", "idem-died-retired", q.queue_id);
    await shiftKeyClock(q.queue_id, "key:retired", IN_PROGRESS_MS + 1000);

    // A shard that cannot answer: the retry is refused, nothing stored, the key kept.
    const failing = {
      idFromName: (name: string) => env.STORAGE_SHARD.idFromName(name),
      get: (shardId: DurableObjectId) => {
        const target = env.STORAGE_SHARD.get(shardId);
        return new Proxy(target, {
          get: (t, prop) =>
            prop === "heldIds" ? () => Promise.reject(new Error("shard reset")) : Reflect.get(t, prop),
        });
      },
    };
    const request = new Request(`${BASE}${queuePath("idem-died-retired")}/messages`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", [KEY]: "retired" },
      body: JSON.stringify({ body: "once" }),
    });
    const refused = await router.fetch(
      request,
      { ...env, STORAGE_SHARD: failing as unknown as typeof env.STORAGE_SHARD },
      createExecutionContext(),
    );
    expect(refused.status).toBe(503);
    expect(await backlog("idem-died-retired")).toBe(0);

    const again = await send("idem-died-retired", "once", {}, keyed("retired"));
    expect(again.status).toBe(200);
    expect(again.json.result.message_id).toBe(id);
    // Consumed once, and not stored again on the shards that take sends now.
    expect(await backlog("idem-died-retired")).toBe(0);
    expect(await storedIds("idem-died-retired")).toEqual([]);
  });

  it("stores each producer-chosen id of a retried batch once when the map changed between the attempts", async () => {
    const q = await createQueue("idem-ids-moved");
    const ids = Array.from({ length: 20 }, (_, i) => hexId(1000 + i));
    const messages = ids.map((id) => ({ body: id, id }));
    // The first attempt stored every message and died before marking the ids done.
    const first = new Request(`${BASE}${queuePath("idem-ids-moved")}/messages/batch`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ messages }),
    });
    expect(
      (
        await router.fetch(
          first,
          { ...env, IDEMPOTENCY_KEYS: lostComplete as unknown as typeof env.IDEMPOTENCY_KEYS },
          createExecutionContext(),
        )
      ).status,
    ).toBe(200);
    const before = await storedMessages("idem-ids-moved");
    expect(before.messages.map((m) => m.id).sort()).toEqual(ids);
    // One shard stops taking sends: the ids it held, and most others, now pick another shard.
    const shards = before.messages.map((m) => m.shard);
    const busiest = [...new Set(shards)].sort(
      (a, b) => shards.filter((s) => s === b).length - shards.filter((s) => s === a).length,
    )[0]!;
    await coordinatorFor(env, q.queue_id).setShardState(busiest, "draining");
    forgetShardMap("local", "idem-ids-moved", q.queue_id);
    for (const id of ids) await shiftKeyClock(q.queue_id, `id:${id}`, IN_PROGRESS_MS + 1000);

    const again = await sendBatch("idem-ids-moved", { messages });
    expect(again.status).toBe(200);
    expect(again.json.result.message_ids).toEqual(ids);
    const after = await storedMessages("idem-ids-moved");
    expect(after.messages.map((m) => [m.id, m.shard]).sort()).toEqual(
      before.messages.map((m) => [m.id, m.shard]).sort(),
    );
  });

  it("answers a send that failed on one shard only once its writes to the others are done, so a retry cannot race them", async () => {
    await createQueue("idem-slow-group");
    const ids = Array.from({ length: 20 }, (_, i) => hexId(2000 + i));
    let failedOne = false;
    let pending = 0;
    const slowOrFailing = {
      idFromName: (name: string) => env.STORAGE_SHARD.idFromName(name),
      get: (shardId: DurableObjectId) => {
        const target = env.STORAGE_SHARD.get(shardId);
        const append = async (req: AppendRequest) => {
          if (!failedOne) {
            failedOne = true;
            throw new Error("shard reset");
          }
          pending++;
          await sleep(200);
          const result = await target.append(req);
          pending--;
          return result;
        };
        return new Proxy(target, { get: (t, prop) => (prop === "append" ? append : Reflect.get(t, prop)) });
      },
    };
    const request = new Request(`${BASE}${queuePath("idem-slow-group")}/messages/batch`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ messages: ids.map((id) => ({ body: id, id })) }),
    });
    const res = await router.fetch(
      request,
      { ...env, STORAGE_SHARD: slowOrFailing as unknown as typeof env.STORAGE_SHARD },
      createExecutionContext(),
    );
    expect(res.status).toBe(503);
    expect(pending).toBe(0);
  });

  it("takes over the key of a request that died after storing, once IN_PROGRESS_MS has passed, storing nothing twice", async () => {
    const q = await createQueue("idem-died");
    // The first request stores its message and dies before marking its key done.
    const res = await sendDyingBeforeDone("idem-died", "died");
    expect(res.status).toBe(200);
    const id = ((await res.json()) as { result: { message_id: string } }).result.message_id;

    // A retry while the claim is young may be racing the first request: told to wait.
    const early = await send("idem-died", "once", {}, keyed("died"));
    expect(early.status).toBe(409);
    expect(early.json.errors[0].field).toBe(KEY);
    expect(Number(early.headers.get("retry-after"))).toBeLessThanOrEqual(IN_PROGRESS_MS / 1000);

    // Later, the retry takes the key over and writes the same id to the same shard, which skips it.
    await shiftKeyClock(q.queue_id, "key:died", IN_PROGRESS_MS + 1000);
    const late = await send("idem-died", "once", {}, keyed("died"));
    expect(late.status).toBe(200);
    expect(late.json.result.message_id).toBe(id);
    expect(await storedIds("idem-died")).toEqual([id]);
    // And from then on the key is done.
    expect((await send("idem-died", "once", {}, keyed("died"))).json.result.message_id).toBe(id);
    expect(await storedIds("idem-died")).toEqual([id]);
  });

  it("stores nothing again when the first request stored, died before marking its key done, and its message was acked before the retry", async () => {
    // Found by the fault harness (abort-append with keyed retries): the shard's check of
    // recent rows no longer finds an acked message, so shards remember sender-chosen ids.
    const q = await createQueue("idem-acked-then-retried");
    expect((await api("POST", `${queuePath("idem-acked-then-retried")}/consumers`, { type: "http_pull" })).status).toBe(
      201,
    );
    const res = await sendDyingBeforeDone("idem-acked-then-retried", "consumed");
    const id = ((await res.json()) as { result: { message_id: string } }).result.message_id;

    // A consumer takes it and acks it: confirmed.
    const pulled = await api("POST", `${queuePath("idem-acked-then-retried")}/messages/pull`, { batch_size: 10 });
    expect(pulled.json.result.messages.map((m: { id: string }) => m.id)).toEqual([id]);
    const acked = await api("POST", `${queuePath("idem-acked-then-retried")}/messages/ack`, {
      acks: [{ lease_id: pulled.json.result.messages[0].lease_id }],
    });
    expect(acked.json.result).toMatchObject({ ackCount: 1, warnings: {} });

    // The producer, which never got its answer, sends again with the key once the claim is free.
    await shiftKeyClock(q.queue_id, "key:consumed", IN_PROGRESS_MS + 1000);
    const again = await send("idem-acked-then-retried", "once", {}, keyed("consumed"));
    expect(again.json.result.message_id).toBe(id);
    // Nothing stored again: the message was delivered and acked once.
    expect(await backlog("idem-acked-then-retried")).toBe(0);
  });

  it("does not use up the key of a request refused before storing", async () => {
    await createQueue("idem-refused");
    const taken = hexId(7);
    await send("idem-refused", "first", { id: taken });
    // The key is claimed, then the batch is refused for reusing an id with another body.
    const refused = await sendBatch(
      "idem-refused",
      { messages: [{ body: "other", id: taken }, { body: "new" }] },
      "fresh-key",
    );
    expect(refused.status).toBe(409);
    expect(refused.json.errors[0].field).toBe("messages[0].id");
    const ok = await sendBatch("idem-refused", { messages: [{ body: "something else" }] }, "fresh-key");
    expect(ok.status).toBe(200);
    expect(await backlog("idem-refused")).toBe(2);
  });

  it("forgets a key after 24 hours, and an alarm sweeps it away", async () => {
    const q = await createQueue("idem-expiry");
    const first = await send("idem-expiry", 1, {}, keyed("old-key"));
    const target = await shiftKeyClock(q.queue_id, "key:old-key", IDEMPOTENCY_WINDOW_MS + 1000);
    const reused = await send("idem-expiry", 2, {}, keyed("old-key"));
    expect(reused.status).toBe(200);
    expect(reused.json.result.message_id).not.toBe(first.json.result.message_id);
    await shiftKeyClock(q.queue_id, "key:old-key", 2 * IDEMPOTENCY_WINDOW_MS + 2000);
    expect(await runDurableObjectAlarm(target)).toBe(true);
    const left = await runInDurableObject(
      target,
      (_obj: IdempotencyKeys, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM keys").one().n,
    );
    expect(left).toBe(0);
  });
});

describe("message ids chosen by the producer", () => {
  it("stores a message under its id once however often it is sent", async () => {
    await createQueue("pid-single");
    const id = hexId(1);
    for (let i = 0; i < 4; i++) {
      const res = await send("pid-single", { n: 1 }, { id });
      expect(res.status).toBe(200);
      expect(res.json.result.message_id).toBe(id);
    }
    expect(await storedIds("pid-single")).toEqual([id]);
  });

  it("refuses an id sent again with another body: 409 naming the id, nothing stored", async () => {
    await createQueue("pid-mismatch");
    const id = hexId(2);
    await send("pid-mismatch", "one", { id });
    const single = await send("pid-mismatch", "two", { id });
    expect(single.status).toBe(409);
    expect(single.json.errors[0].field).toBe("id");
    const inBatch = await sendBatch("pid-mismatch", {
      messages: [
        { body: "new", id: hexId(3) },
        { body: "two", id },
      ],
    });
    expect(inBatch.status).toBe(409);
    expect(inBatch.json.errors[0].field).toBe("messages[1].id");
    expect(await storedIds("pid-mismatch")).toEqual([id]);
    // The refused batch used up none of its ids.
    expect((await send("pid-mismatch", "anything", { id: hexId(3) })).status).toBe(200);
  });

  it("stores a batch's messages once each: a retried batch stores nothing, a batch repeating one stores the others", async () => {
    await createQueue("pid-batch");
    const batch = { messages: [1, 2, 3].map((n) => ({ body: n, id: hexId(100 + n) })) };
    const first = await sendBatch("pid-batch", batch);
    expect(first.json.result.message_ids).toEqual([hexId(101), hexId(102), hexId(103)]);
    expect((await sendBatch("pid-batch", batch)).json.result.message_ids).toEqual(first.json.result.message_ids);
    const mixed = await sendBatch("pid-batch", {
      messages: [{ body: 2, id: hexId(102) }, { body: 4, id: hexId(104) }, { body: "no id" }],
    });
    expect(mixed.status).toBe(200);
    expect(mixed.json.result.message_ids.slice(0, 2)).toEqual([hexId(102), hexId(104)]);
    expect(await storedIds("pid-batch")).toEqual(
      [hexId(101), hexId(102), hexId(103), hexId(104), mixed.json.result.message_ids[2]].sort(),
    );
  });

  it("does not store an id again after its message was consumed", async () => {
    await createQueue("pid-consumed");
    await api("POST", `${queuePath("pid-consumed")}/consumers`, { type: "http_pull" });
    await send("pid-consumed", "x", { id: hexId(9) });
    await consumeAll("pid-consumed");
    expect((await send("pid-consumed", "x", { id: hexId(9) })).json.result.message_id).toBe(hexId(9));
    expect(await backlog("pid-consumed")).toBe(0);
  });
});
