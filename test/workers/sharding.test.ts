import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { callerRegion } from "../../src/routing/region";
import { pickShard, shardForId, shardForKey } from "../../src/routing/placement";
import { ownerOfKey } from "../../src/kernel/ordering";
import { forgetSticks, SPREAD_RATE, stickyShard, STICKY_MESSAGES, STICKY_MS } from "../../src/routing/sticky-placement";
import { storeMessages } from "../../src/routing/store";
import { serviceConfig } from "../../src/kernel/config";
import { crc32 } from "../../src/kernel/checksum";
import { cachedShardMap } from "../../src/routing/shard-map-cache";
import type { ServiceConfig } from "../../src/kernel/config";
import type { ShardMap } from "../../src/kernel/shard-map";
import { catalogFor, coordinatorFor } from "../../src/kernel/addressing";
import { api, createQueue, producer, queuePath, send, storedMessages } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

describe("sharding", () => {
  it("creates SHARDS_PER_REGION shards per region and spreads messages over them", async () => {
    await createQueue("spread");
    const ids: string[] = [];
    for (let i = 0; i < 200; i++) {
      // Each placed afresh, as 200 broker isolates would (the stickiness of one is its own test below).
      forgetSticks();
      ids.push((await send("spread", i)).json.result.message_id);
    }
    const { messages, map } = await storedMessages("spread");
    expect(map.shards).toHaveLength(4);
    expect(new Set(map.shards.map((s) => s.region))).toEqual(new Set(["local"]));
    const perShard = map.shards.map((s) => messages.filter((m) => m.shard === s.name).length);
    // Uniform random choice: each of 4 shards gets 50 on average; none is starved.
    for (const n of perShard) expect(n).toBeGreaterThan(15);
    expect(messages.map((m) => m.id).sort()).toEqual([...ids].sort());
  });

  it("stores every message exactly once when the broker's map is stale (a shard turned draining)", async () => {
    const q = await createQueue("stale-draining");
    const first = (await send("stale-draining", "warm the cache")).json.result.message_id as string;
    const stale = (await cachedShardMap(env, "local", "stale-draining"))!;
    const drained = stale.shards[0]!.name;
    const before = (await storedMessages("stale-draining")).messages.filter((m) => m.shard === drained).length;

    const current = await coordinatorFor(env, q.queue_id).setShardState(drained, "draining");
    expect(current!.version).toBe(stale.version + 1);
    // The broker's cached copy still names the shard active: every pick of it is refused and retried.
    expect((await cachedShardMap(env, "local", "stale-draining"))!.shards[0]!.state).toBe("active");

    const ids = [first];
    // Each placed afresh (no sticky placement), so the drained shard is picked again and again.
    for (let i = 0; i < 100; i++) {
      forgetSticks();
      ids.push((await send("stale-draining", i)).json.result.message_id);
    }
    for (let i = 0; i < 10; i++)
      ids.push(
        ...(await producer("stale-draining").sendBatch(Array.from({ length: 10 }, (_, j) => ({ body: j })))).messageIds,
      );

    // Having been refused, this isolate no longer offers the draining shard anything.
    expect((await cachedShardMap(env, "local", "stale-draining"))!.shards[0]!.state).toBe("draining");

    const { messages } = await storedMessages("stale-draining");
    const stored = messages.map((m) => m.id).sort();
    expect(stored).toEqual([...ids].sort()); // all there, none twice
    expect(messages.filter((m) => m.shard === drained)).toHaveLength(before);
  });

  it("moves past a retired shard and answers 503 when no shard takes sends, storing nothing", async () => {
    const q = await createQueue("retiring");
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    await coordinatorFor(env, q.queue_id).setShardState(map.shards[1]!.name, "retired");
    for (let i = 0; i < 20; i++) expect((await send("retiring", i)).status).toBe(200);
    for (const s of map.shards) await coordinatorFor(env, q.queue_id).setShardState(s.name, "draining");
    const res = await send("retiring", "nowhere to go");
    expect(res.status).toBe(503);
    expect(res.json.success).toBe(false);
    expect((await storedMessages("retiring")).messages).toHaveLength(20);
  });

  it("answers 404 for a queue deleted behind the broker's back (its cached map names destroyed shards)", async () => {
    await createQueue("vanishing");
    await send("vanishing", "cache me");
    expect(await cachedShardMap(env, "local", "vanishing")).not.toBeNull();
    await catalogFor(env, "local").deleteQueue("vanishing");
    const res = await send("vanishing", "too late");
    expect(res.status).toBe(404);
  });

  it("publishes each new map version to KV at most once a second per key, deferring the rest to an alarm", async () => {
    const { runDurableObjectAlarm } = await import("cloudflare:test");
    const q = await createQueue("publishing");
    const key = `map/local/id/${q.queue_id}`;
    const read = async () => (await env.SHARD_MAPS.get<ShardMap>(key, "json"))!;
    expect((await read()).version).toBe(1);
    expect((await env.SHARD_MAPS.get<ShardMap>("map/local/name/publishing", "json"))!.queueId).toBe(q.queue_id);
    await api("PATCH", queuePath("publishing"), { settings: { delivery_delay: 1 } });
    await api("PATCH", queuePath("publishing"), { settings: { delivery_delay: 2 } });
    // Within a second of the first write: KV still holds version 1, an alarm holds the rest.
    const published = await read();
    expect(published.version).toBe(1);
    const coordinator = env.COORDINATOR.get(env.COORDINATOR.idFromName(q.queue_id));
    await sleep(1100);
    await runDurableObjectAlarm(coordinator);
    const after = await read();
    expect(after.version).toBe(3);
    expect(after.settings.delivery_delay).toBe(2);
  });
});

