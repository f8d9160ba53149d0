/**
 * The leases suites' storage shard and messages (leases.test.ts, leases-restarts.test.ts): one
 * queue id, messages with ids of their own, shards on a manual clock, and a lease request.
 */
import { crc32 } from "../../src/kernel/checksum";
import type { EncodedMessage, LeaseRequest } from "../../src/kernel/protocol";
import { shardOnClock } from "./helpers";

export const QUEUE = "l".padEnd(32, "0");
const utf8 = new TextEncoder();
let n = 0;

export function msg(body = "x", delayMs = 0): EncodedMessage {
  const bytes = utf8.encode(body);
  return {
    id: (n++).toString(16).padStart(32, "0"),
    body: bytes,
    contentType: "text",
    delayMs,
    checksum: crc32(bytes),
  };
}

/** A fresh shard on a manual clock. */
export const shardAt = (name: string, t = 1_000_000) => shardOnClock(name, QUEUE, t);

export const req = (over: Partial<LeaseRequest> = {}): LeaseRequest => ({
  queueId: QUEUE,
  limit: 10,
  leaseMs: 30_000,
  maxWaitMs: 5000,
  retentionMs: 345_600_000,
  ...over,
});
