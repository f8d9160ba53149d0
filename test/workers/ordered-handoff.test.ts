/**
 * Ordered lanes across map changes (docs/ordered-lanes.md "Map changes"): when a
 * key's shard changes, its old shard refuses the key from then on (the fence), and the new
 * shard delivers none of the key's messages while an older one is still ready or in flight
 * on the old shard (the bridge), however often the key moves.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { ownerOfKey } from "../../src/kernel/ordering";
import { forgetShardMap } from "../../src/routing/shard-map-cache";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { ack, eventually, pull, type Pulled, pullQueue, send, shardsOnFakeClock } from "./helpers";
import { unsettledKeyed } from "./keyed-helpers";
import { sleep } from "../../src/kernel/sleep";

const bodyOf = (m: Pulled) => JSON.parse(atob(m.body)) as string;

async function orderedQueue(name: string) {
  const q = await pullQueue(name, { settings: { visibility_timeout_ms: 60_000, max_retries: 3 } });
  const { shards } = await shardsOnFakeClock(q.queue_id);
  return { queueId: q.queue_id, shards };
}

/** Pulls a few times (a pull asks the shards in turn) and answers what came, in order, leased. */
async function pullAll(q: string): Promise<Pulled[]> {
  const out: Pulled[] = [];
  for (let i = 0; i < 8; i++) out.push(...((await pull(q, { batch_size: 100 })).json.result.messages as Pulled[]));
  return out;
}

async function ackAll(q: string, ms: Pulled[]) {
  expect((await ack(q, { acks: ms.map((m) => ({ lease_id: m.lease_id })) })).json.result.ackCount).toBe(ms.length);
}

/** A key whose owner is `from` among `before` and `to` among `after`. */
function keyMoving(from: string, to: string, before: string[], after: string[]): string {
  for (let i = 0; ; i++) {
    const key = `key-${i}`;
    if (ownerOfKey(key, before) === from && ownerOfKey(key, after) === to) return key;
  }
}

/** The keyed messages `shard` holds, unsettled (keyed-helpers.ts). */
const keyedCount = (shard: string): Promise<number> => unsettledKeyed(shard);

