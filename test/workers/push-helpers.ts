/** Push-delivery helpers shared by the delivery suites: a stand-in handler in consumer shards, a consumer, a wait. */
import { env, runInDurableObject } from "cloudflare:test";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import type { Dispatch } from "../../consumer-shard/transports";
import { consumerShardFor } from "../../src/kernel/addressing";
import { createBatch, type DispatchMessage } from "../../src/consumer/entrypoint";
import { api, queuePath } from "./helpers";

export async function eventually<T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v)) return v;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms; last value: ${JSON.stringify(v)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function addConsumer(queue: string, body: Record<string, unknown>) {
  const res = await api("POST", `${queuePath(queue)}/consumers`, { type: "worker", script_name: "shardq-example-consumer", ...body });
  if (res.status !== 201) throw new Error(JSON.stringify(res.json));
  return res.json.result;
}

/** A stand-in consumer handler installed in consumer shards 0..n-1; records every delivery. */
export async function fakeConsumer(queueId: string, handler: (batch: MessageBatch) => Promise<void> | void, opts: { shards?: number; leaseMs?: number; maxExecutionMs?: number } = {}) {
  const deliveries: Array<{ shard: number; ids: string[]; attempts: number[]; at: number }> = [];
  for (let i = 0; i < (opts.shards ?? 1); i++) {
    const dispatch: Dispatch = async (queueName, messages: DispatchMessage[], metadata) => {
      deliveries.push({ shard: i, ids: messages.map((m) => m.id), attempts: messages.map((m) => m.attempts), at: Date.now() });
      const { batch, outcome } = createBatch(queueName, messages, metadata);
      try {
        await handler(batch);
        return outcome("ok");
      } catch {
        return outcome("exception");
      }
    };
    await runInDurableObject(consumerShardFor(env, queueId, i), (obj: ConsumerShard) => {
      obj.dispatchOverride = dispatch;
      if (opts.leaseMs) obj.leaseMs = opts.leaseMs;
      if (opts.maxExecutionMs) obj.maxExecutionMs = opts.maxExecutionMs;
    });
  }
  return deliveries;
}

