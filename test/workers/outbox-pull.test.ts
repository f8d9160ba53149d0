/**
 * The outbox and the inbox with a pull consumer: the probe's producer objects send through
 * shardq's producer binding to "outbox-e2e" (vitest.config.ts), here a queue with an HTTP pull
 * consumer, one object in envelopes and one with ids: "id". The test pulls as a pull consumer
 * does, hands the messages to the consumer object, and acks by its outcomes: a consumer that
 * applied a batch and died before acking it gets the batch again once its leases run out, and the
 * inbox acks it without applying anything twice.
 */
import { describe, expect, it } from "vitest";
import { sleep } from "../../src/kernel/sleep";
import { ack, eventually, pull, pullQueue, type Pulled } from "./helpers";
import { consumerObject, producerObject } from "./outbox-helpers";

const QUEUE = "outbox-e2e";
const LEASE_MS = 1000;

/** A pull as a pull consumer reads it: a json body comes as base64 of its text (Cloudflare's encoding), parsed here. */
async function pullParsed() {
  const res = await pull<{ messages: Pulled[] }>(QUEUE, { batch_size: 100, visibility_timeout_ms: LEASE_MS });
  expect(res.status).toBe(200);
  const text = (b64: string) => new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)));
  return res.json.result.messages.map((m) => ({ ...m, body: JSON.parse(text(m.body)) as unknown }));
}

describe("with a pull consumer", () => {
  it("applies each message once, the batch that came again after its leases ran out acked untouched", async () => {
    await pullQueue(QUEUE, { settings: { max_retries: 10, retry_delay: 0 } });
    const enveloped = await producerObject("pull-envelope", { queue: "shardq" });
    const bare = await producerObject("pull-id", { queue: "shardq", options: { ids: "id" } });
    const ids = [
      (await enveloped.add(1)).id,
      ...(await enveloped.addMany([2, 3])),
      (await bare.add(4)).id,
      ...(await bare.addMany([5, 6])),
    ];
    await eventually(
      async () => (await enveloped.rows()) + (await bare.rows()),
      (n) => n === 0,
    );
    const consumer = consumerObject("pull");

    // Applied, never acked: the consumer died in between.
    const first = await eventually(pullParsed, (m) => m.length === 6);
    const applied = await consumer.apply(first.map(({ id, body }) => ({ id, body })));
    expect(applied.outcomes.map((o) => o.outcome)).toEqual(Array(6).fill("applied"));
    expect(applied.total).toBe(21);
    expect(applied.applied.toSorted()).toEqual(ids.toSorted());

    // The leases run out and the same messages come again: duplicates, acked, nothing applied twice.
    await sleep(LEASE_MS + 200);
    const again = await eventually(pullParsed, (m) => m.length === 6);
    expect(again.map((m) => m.id).toSorted()).toEqual(first.map((m) => m.id).toSorted());
    expect(again.every((m) => m.attempts === 2)).toBe(true);
    const repeat = await consumer.apply(again.map(({ id, body }) => ({ id, body })));
    expect(repeat.outcomes.map((o) => o.outcome)).toEqual(Array(6).fill("duplicate"));
    expect(repeat.total).toBe(21);
    const acked = await ack(QUEUE, { acks: again.map((m) => ({ lease_id: m.lease_id })) });
    expect(acked.status).toBe(200);

    await sleep(LEASE_MS + 200);
    expect(await pullParsed()).toEqual([]);
  }, 30_000);
});
