/**
 * The ordered-lanes suites' queue and calls (ordered-lanes.test.ts, ordered-lanes-operations.test.ts):
 * a pull queue on storage shards with a fake clock, pulls that leave everything leased, and a key's
 * messages sent one after another.
 */
import { expect } from "vitest";
import { pull, type Pulled, pullQueue, send, shardsOnFakeClock } from "./helpers";

export async function orderedQueue(name: string, consumer: Record<string, unknown> = {}) {
  const q = await pullQueue(name, {
    settings: { visibility_timeout_ms: 1000, max_retries: 3, ...(consumer.settings as object) },
    ...consumer,
  });
  return { ...q, ...(await shardsOnFakeClock(q.queue_id)) };
}

/** Pulls until nothing more comes (a pull asks the shards in turn), leaving everything leased. */
export async function pullAll(q: string, batchSize = 100): Promise<Pulled[]> {
  const out: Pulled[] = [];
  for (let i = 0; i < 8; i++) {
    const got = (await pull(q, { batch_size: batchSize })).json.result.messages as Pulled[];
    out.push(...got);
  }
  return out;
}

export const bodies = (ms: Pulled[]) => ms.map((m) => JSON.parse(atob(m.body)) as string);

/** Sends a key's messages one after another, each accepted before the next is sent. */
export async function sendInOrder(q: string, key: string, names: string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const n of names) {
    const res = await send(q, n, { ordering_key: key });
    expect(res.status).toBe(200);
    ids.push(res.json.result.message_id);
  }
  return ids;
}
