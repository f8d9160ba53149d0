/**
 * Keyed messages (docs/ordered-lanes.md) under the operations around delivery: found by id,
 * cancelled and purged, counted in the backlog, deleted past the queue's retention; and the
 * operators' routes, the keys held back and why, and a held key released to the dead-letter
 * queue. Pull consumers, storage shards on a fake clock.
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
  api,
  backlog,
  BASE,
  createQueue,
  eventually,
  producer,
  pull,
  type Pulled,
  queuePath,
  TOKEN,
} from "./helpers";
import { unsettledKeyed } from "./keyed-helpers";
import { bodies, orderedQueue, pullAll, sendInOrder } from "./ordered-lanes-helpers";
import { parseExposition, valueOf } from "./exposition";

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

describe("ordered lanes", () => {
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
});
