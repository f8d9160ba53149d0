/**
 * Message ids are unique per queue, whoever chose them: an id
 * the service drew (by the broker for an Idempotency-Key send, by a storage shard for a
 * plain or keyed send) cannot be taken as a producer's own `id`. Sent again as one, it is
 * recognised: the same message answers 200 with that id and stores nothing, another body
 * is refused with 409 naming the id field, nothing stored.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { locate, shardNumber } from "../../src/kernel/ids";
import { forgetShardMap } from "../../src/routing/shard-map-cache";
import { api, backlog, createQueue, producer, queuePath, send } from "./helpers";

const sendBatch = (q: string, body: unknown, headers: Record<string, string> = {}) =>
  api("POST", `${queuePath(q)}/messages/batch`, body, { headers });

async function queueWithPuller(q: string) {
  await createQueue(q);
  expect((await api("POST", `${queuePath(q)}/consumers`, { type: "http_pull" })).status).toBe(201);
}

/** Pulls (and acks) every ready message; answers their ids and bodies. */
async function drain(q: string): Promise<Array<{ id: string; body: unknown }>> {
  const pulled = await api("POST", `${queuePath(q)}/messages/pull`, { batch_size: 100 });
  expect(pulled.status).toBe(200);
  const messages = pulled.json.result.messages as Array<{ id: string; body: unknown; lease_id: string }>;
  if (messages.length > 0) {
    const acked = await api("POST", `${queuePath(q)}/messages/ack`, {
      acks: messages.map((m) => ({ lease_id: m.lease_id })),
    });
    expect(acked.json.result.ackCount).toBe(messages.length);
  }
  // Pulled bodies are base64 of the bytes stored: JSON text here.
  return messages
    .map((m) => ({ id: m.id, body: JSON.parse(atob(m.body as string)) }))
    .sort((a, b) => a.id.localeCompare(b.id));
}

function expectConflictOn(res: { status: number; json: any }, field: string) {
  expect(res.status, JSON.stringify(res.json)).toBe(409);
  expect(res.json.success).toBe(false);
  expect(res.json.errors[0].field).toBe(field);
}

describe("an id drawn for an Idempotency-Key send", () => {
  it("sent again as a producer's id with another body is refused with 409 naming id, and only the first is delivered", async () => {
    const q = "ids-key-other-body";
    await queueWithPuller(q);
    const first = await send(q, "first", {}, { headers: { "idempotency-key": "k1" } });
    expect(first.status).toBe(200);
    const y = first.json.result.message_id as string;
    const second = await send(q, "second", { id: y });
    expectConflictOn(second, "id");
    expect(await backlog(q)).toBe(1);
    expect(await drain(q)).toEqual([{ id: y, body: "first" }]);
  });

  it("sent again as a producer's id with the same body answers 200 with that id and stores nothing", async () => {
    const q = "ids-key-same-body";
    await queueWithPuller(q);
    const y = (await send(q, "first", {}, { headers: { "idempotency-key": "k1" } })).json.result.message_id as string;
    const again = await send(q, "first", { id: y });
    expect(again.status).toBe(200);
    expect(again.json.result.message_id).toBe(y);
    expect(await backlog(q)).toBe(1);
    expect(await drain(q)).toEqual([{ id: y, body: "first" }]);
  });

  it("of a keyed message is refused as a keyless producer's id with another body", async () => {
    const q = "ids-key-keyed";
    await queueWithPuller(q);
    const y = (await send(q, "first", { ordering_key: "acct-7" }, { headers: { "idempotency-key": "k1" } })).json.result
      .message_id as string;
    expectConflictOn(await send(q, "second", { id: y }), "id");
    expectConflictOn(
      await sendBatch(q, { messages: [{ body: "fine" }, { id: y, body: "second", ordering_key: "acct-7" }] }),
      "messages[1].id",
    );
    expect(await backlog(q)).toBe(1);
    expect(await drain(q)).toEqual([{ id: y, body: "first" }]);
  });
});

