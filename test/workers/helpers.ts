import { SELF, createExecutionContext, env, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { exports } from "cloudflare:workers";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import type { Dispatch } from "../../consumer-shard/transports";
import { createBatch, type DispatchMessage } from "../../src/consumer/entrypoint";
import { sleep } from "../../src/kernel/sleep";
import type { ErrorDetail } from "../../src/kernel/errors";
import { crc32 } from "../../src/kernel/checksum";
import type { ContentType } from "../../src/kernel/protocol";
import { consumerShardFor, coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { ManualClock } from "../../src/kernel/clock";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { bodyOf, decodeHeaders, offsetsOf, Settled } from "../../storage-shard/segments/segment";
import type { ShardqSendBatchResponse, ShardqSendResponse } from "../../broker/producer/queue-producer";
import type { Env } from "../../src/kernel/env";
import worker from "../../src/worker";

/** A stored message read back by a test: body checked against its checksum. */
export interface StoredMessage {
  id: string;
  body: Uint8Array;
  contentType: ContentType;
  size: number;
  enqueuedAt: number;
  visibleAt: number;
  attempts: number;
}

export const TOKEN = "shardq-local-dev-token";
export const ACCOUNT = "local";
export const BASE = "http://shardq.test";

export interface Envelope<T = any> {
  success: boolean;
  errors: [ErrorDetail, ...ErrorDetail[]];
  messages: unknown[];
  result: T;
  result_info?: Record<string, number>;
}

/** Calls the service's HTTP API as a client would. */
export async function api<T = any>(
  method: string,
  path: string,
  body?: unknown,
  opts: { token?: string | null; headers?: Record<string, string>; raw?: BodyInit } = {},
): Promise<{ status: number; json: Envelope<T>; headers: Headers }> {
  const headers: Record<string, string> = { ...opts.headers };
  const token = opts.token === undefined ? TOKEN : opts.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  let payload: BodyInit | undefined = opts.raw;
  if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["content-type"] ??= "application/json";
  }
  const res = await SELF.fetch(`${BASE}${path}`, { method, headers, body: payload });
  const json = (await res.json()) as Envelope<T>;
  return { status: res.status, json, headers: res.headers };
}

export const queuesPath = (account = ACCOUNT) => `/accounts/${account}/queues`;
export const queuePath = (queue: string, account = ACCOUNT) => `/accounts/${account}/queues/${queue}`;

export async function createQueue(
  name: string,
  settings?: Record<string, unknown>,
): Promise<{ queue_id: string; queue_name: string }> {
  const res = await api("POST", queuesPath(), settings ? { queue_name: name, settings } : { queue_name: name });
  if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json.result;
}

export const OTHER_TOKEN = "other-account-token";

/** Who calls a message route, when not the local account with its usual token; and extra headers. */
export interface CallOptions {
  token?: string | null;
  account?: string;
  headers?: Record<string, string>;
}

const messagesPath = (q: string, opts: CallOptions) => `${queuePath(q, opts.account)}/messages`;

/** One message sent over HTTP: `body` is the message's, `fields` sit beside it (content_type, ordering_key, id, delay_seconds). */
export const send = (q: string, body: unknown, fields: Record<string, unknown> = {}, opts: CallOptions = {}) =>
  api("POST", messagesPath(q, opts), { body, ...fields }, opts);

/** A pull over HTTP; `body` is the request's (batch_size, visibility_timeout_ms, wait_time_ms). */
export const pull = <T = any>(q: string, body: unknown = {}, opts: CallOptions = {}) =>
  api<T>("POST", `${messagesPath(q, opts)}/pull`, body, opts);

/** Acks and retries over HTTP: `body` is `{ acks, retries }`. */
export const ack = (q: string, body: unknown, opts: CallOptions = {}) =>
  api("POST", `${messagesPath(q, opts)}/ack`, body, opts);

/** A pulled message as the pull route answers it. */
export interface Pulled {
  id: string;
  body: string;
  attempts: number;
  lease_id: string;
  ordering_key?: string;
}

/** A new queue `name` with an HTTP pull consumer; `consumer` adds to or replaces the consumer's fields (settings). */
export async function pullQueue(
  name: string,
  consumer: Record<string, unknown> = {},
): Promise<{ queue_id: string; queue_name: string }> {
  const q = await createQueue(name);
  const res = await api("POST", `${queuePath(name)}/consumers`, { type: "http_pull", ...consumer });
  if (res.status !== 201) throw new Error(`pull consumer for ${name}: ${res.status} ${JSON.stringify(res.json)}`);
  return q;
}

/** Probes until `ok` holds of what `probe` answers, every 50 ms; fails after `timeoutMs` with the last value. */
export async function eventually<T>(probe: () => Promise<T>, ok: (v: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (ok(v)) return v;
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms; last value: ${JSON.stringify(v)}`);
    await sleep(50);
  }
}

/** A push consumer on `queue`: the example consumer Worker, `body` adding to or replacing its fields. */
export async function addConsumer(queue: string, body: Record<string, unknown>) {
  const res = await api("POST", `${queuePath(queue)}/consumers`, {
    type: "worker",
    script_name: "shardq-example-consumer",
    ...body,
  });
  if (res.status !== 201) throw new Error(JSON.stringify(res.json));
  return res.json.result;
}

/** A stand-in consumer handler installed in consumer shards 0..n-1; records every delivery. */
export async function fakeConsumer(
  queueId: string,
  handler: (batch: MessageBatch) => Promise<void> | void,
  opts: { shards?: number; leaseMs?: number; maxExecutionMs?: number } = {},
) {
  const deliveries: Array<{ shard: number; ids: string[]; attempts: number[]; at: number }> = [];
  for (let i = 0; i < (opts.shards ?? 1); i++) {
    const dispatch: Dispatch = async (queueName, messages: DispatchMessage[], metadata) => {
      deliveries.push({
        shard: i,
        ids: messages.map((m) => m.id),
        attempts: messages.map((m) => m.attempts),
        at: Date.now(),
      });
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

/**
 * The QueueProducer entrypoint as a producer Worker's binding sees it (props set by the binding;
 * `more` adds to them, e.g. `{ delivery_delay: 5 }`). Each call answers with a plain promise: an
 * RPC call's own promise is also a function (a pipelined call on its result), which
 * `expect(...).rejects` would call instead of awaiting it.
 */
export function producer(queue: string, account = ACCOUNT, more: Record<string, unknown> = {}): ProducerBinding {
  const stub = (exports as any).QueueProducer({ props: { account, queue, ...more } });
  return {
    send: (body, options) => Promise.resolve(stub.send(body, options)),
    sendBatch: (messages, options) => Promise.resolve(stub.sendBatch(messages, options)),
    metrics: () => Promise.resolve(stub.metrics()),
  };
}

export interface ProducerBinding {
  send(body: unknown, options?: Record<string, unknown>): Promise<ShardqSendResponse>;
  sendBatch(messages: unknown, options?: Record<string, unknown>): Promise<ShardqSendBatchResponse>;
  metrics(): Promise<{ backlogCount: number; backlogBytes: number; oldestMessageTimestamp?: Date }>;
}

/**
 * Up to `limit` unsettled messages a storage shard holds, in segments after `afterSeg`,
 * in arrival order, read from its SQLite inside the object, untouched: no RPC, no lease,
 * nothing counted. A body that no longer matches its checksum is listed in `corrupt`,
 * never returned. `nextSeg` is where the next page starts, null after the last.
 */
export async function peekShard(shard: DurableObjectStub<StorageShard>, limit = 100, afterSeg = 0) {
  return runInDurableObject(shard, (_obj: StorageShard, state) => {
    const messages: StoredMessage[] = [];
    const corrupt: string[] = [];
    let nextSeg: number | null = null;
    for (const r of state.storage.sql.exec<{ seg: number; settled: ArrayBuffer; headers: string; bodies: ArrayBuffer }>(
      "SELECT seg, settled, headers, bodies FROM segments WHERE seg > ? ORDER BY seg",
      afterSeg,
    )) {
      const headers = decodeHeaders(r.headers);
      const settled = Settled.of(r.settled);
      const offsets = offsetsOf(headers);
      headers.forEach((h, slot) => {
        if (settled.has(slot)) return;
        const body = bodyOf(r.bodies, offsets, headers, slot);
        if (crc32(body) !== h.checksum) corrupt.push(h.id);
        else
          messages.push({
            id: h.id,
            body,
            contentType: h.contentType,
            size: h.size,
            enqueuedAt: h.sentAt || h.enqueuedAt,
            visibleAt: Math.max(h.dueAt, h.enqueuedAt),
            attempts: h.attempts,
          });
      });
      if (messages.length + corrupt.length >= limit) {
        nextSeg = r.seg;
        break;
      }
    }
    return { messages, corrupt, nextSeg };
  });
}

/** Every message stored on every shard of a queue, read back from the shards' SQLite (checksums verified). */
export async function storedMessages(queue: string) {
  const map = await coordinatorFor(env, (await api("GET", queuePath(queue))).json.result.queue_id).shardMap();
  if (!map) throw new Error(`no shard map for ${queue}`);
  const out: Array<StoredMessage & { shard: string }> = [];
  const corrupt: string[] = [];
  for (const s of map.shards) {
    let after = 0;
    for (;;) {
      const page = await peekShard(storageShardFor(env, s.name), 1000, after);
      for (const m of page.messages) out.push({ ...m, shard: s.name });
      corrupt.push(...page.corrupt);
      if (page.nextSeg === null) break;
      after = page.nextSeg;
    }
  }
  return { messages: out, corrupt, map };
}

export async function backlog(queue: string): Promise<number> {
  return (await api("GET", `${queuePath(queue)}/metrics`)).json.result.backlog_count;
}

/** Puts every storage shard of a queue on one fake clock; returns the clock and the shard names. */
export async function shardsOnFakeClock(queueId: string) {
  const clock = new ManualClock();
  const map = (await coordinatorFor(env, queueId).shardMap())!;
  for (const s of map.shards) {
    await runInDurableObject(storageShardFor(env, s.name), (obj: StorageShard) => {
      obj.clock = clock;
    });
  }
  return { clock, shards: map.shards.map((s) => s.name) };
}

/**
 * GET and HEAD of `path` through the Worker's own fetch handler, given an env that records
 * what is read from it: the statuses, and every binding the requests touched.
 */
export async function bindingsReadServing(path: string): Promise<{ statuses: number[]; read: string[] }> {
  const read: string[] = [];
  const spy = new Proxy(env, {
    get: (target, key, receiver) => (read.push(String(key)), Reflect.get(target, key, receiver)),
  }) as Env;
  const statuses: number[] = [];
  for (const method of ["GET", "HEAD"]) {
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request(`${BASE}${path}`, { method }), spy, ctx);
    await waitOnExecutionContext(ctx);
    statuses.push(res.status);
    await res.arrayBuffer();
  }
  return { statuses, read };
}

/** A fresh storage shard of `queueId`, activated, on a manual clock starting at `t`. */
export async function shardOnClock(name: string, queueId: string, t = 1_000_000) {
  const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name));
  await shard.activate({ name, queueId, accountId: "local", region: "local" });
  const clock = new ManualClock(t);
  await runInDurableObject(shard, (obj: StorageShard) => {
    obj.clock = clock;
  });
  return { shard, clock };
}
