/**
 * The pull suites' queue and calls (pull.test.ts, pull-acks.test.ts): an http_pull queue on a fake
 * clock, a pull of one message, and the ids of a pull's answer.
 */
import { expect } from "vitest";
import { pull, pullQueue, shardsOnFakeClock } from "./helpers";

/**
 * A queue with an http_pull consumer whose storage shards all run on one fake clock,
 * so visibility timeouts and retry delays pass without waiting.
 */
export async function clockedPullQueue(name: string, consumer: Record<string, unknown> = {}) {
  const q = await pullQueue(name, { settings: { visibility_timeout_ms: 1000, max_retries: 1 }, ...consumer });
  return { ...q, ...(await shardsOnFakeClock(q.queue_id)) };
}

export async function pullOne(q: string) {
  const res = await pull(q, { batch_size: 1 });
  expect(res.status).toBe(200);
  expect(res.json.result.messages).toHaveLength(1);
  return res.json.result.messages[0];
}

export const ids = (res: { json: { result: { messages: Array<{ id: string }> } } }) =>
  res.json.result.messages.map((m) => m.id).sort();