describe("ordered lanes across map changes", () => {
  it("refuses a key on its old shard once it moved, and holds the new shard's messages until the old shard's are gone", async () => {
    const name = "handoff-scale-out";
    const { queueId, shards } = await orderedQueue(name);
    const [a, , , added] = shards as [string, string, string, string];
    const coordinator = coordinatorFor(env, queueId);
    // The fourth shard is out of the map at first; it comes back as a scale-out would add it.
    await coordinator.setShardState(added, "draining");
    forgetShardMap("local", name, queueId);
    const key = keyMoving(a, added, shards.slice(0, 3), shards);
    for (const n of ["k1", "k2"]) expect((await send(name, n, { ordering_key: key })).status).toBe(200);
    expect(await keyedCount(a)).toBe(2);

    await coordinator.setShardState(added, "active");
    // The broker still holds the map without the new shard: the old shard refuses the key, the broker reads the map again.
    expect((await send(name, "k3", { ordering_key: key })).status).toBe(200);
    expect(await keyedCount(a)).toBe(2);
    expect(await keyedCount(added)).toBe(1);

    const first = await pullAll(name);
    expect(first.map(bodyOf)).toEqual(["k1", "k2"]);
    // k3 waits on the hand-off while k1 and k2 are in flight on the old shard.
    expect(await pullAll(name)).toEqual([]);
    await ackAll(name, first);
    const last = await eventually(
      () => pullAll(name),
      (ms) => ms.length > 0,
    );
    expect(last.map(bodyOf)).toEqual(["k3"]);
  });

  it("delivers a key that moved away and back in the order its messages were accepted", async () => {
    const name = "handoff-back-and-forth";
    const { queueId, shards } = await orderedQueue(name);
    const [a, , , moved] = shards as [string, string, string, string];
    const coordinator = coordinatorFor(env, queueId);
    await coordinator.setShardState(moved, "draining");
    forgetShardMap("local", name, queueId);
    const key = keyMoving(a, moved, shards.slice(0, 3), shards);

    expect((await send(name, "k1", { ordering_key: key })).status).toBe(200);
    const [k1] = (await pull(name, { batch_size: 1 })).json.result.messages as Pulled[];
    expect(bodyOf(k1!)).toBe("k1");
    // Away: the key's new shard takes k2 and holds it behind k1.
    await coordinator.setShardState(moved, "active");
    forgetShardMap("local", name, queueId);
    expect((await send(name, "k2", { ordering_key: key })).status).toBe(200);
    expect(await keyedCount(moved)).toBe(1);
    // And back: the first shard takes k3 and holds it behind k2, while k1 is still in flight.
    await coordinator.setShardState(moved, "draining");
    forgetShardMap("local", name, queueId);
    expect((await send(name, "k3", { ordering_key: key })).status).toBe(200);
    expect(await keyedCount(a)).toBe(2);
    expect(await pullAll(name)).toEqual([]);

    await ackAll(name, [k1!]);
    const second = await eventually(
      () => pullAll(name),
      (ms) => ms.length > 0,
    );
    expect(second.map(bodyOf)).toEqual(["k2"]);
    await ackAll(name, second);
    const third = await eventually(
      () => pullAll(name),
      (ms) => ms.length > 0,
    );
    expect(third.map(bodyOf)).toEqual(["k3"]);
  });

  it("holds a keyed send while its shard is in an epoch the stored map does not show yet, instead of answering 503", async () => {
    const name = "handoff-unsettled";
    const { queueId, shards } = await orderedQueue(name);
    const [, , , leaving] = shards as [string, string, string, string];
    const key = keyMoving(leaving, shards[0]!, shards, shards.slice(0, 3));
    const enter = (seq: number, active: string[]) =>
      Promise.all(
        shards.map((s) =>
          runInDurableObject(storageShardFor(env, s), (obj: StorageShard) =>
            obj.enterEpoch(queueId, { seq, active: [...active].sort() }),
          ),
        ),
      );
    // A drain pushed to every shard and not stored (as a Coordinator reset between the two leaves it):
    // the key's shard in the stored map refuses it.
    await enter(1000, shards.slice(0, 3));
    const sent = send(name, "u1", { ordering_key: key });
    await sleep(300);
    // The Coordinator's next tick pushes the stored map's shards again: the send lands where that map says.
    await enter(1001, shards);
    expect((await sent).status).toBe(200);
    expect(await keyedCount(leaving)).toBe(1);
    expect((await pullAll(name)).map(bodyOf)).toEqual(["u1"]);
  });

  it("lets other keys of both shards flow while one key waits on its hand-off", async () => {
    const name = "handoff-others";
    const { queueId, shards } = await orderedQueue(name);
    const [a, , , added] = shards as [string, string, string, string];
    const coordinator = coordinatorFor(env, queueId);
    await coordinator.setShardState(added, "draining");
    forgetShardMap("local", name, queueId);
    const moving = keyMoving(a, added, shards.slice(0, 3), shards);
    const staying = keyMoving(a, a, shards.slice(0, 3), shards);
    expect((await send(name, "m1", { ordering_key: moving })).status).toBe(200);
    const [m1] = (await pull(name, { batch_size: 1 })).json.result.messages as Pulled[];
    await coordinator.setShardState(added, "active");
    forgetShardMap("local", name, queueId);
    expect((await send(name, "m2", { ordering_key: moving })).status).toBe(200);
    expect((await send(name, "s1", { ordering_key: staying })).status).toBe(200);
    expect((await pullAll(name)).map(bodyOf)).toEqual(["s1"]);
    await ackAll(name, [m1!]);
    const after = await eventually(
      () => pullAll(name),
      (ms) => ms.length > 0,
    );
    expect(after.map(bodyOf)).toEqual(["m2"]);
  });
});
