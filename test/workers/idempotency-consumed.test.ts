/**
 * Found by the fault harness (abort-append with an Idempotency-Key retry,
 * `npm run test:faults -- --seed 20261121 --messages 200000 --faults kill,abort-append,abort-ack --kills 20 --aborts 20`):
 * a request that stored its messages and died before marking its key done, whose
 * messages were then delivered and acked, was stored AGAIN by a retry with the same
 * key: the shard's check of recent rows no longer found the acked message. Storage
 * shards now remember ids written with sender-chosen or kept ids for a day
 * (storage-shard/remembered-ids.ts).
 */
import { createExecutionContext, env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { bucketOf } from "../../broker/idempotency";
import { router } from "../../broker/router";
import { IN_PROGRESS_MS, type IdempotencyKeys, type KeyClaim } from "../../coordinator/idempotency-keys";
import { idempotencyKeysFor } from "../../src/addressing";
import { api, backlog, BASE, createQueue, queuePath, TOKEN } from "./helpers";

const KEY = "idempotency-key";

describe("Idempotency-Key after consumption", () => {
  it("stores nothing again when the first request stored, died before marking its key done, and its message was acked before the retry", async () => {
    const q = await createQueue("idem-consumed");
    expect((await api("POST", `${queuePath("idem-consumed")}/consumers`, { type: "http_pull" })).status).toBe(201);
    // The first request stores its message and dies before marking its key done
    // (as a storage shard reset after the write and before the reply makes it do).
    const lostComplete = {
      idFromName: (name: string) => env.IDEMPOTENCY_KEYS.idFromName(name),
      get: (id: DurableObjectId) => {
        const target = env.IDEMPOTENCY_KEYS.get(id);
        return {
          claim: (claims: KeyClaim[], token: string) => target.claim(claims, token),
          release: (keys: string[], token: string, sent: boolean) => target.release(keys, token, sent),
          complete: () => Promise.reject(new Error("isolate gone")),
        };
      },
    };
    const request = new Request(`${BASE}${queuePath("idem-consumed")}/messages`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", [KEY]: "consumed" },
      body: JSON.stringify({ body: "once" }),
    });
    const res = await router.fetch(request, { ...env, IDEMPOTENCY_KEYS: lostComplete as unknown as typeof env.IDEMPOTENCY_KEYS }, createExecutionContext());
    const id = ((await res.json()) as { result: { message_id: string } }).result.message_id;

    // A consumer takes it and acks it: confirmed.
    const pulled = await api("POST", `${queuePath("idem-consumed")}/messages/pull`, { batch_size: 10 });
    expect(pulled.json.result.messages.map((m: { id: string }) => m.id)).toEqual([id]);
    const acked = await api("POST", `${queuePath("idem-consumed")}/messages/ack`, { acks: [{ lease_id: pulled.json.result.messages[0].lease_id }] });
    expect(acked.json.result).toMatchObject({ ackCount: 1, warnings: {} });

    // The producer, which never got its answer, sends again with the key once the claim
    // is free (the broker released it on the failed reply; here: after IN_PROGRESS_MS).
    await runInDurableObject(idempotencyKeysFor(env, q.queue_id, bucketOf("key:consumed")), (obj: IdempotencyKeys) => {
      obj.clock = { now: () => Date.now() + IN_PROGRESS_MS + 1000 };
    });
    const again = await api("POST", `${queuePath("idem-consumed")}/messages`, { body: "once" }, { headers: { [KEY]: "consumed" } });
    expect(again.json.result.message_id).toBe(id);
    // Nothing stored again: the message was delivered and acked once. (Today: 1.)
    expect(await backlog("idem-consumed")).toBe(0);
  });
});
