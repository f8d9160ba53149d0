// An idle queue costs nothing (docs/cost.md), under `wrangler dev` as `npm start` runs it: a
// new queue starts with one storage shard; once its traffic has ended and its objects have
// reported their last, the stack makes no Durable Object request at all (counted across the
// isolate by the test hooks' route, which asks no object); and the first send after the sleep
// wakes what it needs: a waiting long poll answers with it, and the push consumer takes its message.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { applyConfig } from "../../cli/workers/apply-config.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";
import { sleep } from "../../src/kernel/sleep.ts";
import { HEADERS as headers, TOKEN } from "./helpers.ts";

/** Longest the stack may take to fall asleep after its last message: the 60 s, and the Coordinator's last ticks. */
const SLEEP_WITHIN_MS = 90_000;

describe("an idle queue under wrangler dev", () => {
  let service: DevService | undefined;
  let base = "";
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${base}/accounts/local${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, json: (await res.json()) as { result: any } };
  };
  const requests = async () => (await api("GET", "/test-hooks/requests")).json.result.requests as number;
  const backlog = async (queue: string) =>
    (await api("GET", `/queues/${queue}/metrics`)).json.result.backlog_count as number;
  const waitFor = async (check: () => Promise<boolean>, ms: number, what: string) => {
    const until = Date.now() + ms;
    while (!(await check())) {
      if (Date.now() > until) throw new Error(`${what}: not within ${ms} ms`);
      await sleep(200);
    }
  };

  beforeAll(async () => {
    service = await startDevService("sleep", ["--var", "SHARDQ_TEST_HOOKS:on"]);
    base = service.base;
    await applyConfig(base, TOKEN);
  });

  afterAll(async () => {
    await service?.stop();
  });

  it("starts with one storage shard, makes no Durable Object request once idle, and wakes on the next send", async () => {
    expect((await api("POST", "/queues", { queue_name: "sleep-pull" })).status).toBe(201);
    expect((await api("POST", "/queues/sleep-pull/consumers", { type: "http_pull" })).status).toBeLessThan(300);
    for (const q of ["example", "sleep-pull"]) {
      const shards = (await api("GET", `/queues/${q}/shards`)).json.result.shards as Array<{ state: string }>;
      expect(shards.filter((s) => s.state === "active")).toHaveLength(1);
    }

    // Some traffic: three messages each, the pull consumer's acked, the push consumer's taken.
    for (const q of ["example", "sleep-pull"]) {
      expect(
        (await api("POST", `/queues/${q}/messages/batch`, { messages: [{ body: 1 }, { body: 2 }, { body: 3 }] }))
          .status,
      ).toBe(200);
    }
    const pulled = (await api("POST", "/queues/sleep-pull/messages/pull", { batch_size: 10 })).json.result
      .messages as Array<{ lease_id: string }>;
    expect(pulled).toHaveLength(3);
    await api("POST", "/queues/sleep-pull/messages/ack", { acks: pulled.map((m) => ({ lease_id: m.lease_id })) });
    await waitFor(async () => (await backlog("example")) === 0, 20_000, "the push consumer takes its messages");

    // Left alone, everything falls asleep: two readings 15 s apart that are equal.
    const start = Date.now();
    let last = await requests();
    for (;;) {
      await sleep(15_000);
      const now = await requests();
      if (now === last) break;
      if (Date.now() - start > SLEEP_WITHIN_MS)
        throw new Error(`still ${now - last} requests in 15 s after ${Date.now() - start} ms`);
      last = now;
    }
    // Asleep: a further 20 s without a single request.
    const before = await requests();
    await sleep(20_000);
    expect((await requests()) - before).toBe(0);
    // Each shard said so in its last report, the one its quiet work sent once its requests
    // stopped: none is left awake on a slow cadence, its figures are exact, and the push
    // consumer's acks (held in memory to ride on a later write) were written before the
    // platform could evict the object: nothing was delivered twice.
    for (const q of ["example", "sleep-pull"]) {
      const shards = (await api("GET", `/queues/${q}/metrics`)).json.result.shards as Array<{
        name: string;
        state: string;
        heartbeat: { sleeping: boolean; totals: Record<string, number> };
      }>;
      for (const s of shards.filter((x) => x.state === "active")) {
        expect(s.heartbeat, `${q} ${s.name}`).toMatchObject({
          sleeping: true,
          totals: { stored: 3, leased: 3, acked: 3 },
        });
      }
    }

    // The first send after the sleep: a waiting long poll answers with it.
    const poll = api("POST", "/queues/sleep-pull/messages/pull", { batch_size: 10, wait_time_ms: 20_000 });
    await sleep(1000);
    const sentAt = Date.now();
    const sent = await api("POST", "/queues/sleep-pull/messages", { body: "after the sleep" });
    expect(sent.status).toBe(200);
    const answer = (await poll).json.result.messages as Array<{ id: string }>;
    expect(answer.map((m) => m.id)).toEqual([sent.json.result.message_id]);
    expect(Date.now() - sentAt).toBeLessThan(5000);
    // And the push consumer takes its own.
    expect((await api("POST", "/queues/example/messages", { body: "after the sleep" })).status).toBe(200);
    await waitFor(
      async () => (await backlog("example")) === 0,
      10_000,
      "the push consumer takes the message sent after the sleep",
    );
  });
});