describe("placement by id", () => {
  it("stores a message whose id is fixed on the shard its id picks, whatever batch carries it, so a write again is skipped there", async () => {
    const q = await createQueue("by-id");
    const map = (await coordinatorFor(env, q.queue_id).shardMap())!;
    const region = serviceConfig(env).defaultRegion;
    const shardOf = (id: string) => shardForId(map, region, id)!.name;
    const ids = Array.from({ length: 64 }, (_, i) => i.toString(16).padStart(32, "c"));
    // b written first beside a, then again beside c: a, b and c on three different shards.
    const b = ids[0]!;
    const a = ids.find((id) => shardOf(id) !== shardOf(b))!;
    const c = ids.find((id) => shardOf(id) !== shardOf(b) && shardOf(id) !== shardOf(a))!;
    const body = new TextEncoder().encode('"x"');
    const message = { body, contentType: "json" as const, delaySeconds: undefined, checksum: crc32(body) };
    const target = { accountId: "local", queueRef: "by-id", region: undefined };
    await storeMessages(env, target, [message, message], undefined, [a, b]);
    // The same b after a lost reply, in other company: its shard has it and skips it.
    const again = await storeMessages(env, target, [message, message], undefined, [c, b], true);
    expect(again.ids).toEqual([c, b]);
    const { messages } = await storedMessages("by-id");
    expect(messages.map((m) => m.id).sort()).toEqual([a, b, c].sort());
    for (const m of messages) expect(m.shard).toBe(shardOf(m.id));
  });
});

/** A map of active shards of region "local" with these names. */
const fakeMap = (names: string[]): ShardMap => ({
  version: 1,
  accountId: "a",
  queueId: "q-sticky",
  queueName: "n",
  publishedAt: 0,
  settings: { delivery_delay: 0, delivery_paused: false, message_retention_period: 60 },
  shards: names.map((name) => ({ name, region: "local", state: "active" as const })),
});

