/**
 * applyDisposition, the one place a disposition is carried out for push and pull
 * consumers: messages out of retries are stored at the dead-letter queue before their
 * source copies are settled, a failed dead-letter write keeps them for a later try, and
 * a disposition naming a message it does not hold is refused before anything is settled.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { applyDisposition } from "../../src/delivery/settle";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { crc32 } from "../../src/kernel/checksum";
import { leaseRefOf, type EncodedMessage, type LeasedMessage } from "../../src/kernel/protocol";
import { ACCOUNT, createQueue, storedMessages } from "./helpers";

const utf8 = new TextEncoder();
const storedIds = async (q: string) => (await storedMessages(q)).messages.map((m) => m.id).sort();

/** `count` messages stored on the first shard of a new queue `name` and leased there. */
async function leasedIn(
  name: string,
  count: number,
): Promise<{ queue: { accountId: string; queueId: string }; shard: string; messages: LeasedMessage[] }> {
  const { queue_id: queueId } = await createQueue(name);
  const shard = (await coordinatorFor(env, queueId).shardMap())!.shards[0]!.name;
  const messages: EncodedMessage[] = Array.from({ length: count }, (_, i) => {
    const body = utf8.encode(JSON.stringify(`${name} ${i}`));
    return {
      id: `${crc32(body).toString(16)}${i}`.padEnd(32, "0"),
      body,
      contentType: "json",
      delayMs: 0,
      checksum: crc32(body),
    };
  });
  await storageShardFor(env, shard).append({ queueId, messages });
  const leased = await storageShardFor(env, shard).lease({
    queueId,
    limit: count,
    leaseMs: 60_000,
    maxWaitMs: 0,
    retentionMs: 1e12,
  });
  expect(leased.messages).toHaveLength(count);
  return { queue: { accountId: ACCOUNT, queueId }, shard, messages: leased.messages };
}

describe("carrying out a disposition", () => {
  it("stores messages out of retries at the dead-letter queue, then settles acks, retries and those in one call", async () => {
    await createQueue("settle-dlq-dead");
    const {
      queue,
      shard,
      messages: [a, b, c],
    } = await leasedIn("settle-dlq", 3);
    const d = {
      acks: [leaseRefOf(a!)],
      retries: [{ ref: leaseRefOf(b!), delayMs: 5000 }],
      outOfRetries: [leaseRefOf(c!)],
    };
    const r = await applyDisposition(env, queue, { dead_letter_queue: "settle-dlq-dead" }, shard, d, [a!, b!, c!]);
    expect(r).toEqual({ acked: 1, retried: 1, deadLettered: 1, dropped: 0, stale: [] });
    expect(await storedIds("settle-dlq")).toEqual([b!.id]);
    expect(await storedIds("settle-dlq-dead")).toEqual([c!.id]);
  });

  it("keeps messages out of retries, to try again later, when the dead-letter queue cannot be written", async () => {
    const { queue, shard, messages } = await leasedIn("settle-dlq-missing", 2);
    const before = Date.now();
    const d = { acks: [], retries: [], outOfRetries: messages.map(leaseRefOf) };
    const r = await applyDisposition(env, queue, { dead_letter_queue: "settle-no-such-queue" }, shard, d, messages);
    expect(r).toEqual({ acked: 0, retried: 2, deadLettered: 0, dropped: 0, stale: [] });
    const kept = (await storedMessages("settle-dlq-missing")).messages;
    expect(kept.map((m) => m.id).sort()).toEqual(messages.map((m) => m.id).sort());
    // Not at once (the queue is still missing), and not never: a later try may find it.
    for (const m of kept) expect(m.visibleAt).toBeGreaterThanOrEqual(before + 30_000);
  });

  it("drops messages out of retries when there is no dead-letter queue, needing no message bodies", async () => {
    const { queue, shard, messages } = await leasedIn("settle-drop", 2);
    const r = await applyDisposition(
      env,
      queue,
      { dead_letter_queue: null },
      shard,
      { acks: [], retries: [], outOfRetries: messages.map(leaseRefOf) },
      [],
    );
    expect(r).toEqual({ acked: 0, retried: 0, deadLettered: 0, dropped: 2, stale: [] });
    expect(await storedIds("settle-drop")).toEqual([]);
  });

  it("refuses to settle a message out of retries it does not hold when the dead-letter queue needs it, settling nothing", async () => {
    await createQueue("settle-unheld-dead");
    const {
      queue,
      shard,
      messages: [a, b],
    } = await leasedIn("settle-unheld", 2);
    const d = { acks: [leaseRefOf(a!)], retries: [], outOfRetries: [leaseRefOf(b!)] };
    await expect(
      applyDisposition(env, queue, { dead_letter_queue: "settle-unheld-dead" }, shard, d, [a!]),
    ).rejects.toThrow(/not held/);
    expect(await storedIds("settle-unheld")).toEqual([a!.id, b!.id].sort());
    expect(await storedIds("settle-unheld-dead")).toEqual([]);
  });
});
