/**
 * Keyed sends while a Coordinator change is half done ("keyed sends refused while
 * a Coordinator change is half done"; docs/ordered-lanes.md "Map changes"). A drain tells
 * its shard first and records the change after the epoch is pushed: between the two, and
 * for good when a reset cuts the Coordinator there, the map and every epoch still name the
 * shard as its keys' home while the shard itself refuses sends as draining. No keyed send
 * is refused while the shard that owns its key is up: it waits for the map to move the key,
 * or for the Coordinator to undo the drain it never recorded.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { Coordinator } from "../../coordinator/coordinator";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { ownerOfKey } from "../../src/kernel/ordering";
import { api, createQueue, queuePath, send } from "./helpers";
import { unsettledKeyed } from "./keyed-helpers";
import { sleep } from "../../src/kernel/sleep";

/** The keyed messages `shard` holds, unsettled (keyed-helpers.ts). */
const keyedCount = (shard: string): Promise<number> => unsettledKeyed(shard);

/** A key `owner` holds among `shards`, and the shard that takes it once `owner` is gone. */
function keyOf(owner: string, shards: string[]): { key: string; heir: string } {
  for (let i = 0; ; i++) {
    const key = `key-${i}`;
    if (ownerOfKey(key, shards) === owner)
      return {
        key,
        heir: ownerOfKey(
          key,
          shards.filter((s) => s !== owner),
        )!,
      };
  }
}

/**
 * The fault harness's abort-drain: the Coordinator drains `shard` (as the autoscaler
 * would) and is reset once the shard is told, before the drain is recorded.
 */
async function drainCutByReset(queueId: string, shard: string): Promise<void> {
  const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(queueId));
  await runInDurableObject(coordinator, async (obj: Coordinator, state) => {
    const loop = (
      obj as unknown as {
        loop: {
          deps: { faultPoint(point: string): void };
          force(kind: "drain", now: number, shard: string): Promise<string>;
        };
      }
    ).loop;
    loop.deps.faultPoint = (point) => {
      if (point === "abort-drain") state.abort("test: reset between telling the shard and recording the drain");
    };
    await loop.force("drain", Date.now(), shard);
  }).catch(() => {});
}

describe("keyed sends while a Coordinator change is half done", () => {
  it("takes a keyed send on its shard after a reset cut that shard's drain short: the Coordinator undoes it at once", async () => {
    const name = "half-done-drain";
    const q = await createQueue(name);
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards.map((s) => s.name);
    const owner = shards[1]!;
    const { key } = keyOf(owner, shards);
    expect((await send(name, "before", { ordering_key: key })).status).toBe(200);

    await drainCutByReset(q.queue_id, owner);
    // The map still names the shard active: the drain was never recorded.
    expect((await coordinatorFor(env, q.queue_id).shardMap())!.shards.find((s) => s.name === owner)?.state).toBe(
      "active",
    );

    const res = await send(name, "after", { ordering_key: key });
    expect({ status: res.status, error: res.json.errors?.[0]?.message }).toEqual({ status: 200, error: undefined });
    expect(await keyedCount(owner)).toBe(2);
    // Undone, not half done: the shard takes sends again.
    expect((await storageShardFor(env, owner).append({ queueId: q.queue_id, messages: [] })).ok).toBe(true);
  });

  it("holds a keyed send whose shard was told to drain until the drain is recorded, and stores it on the key's next shard", async () => {
    const name = "drain-in-flight";
    const q = await createQueue(name);
    const shards = (await coordinatorFor(env, q.queue_id).shardMap())!.shards.map((s) => s.name);
    const owner = shards[2]!;
    const { key, heir } = keyOf(owner, shards);
    // A drain's first step: the shard is told, and refuses sends; the epoch and the map come next.
    await storageShardFor(env, owner).setState("draining");
    const sent = send(name, "k1", { ordering_key: key });
    await sleep(300);
    await coordinatorFor(env, q.queue_id).setShardState(owner, "draining");
    const res = await sent;
    expect({ status: res.status, error: res.json.errors?.[0]?.message }).toEqual({ status: 200, error: undefined });
    expect(await keyedCount(heir)).toBe(1);
    expect(await keyedCount(owner)).toBe(0);
  });
});

describe("a keyed batch placed under a map a scale-out has since changed", () => {
  it(
    "stores each key on its owner in the current map when keys that shared a shard no longer do",
    { timeout: 20_000 },
    async () => {
      const name = "split-after-scale-out";
      const q = await createQueue(name);
      const before = (await coordinatorFor(env, q.queue_id).shardMap())!.shards.map((s) => s.name);
      const added = `${q.queue_id}:local:${before.length}`;
      const after = [...before, added];
      // Two keys on one shard before the scale-out; only the second moves to the new shard.
      const stays = Array.from({ length: 500 }, (_, i) => `key-${i}`).find(
        (k) => ownerOfKey(k, before) === before[0] && ownerOfKey(k, after) === before[0],
      )!;
      const moves = Array.from({ length: 500 }, (_, i) => `key-${i}`).find(
        (k) => ownerOfKey(k, before) === before[0] && ownerOfKey(k, after) === added,
      )!;
      // This isolate caches the map it has now.
      expect((await send(name, "warm", { ordering_key: stays })).status).toBe(200);
      const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
      await runInDurableObject(coordinator, (obj: Coordinator) =>
        (obj as unknown as { loop: { force(kind: "scale-out", now: number): Promise<string> } }).loop.force(
          "scale-out",
          Date.now(),
        ),
      );
      expect((await coordinatorFor(env, q.queue_id).shardMap())!.shards.map((s) => s.name)).toContain(added);

      const t0 = Date.now();
      const res = await api("POST", `${queuePath(name)}/messages/batch`, {
        messages: [
          { body: "s1", ordering_key: stays },
          { body: "m1", ordering_key: moves },
        ],
      });
      expect({ status: res.status, error: res.json.errors?.[0]?.message }).toEqual({ status: 200, error: undefined });
      expect(Date.now() - t0).toBeLessThan(5000);
      expect(await keyedCount(before[0]!)).toBe(2);
      expect(await keyedCount(added)).toBe(1);
    },
  );
});