describe("shard choice", () => {
  const map: ShardMap = {
    version: 1,
    accountId: "a",
    queueId: "q",
    queueName: "n",
    publishedAt: 0,
    settings: { delivery_delay: 0, delivery_paused: false, message_retention_period: 60 },
    shards: [
      { name: "w0", region: "wnam", state: "active" },
      { name: "w1", region: "wnam", state: "draining" },
      { name: "e0", region: "weur", state: "active" },
      { name: "e1", region: "weur", state: "retired" },
    ],
  };

  it("picks only active shards of the caller's region, any region when its own has none left", () => {
    for (let i = 0; i < 50; i++) expect(pickShard(map, "wnam", new Set())!.name).toBe("w0");
    expect(pickShard(map, "wnam", new Set(["w0"]))!.name).toBe("e0");
    expect(pickShard(map, "apac", new Set())!.state).toBe("active");
    expect(pickShard(map, "wnam", new Set(["w0", "e0"]))).toBeUndefined();
  });

  it("keeps one isolate's fresh sends on one shard for a batch's worth or STICKY_MS, then draws another at random", () => {
    forgetSticks();
    const map = fakeMap(["a", "b", "c", "d"]);
    const draws = [0.1, 0.9, 0.6];
    const random = () => draws.shift()!;
    const t = 1_000_000;
    const picks: string[] = [];
    for (let i = 0; i < STICKY_MESSAGES; i++) picks.push(stickyShard(map, "local", new Set(), 1, t + i, random)!.name);
    expect(new Set(picks)).toEqual(new Set(["a"]));
    // A batch's worth taken: the next send draws again.
    expect(stickyShard(map, "local", new Set(), 1, t + 200, random)!.name).toBe("d");
    // Too long on one shard, however few it took: drawn again.
    expect(stickyShard(map, "local", new Set(), 1, t + 200 + STICKY_MS, random)!.name).toBe("c");
  });

  it("keeps a stream of one send a second on one shard for STICKY_MS, so the others sleep", () => {
    forgetSticks();
    const map = fakeMap(["a", "b", "c", "d"]);
    const t = 1_000_000;
    const picks = Array.from(
      { length: STICKY_MS / 1000 },
      (_, i) => stickyShard(map, "local", new Set(), 1, t + i * 1000)!.name,
    );
    expect(new Set(picks).size).toBe(1);
  });

  it("keeps a stream slower than SPREAD_RATE on one shard past a batch's worth, and spreads a faster one", () => {
    forgetSticks();
    const map = fakeMap(["a", "b", "c", "d"]);
    const t = 1_000_000;
    const slowGap = 2000 / SPREAD_RATE; // half the rate
    const slow = Array.from(
      { length: 5 * STICKY_MESSAGES },
      (_, i) => stickyShard(map, "local", new Set(), 1, t + i * slowGap)!.name,
    );
    expect(slow.length * slowGap).toBeLessThan(STICKY_MS);
    expect(new Set(slow).size).toBe(1);
    forgetSticks();
    const fastGap = 500 / SPREAD_RATE; // twice the rate
    const draws = [0.1, 0.9, 0.6, 0.3];
    const fast = Array.from(
      { length: 3 * STICKY_MESSAGES },
      (_, i) => stickyShard(map, "local", new Set(), 1, t + i * fastGap, () => draws.shift()!)!.name,
    );
    expect(fast.slice(0, STICKY_MESSAGES).every((s) => s === "a")).toBe(true);
    expect(fast[STICKY_MESSAGES]).toBe("d");
    expect(fast[2 * STICKY_MESSAGES]).toBe("c");
  });

  it("leaves the sticky shard at once when it refuses a send or stops being active in the map", () => {
    forgetSticks();
    const map = fakeMap(["a", "b", "c"]);
    const t = 1_000_000;
    expect(stickyShard(map, "local", new Set(), 1, t, () => 0)!.name).toBe("a");
    expect(stickyShard(map, "local", new Set(["a"]), 1, t, () => 0)!.name).toBe("b");
    const draining = {
      ...map,
      shards: map.shards.map((s) => (s.name === "b" ? { ...s, state: "draining" as const } : s)),
    };
    expect(stickyShard(draining, "local", new Set(), 1, t, () => 0.99)!.name).toBe("c");
    expect(stickyShard(fakeMap([]), "local", new Set(), 1, t)).toBeUndefined();
  });

  it("places an ordering key by rendezvous hashing: a shard added takes only keys it wins, a shard drained gives up only its own", () => {
    const keys = Array.from({ length: 2000 }, (_, i) => `order-${i}`);
    const three = ["s0", "s1", "s2"];
    const four = [...three, "s3"];
    const before = new Map(keys.map((k) => [k, ownerOfKey(k, three)!]));
    const after = new Map(keys.map((k) => [k, ownerOfKey(k, four)!]));
    // Added: a key stays where it was, or moves to the new shard.
    for (const k of keys) expect([before.get(k), "s3"]).toContain(after.get(k));
    // Drained: only the drained shard's keys move.
    const without = new Map(keys.map((k) => [k, ownerOfKey(k, ["s0", "s2", "s3"])!]));
    for (const k of keys) if (after.get(k) !== "s1") expect(without.get(k)).toBe(after.get(k));
    // Spread evenly enough: each of four shards owns a fair share.
    for (const s of four) {
      const share = keys.filter((k) => after.get(k) === s).length / keys.length;
      expect(share).toBeGreaterThan(0.18);
      expect(share).toBeLessThan(0.32);
    }
    // Over a map: the owner among the active shards of every region, none when it is excluded.
    const owner = shardForKey(map, "order-7")!;
    expect(owner.state).toBe("active");
    expect(owner.name).toBe(
      ownerOfKey(
        "order-7",
        map.shards.filter((x) => x.state === "active").map((x) => x.name),
      ),
    );
    expect(shardForKey(map, "order-7", new Set([owner.name]))).toBeUndefined();
  });

  it("maps request.cf to a configured region, else the default", () => {
    const config: ServiceConfig = {
      regions: ["wnam", "enam", "weur", "eeur", "apac"],
      defaultRegion: "enam",
      shardsPerRegion: 2,
      heartbeatIntervalMs: 1,
      shardMapCacheTtlMs: 1,
      shardCapacityPerSecond: 0,
      targetPerShard: 1,
      maxShardsPerRegion: 1,
      scaleInAfterMs: 1,
      pushLeaseMs: 1,
    };
    const cf = (o: Record<string, unknown>) => o as unknown as IncomingRequestCfProperties;
    expect(callerRegion(cf({ continent: "NA", longitude: "-122.4" }), config)).toBe("wnam");
    expect(callerRegion(cf({ continent: "NA", longitude: "-74.0" }), config)).toBe("enam");
    expect(callerRegion(cf({ continent: "EU", longitude: "2.3" }), config)).toBe("weur");
    expect(callerRegion(cf({ continent: "EU", longitude: "30.5" }), config)).toBe("eeur");
    expect(callerRegion(cf({ continent: "AS", country: "JP" }), config)).toBe("apac");
    expect(callerRegion(cf({ continent: "SA" }), config)).toBe("enam"); // sam not configured
    expect(callerRegion(undefined, config)).toBe("enam");
  });
});