describe("an id a storage shard drew", () => {
  it("taken as a producer's id with another body is refused with 409 naming id; cancel then removes the one message", async () => {
    const q = "ids-drawn-other-body";
    await queueWithPuller(q);
    const xs: string[] = [];
    // Several, so that some are drawn on another shard than the one a producer's id would pick.
    for (let i = 0; i < 6; i++) xs.push((await send(q, `real-${i}`)).json.result.message_id);
    for (const x of xs) expectConflictOn(await send(q, "evil", { id: x }), "id");
    expect(await backlog(q)).toBe(6);
    const cancelled = await api("DELETE", `${queuePath(q)}/messages/${xs[0]}`);
    expect(cancelled.json.result).toEqual({ id: xs[0], cancelled: true });
    expect((await api("GET", `${queuePath(q)}/messages/${xs[0]}`)).status).toBe(404);
    expect((await drain(q)).map((m) => m.body).sort()).toEqual(["real-1", "real-2", "real-3", "real-4", "real-5"]);
  });

  it("taken with the same body answers 200 with that id and stores nothing", async () => {
    const q = "ids-drawn-same-body";
    await queueWithPuller(q);
    const x = (await send(q, "real")).json.result.message_id as string;
    const again = await send(q, "real", { id: x });
    expect(again.status).toBe(200);
    expect(again.json.result.message_id).toBe(x);
    expect(await backlog(q)).toBe(1);
    expect(await drain(q)).toEqual([{ id: x, body: "real" }]);
  });

  it("for a keyed message is refused as a producer's id, keyed or not", async () => {
    const q = "ids-drawn-keyed";
    await queueWithPuller(q);
    const x = (await send(q, "real", { ordering_key: "acct-1" })).json.result.message_id as string;
    expectConflictOn(await send(q, "evil", { id: x }), "id");
    expectConflictOn(await send(q, "evil", { id: x, ordering_key: "acct-1" }), "id");
    expect(await backlog(q)).toBe(1);
    expect(await drain(q)).toEqual([{ id: x, body: "real" }]);
  });

  it("stays taken after its message was consumed: refused, nothing stored", async () => {
    const q = "ids-drawn-consumed";
    await queueWithPuller(q);
    const plain = (await send(q, "real")).json.result.message_id as string;
    const keyed = (await send(q, "real", { ordering_key: "acct-2" })).json.result.message_id as string;
    expect(await drain(q)).toHaveLength(2);
    expectConflictOn(await send(q, "evil", { id: plain }), "id");
    expectConflictOn(await sendBatch(q, { messages: [{ id: keyed, body: "evil" }] }), "messages[0].id");
    expect(await backlog(q)).toBe(0);
    expect(await drain(q)).toEqual([]);
  });

  it("of a keyed message stays taken after the message was consumed and its shard restarted with no lane left", async () => {
    // The short fault run (seed 2802) found this: with every lane of the shard gone, a restarted
    // shard said it had never drawn the lane id, and a producer's send stored a second message under it.
    const q = "ids-drawn-keyed-restart";
    const { queue_id } = await createQueue(q);
    expect((await api("POST", `${queuePath(q)}/consumers`, { type: "http_pull" })).status).toBe(201);
    const keyed = (await send(q, "real", { ordering_key: "acct-9" })).json.result.message_id as string;
    expect(await drain(q)).toEqual([{ id: keyed, body: "real" }]);
    const map = (await coordinatorFor(env, queue_id).shardMap())!;
    const drew = map.shards.find((s) => shardNumber(s.name) === locate(keyed)!.shard)!;
    await runInDurableObject(storageShardFor(env, drew.name, drew.region), (_o, state) => state.abort("restart")).catch(
      () => {},
    );
    expectConflictOn(await send(q, "evil", { id: keyed }), "id");
    expect(await backlog(q)).toBe(0);
  });

  it("stays taken once the shard that drew it was emptied, drained and retired", async () => {
    // The short fault run (seed 2828) found this: a stale-map fault retired the shard, and the id was stored again.
    const q = "ids-drawn-retired";
    const { queue_id } = await createQueue(q);
    expect((await api("POST", `${queuePath(q)}/consumers`, { type: "http_pull" })).status).toBe(201);
    const x = (await send(q, "real")).json.result.message_id as string;
    expect(await drain(q)).toEqual([{ id: x, body: "real" }]);
    const map = (await coordinatorFor(env, queue_id).shardMap())!;
    const drew = map.shards.find((s) => shardNumber(s.name) === locate(x)!.shard)!.name;
    await coordinatorFor(env, queue_id).setShardState(drew, "draining");
    await coordinatorFor(env, queue_id).setShardState(drew, "retired");
    forgetShardMap("local", q, queue_id);
    expectConflictOn(await send(q, "real", { id: x }), "id");
    expectConflictOn(await send(q, "evil", { id: x }), "id");
    expect(await backlog(q)).toBe(0);
  });

  it("in a batch refuses the whole batch, naming the message", async () => {
    const q = "ids-drawn-batch";
    await queueWithPuller(q);
    const x = (await send(q, "real")).json.result.message_id as string;
    const res = await sendBatch(q, {
      messages: [
        { id: "0123456789abcdef0123456789abcdef", body: "mine" },
        { id: x, body: "evil" },
      ],
    });
    expectConflictOn(res, "messages[1].id");
    expect(await backlog(q)).toBe(1);
    // Nothing was kept of the refused batch: its own id is free to send.
    expect((await send(q, "mine", { id: "0123456789abcdef0123456789abcdef" })).status).toBe(200);
    expect(await backlog(q)).toBe(2);
  });
});

describe("the producer binding", () => {
  it("stores a chosen id as it is given, and neither the ids it draws nor the ones it is given can be taken over HTTP", async () => {
    const q = "ids-binding";
    await queueWithPuller(q);
    const binding = producer(q);
    const chosen = "0123456789abcdef0123456789abcdef";
    expect((await binding.send("mine", { id: chosen })).messageId).toBe(chosen);
    const x = (await binding.send("real")).messageId;
    const [y] = (await binding.sendBatch([{ body: "real-keyed", orderingKey: "acct-3" }])).messageIds;
    expectConflictOn(await send(q, "evil", { id: x }), "id");
    expectConflictOn(await send(q, "evil", { id: y }), "id");
    expectConflictOn(await send(q, "evil", { id: chosen }), "id");
    expect(await backlog(q)).toBe(3);
  });
});

describe("ids of the producer's choosing", () => {
  it("that only look like a shard's ids are stored as before", async () => {
    const q = "ids-own";
    await queueWithPuller(q);
    const ids = [
      "00000000000000000000000000000042",
      "ffffffffffffffffffffffffffffffff",
      "0123456789abcdef0123456789abcdef",
    ];
    for (const id of ids) expect((await send(q, id, { id })).json.result.message_id).toBe(id);
    expect(await drain(q)).toEqual(ids.map((id) => ({ id, body: id })).sort((a, b) => a.id.localeCompare(b.id)));
  });
});
