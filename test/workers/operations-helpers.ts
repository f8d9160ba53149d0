/**
 * The queue operations' suites (operations.test.ts, redrive.test.ts): a queue on a fake clock,
 * messages written straight to a storage shard, and a dead-letter queue filled the way a consumer
 * fills it.
 */
import { expect } from "vitest";
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage } from "../../src/kernel/protocol";
import { api, createQueue, queuePath, shardsOnFakeClock } from "./helpers";

export const redrive = (q: string, body?: unknown) => api("POST", `${queuePath(q)}/redrive`, body);

/** A queue whose storage shards all run on one fake clock. */
export async function opsQueue(name: string, settings?: Record<string, unknown>) {
  const q = await createQueue(name, settings);
  return { ...q, ...(await shardsOnFakeClock(q.queue_id)) };
}

const utf8 = new TextEncoder();
// Ids unique within a test file, as each file has storage of its own.
let idSeq = 0;
export function encoded(attempts: number): EncodedMessage {
  const body = utf8.encode(`"dead ${idSeq}"`);
  return {
    id: (0xd0000000 + idSeq++).toString(16).padStart(32, "0"),
    body,
    contentType: "json",
    delayMs: 0,
    checksum: crc32(body),
    attempts,
  };
}

/** A queue with an http_pull consumer that dead-letters on the first failed delivery. */
export async function withDeadLetters(source: string, dlq: string) {
  await createQueue(dlq);
  await createQueue(source);
  const res = await api("POST", `${queuePath(source)}/consumers`, {
    type: "http_pull",
    settings: { max_retries: 0 },
    dead_letter_queue: dlq,
  });
  expect(res.status).toBe(201);
}

/** Sends, pulls and fails each message once: it moves to the dead-letter queue, id kept. */
export async function deadLetter(source: string, count: number): Promise<string[]> {
  const ids: string[] = (
    await api("POST", `${queuePath(source)}/messages/batch`, {
      messages: Array.from({ length: count }, (_, i) => ({ body: i })),
    })
  ).json.result.message_ids;
  const pulled = (await api("POST", `${queuePath(source)}/messages/pull`, { batch_size: 100 })).json.result
    .messages as Array<{ lease_id: string }>;
  expect(pulled).toHaveLength(count);
  const acked = await api("POST", `${queuePath(source)}/messages/ack`, {
    retries: pulled.map((m) => ({ lease_id: m.lease_id })),
  });
  expect(acked.json.result.warnings).toEqual({});
  return ids;
}
