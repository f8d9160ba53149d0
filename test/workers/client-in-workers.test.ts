/**
 * The client library (src/client, `shardq/client`) inside a Worker: the same code Node runs,
 * here in workerd, reaching the service through a binding's fetch (SELF), as a Worker that
 * drives shardq over HTTP would through a service binding.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ConflictError, createClient, InvalidRequestError } from "../../src/client/index.ts";
import { sleep } from "../../src/kernel/sleep";
import { backlog, BASE, createQueue, pullQueue, TOKEN } from "./helpers";

const client = () =>
  createClient({
    url: BASE,
    token: TOKEN,
    fetch: (url, init) => SELF.fetch(url, init),
    retry: { attempts: 3, baseDelayMs: 10, maxDelayMs: 50 },
  });

/** A new queue with an HTTP pull consumer, as the client library sees it. */
async function clientQueue(name: string) {
  await pullQueue(name);
  return client().queue<{ i: number }>(name);
}

describe("the client library in a Worker", () => {
  it("sends a split batch once under one key, however often it is sent", async () => {
    const q = await clientQueue("client-workers-send");
    const batch = Array.from({ length: 150 }, (_, i) => ({ body: { i }, orderingKey: `k${i % 4}` }));
    const first = await q.sendBatch(batch, { idempotencyKey: "batch-1" });
    const again = await q.sendBatch(batch, { idempotencyKey: "batch-1" });
    expect(first.requests).toBe(2);
    expect(again.messageIds).toEqual(first.messageIds);
    expect(new Set(first.messageIds).size).toBe(150);
    expect(await backlog("client-workers-send")).toBe(150);
  });

  it("runs the consumer loop to the end of the queue and settles everything", async () => {
    const q = await clientQueue("client-workers-loop");
    await q.sendBatch(Array.from({ length: 60 }, (_, i) => ({ body: { i } })));
    const seen = new Set<number>();
    const stop = new AbortController();
    const summary = await q.consume(
      (m) => {
        seen.add(m.body.i);
        if (seen.size === 60) stop.abort();
      },
      { concurrency: 5, waitTimeMs: 500, signal: stop.signal },
    );
    expect(seen.size).toBe(60);
    expect(summary).toMatchObject({ handled: 60, failed: 0, acked: 60 });
    expect(await backlog("client-workers-loop")).toBe(0);
  });

  it("long-polls: a pull that waits gets the message sent while it waits", async () => {
    const q = await clientQueue("client-workers-wait");
    const waiting = q.pull({ waitTimeMs: 5_000, batchSize: 1 });
    await sleep(100);
    await q.send({ i: 1 });
    const { messages } = await waiting;
    expect(messages.map((m) => m.body)).toEqual([{ i: 1 }]);
  });

  it("throws the API's errors typed, with their fields", async () => {
    await createQueue("client-workers-no-consumer");
    const q = client().queue("client-workers-no-consumer");
    const conflict = await q.pull().catch((e: unknown) => e);
    expect(conflict).toBeInstanceOf(ConflictError);
    expect((conflict as ConflictError).field).toBe("queue");
    const invalid = await q.pull({ waitTimeMs: 20_001 }).catch((e: unknown) => e);
    expect(invalid).toBeInstanceOf(InvalidRequestError);
    expect((invalid as InvalidRequestError).field).toBe("wait_time_ms");
  });
});
