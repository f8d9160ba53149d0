// The fault harness's hooks (src/kernel/test-hooks.ts, broker/http/test-hooks-api.ts) must
// not be reachable where SHARDQ_TEST_HOOKS is not "on", which is everywhere but a fault
// run: these tests run on wrangler.toml and .dev.vars as they are, as a deploy would. (A
// deployed bundle has no hook code at all: test/e2e/production-bundle-hooks.test.ts.)
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { consumerShardFor, coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { api, createQueue, queuePath } from "./helpers";

describe("the fault harness's test hooks without SHARDQ_TEST_HOOKS", () => {
  it("are not set by the service's config", () => {
    expect((env as { SHARDQ_TEST_HOOKS?: string }).SHARDQ_TEST_HOOKS).toBeUndefined();
  });

  it("answer 404 exactly as an unknown path does, for an admin token, and 401 without a token", async () => {
    await createQueue("hooks-off");
    const unknown = await api("POST", `${queuePath("hooks-off")}/no-such-thing`, { shard: "x", arm: "abort-append" });
    expect(unknown.status).toBe(404);
    expect(unknown.json.errors[0].message).toBe(`no route for POST ${queuePath("hooks-off")}/no-such-thing`);
    for (const method of ["GET", "POST"] as const) {
      const res = await api(
        method,
        `${queuePath("hooks-off")}/test-hooks${method === "GET" ? "?shard=x" : ""}`,
        method === "POST" ? { shard: "x", arm: "abort-append" } : undefined,
      );
      expect(res.status).toBe(404);
      expect(res.json.errors).toEqual([
        { ...unknown.json.errors[0], message: `no route for ${method} ${queuePath("hooks-off")}/test-hooks` },
      ]);
    }
    expect(
      (await api("POST", `${queuePath("hooks-off")}/test-hooks`, { shard: "x", arm: null }, { token: null })).status,
    ).toBe(401);
  });

  it("refuse at the storage shard too: its RPC method throws and arms nothing", async () => {
    const q = await createQueue("hooks-off-rpc");
    const map = await coordinatorFor(env, q.queue_id).shardMap();
    const shard = storageShardFor(env, map!.shards[0]!.name);
    await expect(shard.testHook({ arm: "abort-append" })).rejects.toThrow(/test hooks are off/);
    await expect(shard.testHook({ arm: "throw-alarm", times: 3 })).rejects.toThrow(/test hooks are off/);
    await expect(shard.testHook({ corrupt: 5 })).rejects.toThrow(/test hooks are off/);
    await expect(shard.testHook()).rejects.toThrow(/test hooks are off/);
    // An append still answers: nothing was armed.
    const sent = await api("POST", `${queuePath("hooks-off-rpc")}/messages/batch`, {
      messages: Array.from({ length: 20 }, (_, i) => ({ body: i })),
    });
    expect(sent.status).toBe(200);
  });

  it("refuse at the consumer shard and the Coordinator too: nothing armed, no scale-out, no drain, no map held", async () => {
    const q = await createQueue("hooks-off-control");
    const coordinator = coordinatorFor(env, q.queue_id);
    const before = await coordinator.shardMap();
    await expect(consumerShardFor(env, q.queue_id, 0).testHook({ arm: "abort-dispatched" })).rejects.toThrow(
      /test hooks are off/,
    );
    await expect(consumerShardFor(env, q.queue_id, 0).testHook({ arm: "throw-alarm", times: 7 })).rejects.toThrow(
      /test hooks are off/,
    );
    await expect(coordinator.testHook({ action: "scale-out" })).rejects.toThrow(/test hooks are off/);
    await expect(coordinator.testHook({ action: "drain", shard: before!.shards[0]!.name })).rejects.toThrow(
      /test hooks are off/,
    );
    await expect(coordinator.testHook({ arm: "abort-scale-out", holdMapMs: 60_000 })).rejects.toThrow(
      /test hooks are off/,
    );
    const after = await coordinator.shardMap();
    expect(after!.version).toBe(before!.version);
    expect(after!.shards).toEqual(before!.shards);
  });
});
