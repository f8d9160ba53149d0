/**
 * The pull consumer's three calls (POST .../messages/pull, /ack, /extend) and the
 * messages a pull gives, bodies decoded as the sender sent them.
 */
import { LIMITS, MAX_PULL_WAIT_MS } from "../kernel/limits.ts";
import { invalid } from "./errors.ts";
import type { RetryPolicy } from "./retry.ts";
import type { Envelope, Transport } from "./transport.ts";

export interface PullOptions {
  /** At most this many messages (1 to 100). Default 5, as Cloudflare's. */
  batchSize?: number;
  /** How long the messages stay leased to you (1,000 ms to 12 h). Default: the consumer's setting, else 30 s. */
  visibilityTimeoutMs?: number;
  /** With nothing ready, wait up to this long for messages (0 to 20,000 ms). Default 0. */
  waitTimeMs?: number;
  signal?: AbortSignal | undefined;
  /** Overrides the client's retry policy for this call. */
  retry?: RetryPolicy | undefined;
}

/** A message a pull leased, its body decoded. */
export interface PulledMessage<Body = unknown> {
  readonly id: string;
  readonly body: Body;
  /** When it was first sent. */
  readonly timestamp: Date;
  /** Deliveries so far, this one included. */
  readonly attempts: number;
  /** How the sender sent it: json and text are decoded; bytes and v8 bodies come as their stored bytes. */
  readonly contentType: string;
  readonly orderingKey?: string;
  /** What ack, retry and extend name it by. */
  readonly leaseId: string;
}

export interface PullResult<Body = unknown> {
  messages: PulledMessage<Body>[];
  /** Messages in the queue, as of the pull. */
  backlogCount: number;
}

export interface AckRequest {
  acks?: string[];
  retries?: Array<{ leaseId: string; delaySeconds?: number }>;
}

export interface AckResult {
  ackCount: number;
  retryCount: number;
  /** Lease ids that were not honoured, with the reason (the lease ended, the message is gone, a shard did not answer). */
  warnings: Record<string, string>;
}

export interface ExtendResult {
  extended: number;
  warnings: Record<string, string>;
}

/** How many lease ids one ack or extend call takes. */
export const MAX_LEASES_PER_CALL = 100;

interface WireMessage {
  id: string;
  body: string;
  timestamp_ms: number;
  attempts: number;
  lease_id: string;
  metadata?: Record<string, string>;
  ordering_key?: string;
}

export async function pull<Body = unknown>(
  transport: Transport,
  queue: string,
  opts: PullOptions = {},
): Promise<PullResult<Body>> {
  const body: Record<string, number> = {};
  if (opts.batchSize !== undefined) body.batch_size = whole(opts.batchSize, "batch_size", 1, LIMITS.maxBatchMessages);
  if (opts.visibilityTimeoutMs !== undefined)
    body.visibility_timeout_ms = whole(opts.visibilityTimeoutMs, "visibility_timeout_ms", 1000, 43_200_000);
  const wait = opts.waitTimeMs === undefined ? 0 : whole(opts.waitTimeMs, "wait_time_ms", 0, MAX_PULL_WAIT_MS);
  if (wait > 0) body.wait_time_ms = wait;
  // A long poll the caller may abort is named, so that the service can be told it went away.
  const waitId = wait > 0 && opts.signal ? crypto.randomUUID() : undefined;
  let env: Envelope<{ messages: WireMessage[]; message_backlog_count: number }>;
  try {
    env = await transport.call("POST", `${path(queue)}/pull`, {
      body: waitId === undefined ? body : { ...body, wait_id: waitId },
      signal: opts.signal,
      extraTimeoutMs: wait,
      retry: opts.retry,
    });
  } catch (err) {
    if (waitId !== undefined && opts.signal?.aborted) await cancelWait(transport, queue, waitId);
    throw err;
  }
  return { messages: env.result.messages.map((m) => decode<Body>(m)), backlogCount: env.result.message_backlog_count };
}

/**
 * Tells the service an aborted long poll's client went away (POST .../messages/pull/cancel):
 * otherwise the pull waits on, and the next message would wake it and be leased to nobody
 * until its visibility timeout ends. Best effort: a cancel that fails leaves just that.
 */
async function cancelWait(transport: Transport, queue: string, waitId: string): Promise<void> {
  try {
    await transport.call("POST", `${path(queue)}/pull/cancel`, {
      body: { wait_id: waitId },
      retry: { ...transport.retry, attempts: 2, maxDelayMs: 200 },
    });
  } catch {
    // Nothing more to do: the pull ends with its wait, and any lease with its timeout.
  }
}

export async function ack(
  transport: Transport,
  queue: string,
  req: AckRequest,
  opts: { signal?: AbortSignal; retry?: RetryPolicy } = {},
): Promise<AckResult> {
  const acks = (req.acks ?? []).map((lease_id) => ({ lease_id }));
  const retries = (req.retries ?? []).map((r) =>
    r.delaySeconds === undefined ? { lease_id: r.leaseId } : { lease_id: r.leaseId, delay_seconds: r.delaySeconds },
  );
  const env = await transport.call<AckResult>("POST", `${path(queue)}/ack`, {
    body: { acks, retries },
    signal: opts.signal,
    retry: opts.retry,
  });
  return { ackCount: env.result.ackCount, retryCount: env.result.retryCount, warnings: env.result.warnings ?? {} };
}

export async function extend(
  transport: Transport,
  queue: string,
  leaseIds: string[],
  visibilityTimeoutMs: number,
  opts: { signal?: AbortSignal; retry?: RetryPolicy } = {},
): Promise<ExtendResult> {
  const env = await transport.call<ExtendResult>("POST", `${path(queue)}/extend`, {
    body: { lease_ids: leaseIds, visibility_timeout_ms: visibilityTimeoutMs },
    signal: opts.signal,
    retry: opts.retry,
  });
  return { extended: env.result.extended, warnings: env.result.warnings ?? {} };
}

const utf8 = new TextDecoder();

/** Cloudflare's encoding: a text body as it is, anything else base64 of the stored bytes. */
export function decode<Body>(m: WireMessage): PulledMessage<Body> {
  const contentType = m.metadata?.["CF-Content-Type"] ?? "json";
  let body: unknown;
  if (contentType === "text") body = m.body;
  else {
    const bytes = fromBase64(m.body);
    body = contentType === "json" ? JSON.parse(utf8.decode(bytes)) : bytes;
  }
  return {
    id: m.id,
    body: body as Body,
    timestamp: new Date(m.timestamp_ms),
    attempts: m.attempts,
    contentType,
    leaseId: m.lease_id,
    ...(m.ordering_key !== undefined ? { orderingKey: m.ordering_key } : {}),
  };
}

function fromBase64(b64: string): Uint8Array {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function whole(n: unknown, field: string, min: number, max: number): number {
  if (typeof n !== "number" || !Number.isInteger(n) || n < min || n > max)
    throw invalid(field, `must be a whole number from ${min} to ${max}`);
  return n;
}

function path(queue: string): string {
  return `/queues/${encodeURIComponent(queue)}/messages`;
}
