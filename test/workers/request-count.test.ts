// The isolate's count of Durable Object requests (src/kernel/sql-meter.ts requestsCounted),
// which `npm run bench -- many` reads over a quiet window through the test hooks' route:
// every object's RPCs and alarms add to it, storage shards' included, and reading it
// through the route asks no object.
import { createExecutionContext, env, runDurableObjectAlarm, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { requestsCounted } from "../../src/kernel/sql-meter";
import worker from "../../src/worker";
import { ACCOUNT, BASE, TOKEN, api, createQueue } from "./helpers";

const REQUESTS = `/accounts/${ACCOUNT}/test-hooks/requests`;

/** GET the route as the bench does, with the hooks on (the workers pool's config leaves them off). */
async function readRoute(path = REQUESTS): Promise<{ status: number; json: any }> {
  const ctx = createExecutionContext();
  const res = await worker.fetch!(
    new Request(`${BASE}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } }) as any,
    { ...env, SHARDQ_TEST_HOOKS: "on" } as any,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return { status: res.status, json: await res.json() };
}

describe("the isolate's count of Durable Object requests", () => {
  it("counts each RPC of a Coordinator once", async () => {
    // A Coordinator of no queue: it serves the calls and arms nothing that could add to the count meanwhile.
    const coordinator = coordinatorFor(env, "0".repeat(32));
    const before = requestsCounted();
    await coordinator.info();
    await coordinator.consumers();
    expect(requestsCounted() - before).toBe(2);
  });

  it("counts a storage shard's RPCs and its alarms", async () => {
    const q = await createQueue("request-count-shard");
    const map = await coordinatorFor(env, q.queue_id).shardMap();
    const shard = storageShardFor(env, map!.shards[0]!.name);
    // At least: another shard of the queue may run its alarm meanwhile.
    let before = requestsCounted();
    for (let i = 0; i < 3; i++) await shard.stats();
    expect(requestsCounted() - before).toBeGreaterThanOrEqual(3);
    before = requestsCounted();
    // The alarm, and the heartbeat it sends the Coordinator.
    expect(await runDurableObjectAlarm(shard)).toBe(true);
    expect(requestsCounted() - before).toBeGreaterThanOrEqual(2);
    expect((await shard.stats()).cost.alarms).toBeGreaterThanOrEqual(1);
  });

  it("is read through the test hooks' route without a Durable Object request", async () => {
    const first = await readRoute();
    expect(first.status).toBe(200);
    expect(first.json.result.requests).toBe(requestsCounted());
    const second = await readRoute();
    expect(second.json.result.requests).toBe(first.json.result.requests);
  });

  it("answers 404 as an unknown path without SHARDQ_TEST_HOOKS, and 401 without a token", async () => {
    const res = await api("GET", REQUESTS);
    expect(res.status).toBe(404);
    expect(res.json.errors[0].message).toBe(`no route for GET ${REQUESTS}`);
    expect((await api("GET", REQUESTS, undefined, { token: null })).status).toBe(401);
  });
});
