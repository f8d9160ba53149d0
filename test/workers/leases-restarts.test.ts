/**
 * A storage shard's leases across a restart or an eviction: memory leases lost and their messages
 * delivered again, leases the quiet shard wrote kept, a key's stored lease honoured to its end,
 * and no lease from before a restart touching a message written after it.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { msg, QUEUE, req, shardAt } from "./leases-helpers";

describe("leases (vesting times)", () => {
  it("loses memory leases in a restart: the messages are delivered again, and a late ack under the lost lease still lands", async () => {
    const { shard } = await shardAt("restart-redeliver");
    await shard.append({ queueId: QUEUE, messages: [msg("a"), msg("b")] });
    const [a, b] = (await shard.lease(req({ maxWaitMs: 0 }))).messages;
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("reset while leased")).catch(() => {});
    const restarted = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("restart-redeliver"));
    // At-least-once: both are ready again at once, and the lost delivery is not counted as a retry.
    // (The restarted object runs on the system clock, far past this test's: retention must not expire them.)
    const again = (await restarted.lease(req({ maxWaitMs: 0, retentionMs: 1e15 }))).messages;
    expect(again.map((m) => [m.id, m.attempts])).toEqual([
      [a!.id, 1],
      [b!.id, 1],
    ]);
    // A late ack from before the restart for a message leased again since is stale; one for a message nobody holds lands.
    const late = await restarted.settle({
      queueId: QUEUE,
      acks: [{ id: a!.id, leaseId: a!.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(late).toMatchObject({ acked: 0, stale: [a!.id] });
    await restarted.settle({
      queueId: QUEUE,
      acks: again.map((m) => ({ id: m.id, leaseId: m.leaseId })),
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect((await restarted.stats()).backlogCount).toBe(0);
  });

  it("keeps the leases a quiet shard wrote across its eviction; an ack after the write is not undone by it", async () => {
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("quiet-leases"));
    await shard.activate({ name: "quiet-leases", queueId: QUEUE, accountId: "local", region: "local" });
    // On the system clock: the instance after the eviction runs on it.
    const live = { ...req({ maxWaitMs: 0, retentionMs: 1e15 }), leaseMs: 600_000 };
    await shard.append({ queueId: QUEUE, messages: [msg("a"), msg("b"), msg("c")] });
    const [a, b, c] = (await shard.lease(live)).messages;
    // Its requests stopped: the quiet work writes the three leases (quiet-timer.ts, held-leases.ts).
    await runInDurableObject(shard, (obj: StorageShard) => obj.quietNow());
    // An ack after that write: the written lease on c must not bring c back.
    expect(
      await shard.settle({
        queueId: QUEUE,
        acks: [{ id: c!.id, leaseId: c!.leaseId }],
        retries: [],
        deadLettered: [],
        dropped: [],
      }),
    ).toMatchObject({ acked: 1 });
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("evicted while leased")).catch(() => {});
    const after = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("quiet-leases"));
    // a and b are still leased, c is gone: nothing to hand out, and the consumer's acks land.
    expect((await after.lease(live)).messages).toEqual([]);
    expect(
      await after.settle({
        queueId: QUEUE,
        acks: [a!, b!].map((m) => ({ id: m.id, leaseId: m.leaseId })),
        retries: [],
        deadLettered: [],
        dropped: [],
      }),
    ).toMatchObject({ acked: 2 });
    expect((await after.stats()).backlogCount).toBe(0);
    expect(
      await runInDurableObject(
        after,
        (_o: StorageShard, state) =>
          state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM held_leases").one().n,
      ),
    ).toBe(0);
  });

  it("honours a lane's stored lease across a restart to its end, then delivers the key again in order", async () => {
    const { shard } = await shardAt("restart-lane");
    await shard.append({
      queueId: QUEUE,
      messages: [
        { ...msg("k1"), orderingKey: "k" },
        { ...msg("k2"), orderingKey: "k" },
      ],
    });
    const first = (await shard.lease(req({ maxWaitMs: 0 }))).messages;
    expect(first.map((m) => m.attempts)).toEqual([1, 1]);
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("reset while a lane is leased")).catch(
      () => {},
    );
    const restarted = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("restart-lane"));
    // On the system clock the lane's lease (taken at this test's time) has long run out: the key comes back whole.
    const again = (await restarted.lease(req({ maxWaitMs: 0, retentionMs: 1e15 }))).messages;
    expect(again.map((m) => [m.id, m.attempts])).toEqual(first.map((m) => [m.id, 2]));
  });

  it("keeps a lane's lease across a restart while it runs: the key is not leased twice", async () => {
    const { shard } = await shardAt("restart-lane-held", Date.now());
    await shard.append({ queueId: QUEUE, messages: [{ ...msg("h1"), orderingKey: "h" }] });
    expect((await shard.lease(req({ maxWaitMs: 0, leaseMs: 600_000 }))).messages).toHaveLength(1);
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("reset while a lane is leased")).catch(
      () => {},
    );
    const restarted = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("restart-lane-held"));
    expect((await restarted.lease(req({ maxWaitMs: 0, retentionMs: 1e15 }))).messages).toEqual([]);
  });

  it("never lets a lease from before a restart touch a new message written after it", async () => {
    const { shard } = await shardAt("seq-reuse");
    await shard.append({ queueId: QUEUE, messages: [msg("old")] });
    const old = (await shard.lease(req({ maxWaitMs: 0 }))).messages[0]!;
    await shard.settle({
      queueId: QUEUE,
      acks: [{ id: old.id, leaseId: old.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("reset with an empty table")).catch(
      () => {},
    );
    const restarted = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("seq-reuse"));
    await restarted.append({ queueId: QUEUE, messages: [msg("new")] });
    // The table was empty: the old lease id names nothing here.
    const r = await restarted.settle({
      queueId: QUEUE,
      acks: [{ id: old.id, leaseId: old.leaseId }],
      retries: [{ id: old.id, leaseId: old.leaseId, delayMs: 0 }],
      deadLettered: [],
      dropped: [],
    });
    expect(r).toMatchObject({ acked: 0, retried: 0 });
    expect((await restarted.stats()).backlogCount).toBe(1);
  });
  it("keeps leases across a restart of the storage shard: an ack after the restart still lands", async () => {
    const { shard } = await shardAt("restart-between");
    await shard.append({ queueId: QUEUE, messages: [msg()] });
    const m = (await shard.lease(req({ maxWaitMs: 0 }))).messages[0]!;
    await runInDurableObject(shard, (_o: StorageShard, state) => state.abort("reset between lease and ack")).catch(
      () => {},
    );
    const restarted = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName("restart-between"));
    const r = await restarted.settle({
      queueId: QUEUE,
      acks: [{ id: m.id, leaseId: m.leaseId }],
      retries: [],
      deadLettered: [],
      dropped: [],
    });
    expect(r.acked).toBe(1);
    expect((await restarted.stats()).backlogCount).toBe(0);
  });
});
