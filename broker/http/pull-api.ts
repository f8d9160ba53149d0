/**
 * Pull consumers over HTTP, in Cloudflare's shapes: pull leases messages from the
 * queue's storage shards, ack settles them, and extend (beyond Cloudflare, like SQS's
 * ChangeMessageVisibility) keeps a lease alive. Lease ids are signed tokens naming
 * their shard (broker/http/lease-tokens.ts), so ack and extend go straight to the shards.
 * A lease id that cannot be honoured is a warning, never a failed request: a client
 * acking a batch must learn which acks counted, not lose the ones that did.
 */
import { z } from "zod";
import { decide, type Verdict } from "../../src/delivery/disposition";
import { applyDisposition, refKey } from "../../src/delivery/settle";
import { sumFigures } from "../../src/routing/queue-figures";
import { metadataMetrics } from "./rest-metrics";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import { MAX_VISIBILITY_TIMEOUT_MS, type ConsumerRecord } from "../../src/kernel/consumer-settings";
import type { Env } from "../../src/kernel/env";
import { HttpError, unavailable } from "../../src/kernel/errors";
import { LIMITS, MAX_PULL_WAIT_MS } from "../../src/kernel/limits";
import { randomHex } from "../../src/kernel/ids";
import { sleep } from "../../src/kernel/sleep";
import type { ShardBacklog } from "../../src/kernel/figures";
import { leaseRefOf, type LeasedMessage, type LeaseRef } from "../../src/kernel/protocol";
import type { PullWaitAnswer, WaitCap } from "../../src/kernel/pull-waits";
import type { DeliveryPlan } from "../../src/kernel/shard-map";
import { ok } from "./envelope";
import { leaseSigningKey, signLease, toBase64, verifyLease, type LeaseToken } from "./lease-tokens";
import { readJson, readOptionalJson } from "./read-json";
import { lookupQueue, readQueue } from "../../src/routing/queue-lookup";
import { parseWith, wholeNumber as int } from "../../src/kernel/validate";

/** Cloudflare's defaults for a pull without a batch size or visibility timeout. */
const DEFAULT_PULL_BATCH = 5;
const DEFAULT_VISIBILITY_MS = 30_000;
const MAX_LEASES_PER_CALL = 100;

const visibilityTimeout = int(1000, MAX_VISIBILITY_TIMEOUT_MS, " ms");
const leaseId = z
  .string({ error: (iss) => (iss.input === undefined ? "is required" : "must be a string") })
  .min(1, "must not be empty");
const list = <T extends z.ZodType>(item: T, what: string) =>
  z
    .array(item, { error: (iss) => (iss.input === undefined ? "is required" : `must be an array of ${what}`) })
    .max(MAX_LEASES_PER_CALL, `must hold at most ${MAX_LEASES_PER_CALL} entries`);

/** A long poll's name of the client's choosing, by which POST .../messages/pull/cancel ends its wait. */
const waitId = z
  .string({ error: "must be a string" })
  .regex(/^[A-Za-z0-9_-]{16,64}$/, "must be 16 to 64 letters, digits, '-' or '_'");

/** What the handlers below validate with, and what the OpenAPI description says of them (broker/openapi/). */
export const pullBody = z
  .object({
    batch_size: int(1, LIMITS.maxBatchMessages).optional(),
    visibility_timeout_ms: visibilityTimeout.optional(),
    wait_time_ms: int(0, MAX_PULL_WAIT_MS, " ms").optional(),
    wait_id: waitId.optional(),
  })
  .strict();
export const cancelPullBody = z.object({ wait_id: waitId }).strict();
export const ackBody = z
  .object({
    acks: list(z.object({ lease_id: leaseId }).strict(), "{ lease_id }").optional(),
    retries: list(
      z.object({ lease_id: leaseId, delay_seconds: int(0, LIMITS.maxDelaySeconds, " s").optional() }).strict(),
      "{ lease_id, delay_seconds? }",
    ).optional(),
  })
  .strict();
export const extendBody = z
  .object({
    lease_ids: list(leaseId, "lease ids").min(1, "must hold at least one lease id"),
    visibility_timeout_ms: visibilityTimeout,
  })
  .strict();

const stale = (verb: string) =>
  `was not ${verb}: the lease ended and the message was pulled again, or the message is gone (acked, dead-lettered or expired)`;
/**
 * A settle or extend whose shard call failed may still have been applied: the shard can
 * commit and then be reset before its reply leaves (a restart, a deploy). So the warning
 * says the outcome is unknown, never "not applied"; sent again, an ack that had landed is
 * answered as gone.
 */
export const UNREACHABLE =
  "may or may not have been applied: its storage shard did not answer; send it again (if it was applied, the message is gone and the answer says so)";

/** The answer of a pull while delivery is paused, whether it came then or was waiting. */
const pausedError = (plan: DeliveryPlan) =>
  new HttpError(
    "conflict",
    `delivery of queue "${plan.queueName}" is paused; set settings.delivery_paused to false to pull`,
    "queue",
  );

/** How long a pull refused for a cap of waiting pulls is told to wait: waiting pulls answer all the time. */
export const WAIT_CAP_RETRY_AFTER_SECONDS = 1;

/** POST .../messages/pull */
export async function pullMessages(
  request: Request,
  env: Env,
  ctx: ExecutionContext,
  accountId: string,
  queueRef: string,
  tokenId?: string,
): Promise<Response> {
  const key = await leaseSigningKey(env);
  const body = parseWith(pullBody, await readOptionalJson(request));
  const { plan, consumer } = await pullQueue(env, accountId, queueRef, "pull");
  if (plan.paused) throw pausedError(plan);
  const leaseMs = body.visibility_timeout_ms ?? consumer.settings.visibility_timeout_ms ?? DEFAULT_VISIBILITY_MS;
  const wanted = body.batch_size ?? DEFAULT_PULL_BATCH;
  const waitMs = body.wait_time_ms ?? 0;
  const deadline = Date.now() + waitMs;
  let { leased, figures } = await leaseFromShards(env, plan, wanted, leaseMs, waitMs > 0 ? deadline : undefined);
  if (leased.length === 0 && waitMs > 0) {
    const wait = { id: body.wait_id ?? randomHex(16), named: body.wait_id !== undefined, token: tokenId };
    ({ leased, figures } = await waitAndLease(env, ctx, request.signal, wait, plan, wanted, leaseMs, deadline, {
      leased,
      figures,
    }));
  }
  const utf8 = new TextDecoder();
  const messages = await Promise.all(
    leased.map(async ({ shard, message: m }) => ({
      id: m.id,
      // Cloudflare's encoding: text as it is, everything else base64 of the stored bytes.
      body: m.contentType === "text" ? utf8.decode(m.body) : toBase64(m.body),
      timestamp_ms: m.enqueuedAt,
      attempts: m.attempts,
      lease_id: await signLease(key, {
        accountId,
        queueId: plan.queueId,
        shard,
        messageId: m.id,
        leaseId: m.leaseId,
        attempts: m.attempts,
      }),
      metadata: { "CF-Content-Type": m.contentType },
      // Beyond Cloudflare: the key it was sent with (docs/ordered-lanes.md).
      ...(m.orderingKey !== undefined ? { ordering_key: m.orderingKey } : {}),
    })),
  );
  return ok({ message_backlog_count: figures.backlogCount, messages, metadata: { metrics: metadataMetrics(figures) } });
}

/**
 * POST .../messages/pull/cancel: the client of the long poll named `wait_id` went away (it
 * aborted the request). The pull stops waiting and leases nothing; a wake-up it already
 * took goes to the next waiting pull. `cancelled` is false, with the reason, when the pull
 * had answered with messages ("answered": nobody else is woken) or no such pull was waiting
 * or just woken ("not_waiting": it answered empty, never waited, or was cancelled already).
 */
export async function cancelPull(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const body = parseWith(cancelPullBody, await readJson(request));
  const { plan } = await pullQueue(env, accountId, queueRef, "pull/cancel");
  return ok(await coordinatorFor(env, plan.queueId).cancelWait(body.wait_id));
}

/** POST .../messages/ack: acks delete; retries come back after a delay, or go to the dead-letter queue when out of retries. */
export async function ackMessages(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const key = await leaseSigningKey(env);
  const body = parseWith(ackBody, await readJson(request));
  refuseAckedAndRetried(body);
  const { plan, consumer } = await pullQueue(env, accountId, queueRef, "ack");
  const asked = [
    ...(body.acks ?? []).map((a) => ({
      token: a.lease_id,
      retry: false,
      delaySeconds: undefined as number | undefined,
    })),
    ...(body.retries ?? []).map((r) => ({ token: r.lease_id, retry: true, delaySeconds: r.delay_seconds })),
  ];
  const warnings: Record<string, string> = {};
  const valid = await verifyAll(key, asked, { accountId, queueId: plan.queueId }, warnings);
  let ackCount = 0;
  let retryCount = 0;
  await Promise.all(
    [...groupByShard(valid)].map(async ([shard, entries]) => {
      try {
        const r = await settleOnShard(env, plan, consumer, shard, entries, warnings);
        ackCount += r.acked;
        retryCount += r.retried + r.deadLettered + r.dropped;
      } catch (err) {
        console.error(`ack on storage shard ${shard} failed:`, err);
        for (const e of entries) warnings[e.token] = UNREACHABLE;
      }
    }),
  );
  return ok({ ackCount, retryCount, warnings });
}

/**
 * A lease both acked and retried in one request asks two things the shard can do only one
 * of; applying the ack alone dropped the retry unsaid, and a warning under that lease id
 * would read as "the ack did not count" too. The request says it all, so it is refused
 * whole, before anything is settled.
 */
function refuseAckedAndRetried(body: z.infer<typeof ackBody>): void {
  const acked = new Map<string, number>();
  (body.acks ?? []).forEach((a, i) => {
    if (!acked.has(a.lease_id)) acked.set(a.lease_id, i);
  });
  (body.retries ?? []).forEach((r, i) => {
    const j = acked.get(r.lease_id);
    if (j !== undefined)
      throw HttpError.invalid(
        `retries[${i}].lease_id`,
        `is also in acks[${j}]: a lease is either acked or retried; send it in one list`,
      );
  });
}

/** POST .../messages/extend: moves still-held leases' visibility forward. */
export async function extendLeases(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const key = await leaseSigningKey(env);
  const body = parseWith(extendBody, await readJson(request));
  const map = await lookupQueue(env, accountId, queueRef);
  const warnings: Record<string, string> = {};
  const valid = await verifyAll(
    key,
    body.lease_ids.map((token) => ({ token })),
    { accountId, queueId: map.queueId },
    warnings,
  );
  let extended = 0;
  await Promise.all(
    [...groupByShard(valid)].map(async ([shard, entries]) => {
      try {
        const done = new Set(
          await storageShardFor(env, shard).extendLeases(
            map.queueId,
            entries.map((e) => tokenRef(e.lease)),
            body.visibility_timeout_ms,
          ),
        );
        extended += done.size;
        for (const e of entries) if (!done.has(e.lease.messageId)) warnings[e.token] = stale("extended");
      } catch (err) {
        console.error(`extend on storage shard ${shard} failed:`, err);
        for (const e of entries) warnings[e.token] = UNREACHABLE;
      }
    }),
  );
  return ok({ extended, warnings });
}

/**
 * The queue's delivery plan from its Coordinator (pause state and consumer as of now,
 * not as a cached map says), with its http_pull consumer. A cached map may name a
 * queue deleted (and perhaps re-created) since: then the current map is read once.
 */
async function pullQueue(
  env: Env,
  accountId: string,
  queueRef: string,
  verb: string,
): Promise<{ plan: DeliveryPlan; consumer: ConsumerRecord }> {
  const plan = await readQueue(env, accountId, queueRef, async (map) => {
    const plan = await coordinatorFor(env, map.queueId).deliveryPlan();
    return plan && plan.accountId === accountId ? plan : null;
  });
  const consumer = plan.consumer;
  if (consumer?.type !== "http_pull") {
    const has = consumer ? "a worker consumer" : "no consumer";
    throw new HttpError(
      "conflict",
      `queue "${plan.queueName}" has ${has}; messages/${verb} needs an http_pull consumer (POST .../consumers with {"type": "http_pull"})`,
      "queue",
    );
  }
  return { plan, consumer };
}

/**
 * Visits the queue's shards in random order, leasing what is still wanted from each,
 * and never waits for a batch to fill. The queue's figures are exact for the shards
 * visited and their latest heartbeat for the others, so a pull costs no extra round trips.
 */
async function leaseFromShards(env: Env, plan: DeliveryPlan, wanted: number, leaseMs: number, watchUntil?: number) {
  const leased: Array<{ shard: string; message: LeasedMessage }> = [];
  const exact: ShardBacklog[] = [];
  let failed = 0;
  for (const shard of shuffled(plan.shards)) {
    const limit = wanted - leased.length;
    if (limit <= 0) continue;
    try {
      const r = await storageShardFor(env, shard.name).lease({
        queueId: plan.queueId,
        limit,
        leaseMs,
        maxWaitMs: 0,
        retentionMs: plan.retentionMs,
        ...(watchUntil !== undefined ? { watchUntil } : {}),
      });
      exact.push(r.backlog);
      for (const message of r.messages) leased.push({ shard: shard.name, message });
    } catch (err) {
      // Another shard may serve the pull; a lease lost with the reply just ends with its timeout.
      console.error(`lease from storage shard ${shard.name} failed:`, err);
      failed++;
    }
  }
  if (failed > 0 && failed === plan.shards.length)
    throw unavailable("no storage shard of this queue answered; retry", null);
  return {
    leased,
    figures: sumFigures(
      plan.shards.map((s) => s.backlog),
      exact,
    ),
  };
}

/** After a Coordinator that held a waiting pull failed (a restart), how long before it is asked again. */
const COORDINATOR_RETRY_MS = 100;

/**
 * Long polling: waits at the queue's Coordinator for new messages (coordinator/pull-waiters.ts),
 * then leases, until some come or the wait ends: an empty answer, never an error. Nothing is
 * leased while waiting. A pull whose client goes away mid-wait leases nothing, and a
 * wake-up it took goes to the next waiting pull: otherwise the message would wait out a
 * lease nobody holds. The client says so (POST .../messages/pull/cancel with its `wait_id`,
 * as shardq/client does when a pull is aborted), or the runtime does (the request's signal,
 * which the `enable_request_signal` flag turns on; wrangler dev's local proxy does not pass
 * a disconnect on, so locally only the first works).
 */
async function waitAndLease(
  env: Env,
  ctx: ExecutionContext,
  signal: AbortSignal,
  wait: { id: string; named: boolean; token: string | undefined },
  plan: DeliveryPlan,
  wanted: number,
  leaseMs: number,
  deadline: number,
  found: Awaited<ReturnType<typeof leaseFromShards>>,
) {
  let last = found;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0 || signal.aborted) return last;
    // A new handle each time: one whose object restarted keeps failing.
    const coordinator = coordinatorFor(env, plan.queueId);
    let woken: PullWaitAnswer | typeof GONE;
    try {
      woken = await untilGone<PullWaitAnswer>(
        signal,
        coordinator.waitForMessages(left, wait.id, wait.token) as Promise<PullWaitAnswer>,
      );
    } catch (err) {
      // A Coordinator that restarted forgot who waits: look at the shards, then wait again.
      console.error("waiting for messages failed; looking at the shards again:", err);
      await sleep(Math.min(left, COORDINATOR_RETRY_MS));
      woken = "woken";
    }
    if (woken === GONE || signal.aborted) {
      ctx.waitUntil(
        coordinatorFor(env, plan.queueId)
          .cancelWait(wait.id)
          .catch(() => null),
      );
      return last;
    }
    if (woken === "paused") throw pausedError(plan);
    if (typeof woken === "object") throw capped(woken, plan);
    if (woken === "ended") return last;
    last = await leaseFromShards(env, plan, wanted, leaseMs, deadline);
    if (last.leased.length === 0) {
      // Woken for a shard this plan may not name yet (a scale-out during the wait).
      plan = await currentPlan(env, plan);
      continue;
    }
    // Before the answer leaves: a cancel after it must not find a wake-up to hand on. A full
    // batch: more may be ready, for the next pull waiting.
    const full = last.leased.length === wanted ? last.leased[0]!.shard : null;
    if (wait.named || full !== null) await coordinator.pullAnswered(wait.id, full).catch(() => undefined);
    return last;
  }
}

const GONE = Symbol("client gone");

/** 429 for a pull over a cap of waiting pulls (coordinator/pull-waiters.ts); it leased nothing. */
function capped({ capped, limit }: { capped: WaitCap; limit: number }, plan: DeliveryPlan): HttpError {
  const err =
    capped === "queue"
      ? new HttpError(
          "rate_limited",
          `queue "${plan.queueName}" has ${limit} pulls waiting, the most one queue holds; retry after ${WAIT_CAP_RETRY_AFTER_SECONDS} s`,
          "queue",
        )
      : new HttpError(
          "rate_limited",
          `this token has ${limit} pulls waiting on queue "${plan.queueName}", the most one token holds on a queue; retry after ${WAIT_CAP_RETRY_AFTER_SECONDS} s, or wait in fewer pulls`,
          "authorization",
        );
  err.headers["retry-after"] = String(WAIT_CAP_RETRY_AFTER_SECONDS);
  return err;
}

/** `p`, or GONE as soon as the client has gone away. */
function untilGone<T>(signal: AbortSignal, p: Promise<T>): Promise<T | typeof GONE> {
  if (signal.aborted) return Promise.resolve(GONE);
  let onAbort!: () => void;
  const gone = new Promise<typeof GONE>((resolve) => {
    onAbort = () => resolve(GONE);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  return Promise.race([p, gone]).finally(() => signal.removeEventListener("abort", onAbort));
}

/** The queue's delivery plan as its Coordinator has it now; the one in hand if that fails. */
async function currentPlan(env: Env, plan: DeliveryPlan): Promise<DeliveryPlan> {
  const fresh = await coordinatorFor(env, plan.queueId)
    .deliveryPlan()
    .catch(() => null);
  return fresh && fresh.accountId === plan.accountId && fresh.queueId === plan.queueId ? fresh : plan;
}

interface Asked {
  token: string;
  retry?: boolean;
  delaySeconds?: number | undefined;
}
type Verified<T extends Asked> = T & { lease: LeaseToken };

/** Keeps the lease ids that verify; each other one gets a warning saying why. A repeated one counts once. */
async function verifyAll<T extends Asked>(
  key: CryptoKey,
  asked: T[],
  expected: { accountId: string; queueId: string },
  warnings: Record<string, string>,
): Promise<Array<Verified<T>>> {
  const first = new Map<string, T>();
  for (const a of asked) if (!first.has(a.token)) first.set(a.token, a);
  const unique = [...first.values()];
  const checked = await Promise.all(unique.map(async (a) => ({ a, v: await verifyLease(key, a.token, expected) })));
  const out: Array<Verified<T>> = [];
  for (const { a, v } of checked) {
    if (v.ok) out.push({ ...a, lease: v.lease });
    else warnings[a.token] = `was not applied: this lease id ${v.reason}`;
  }
  return out;
}

/** One settle call for one shard's part of an ack request. */
async function settleOnShard(
  env: Env,
  plan: DeliveryPlan,
  consumer: ConsumerRecord,
  shard: string,
  entries: Array<Verified<Asked>>,
  warnings: Record<string, string>,
) {
  const d = decide(
    entries.map((e) => verdictOf(e.lease, e.retry === true, e.delaySeconds)),
    consumer.settings,
  );
  let held: LeasedMessage[] = [];
  if (d.outOfRetries.length > 0 && consumer.dead_letter_queue) {
    const out = new Set(d.outOfRetries.map(refKey));
    held = await readExhausted(
      env,
      plan.queueId,
      shard,
      entries.filter((e) => out.has(refKey(tokenRef(e.lease)))),
      warnings,
    );
    // Only a message read can be moved; the others are left alone (readExhausted says why).
    const read = new Set(held.map(refKey));
    d.outOfRetries = d.outOfRetries.filter((r) => read.has(refKey(r)));
  }
  // Without a dead-letter queue nothing is moved, so no body is needed: only lease refs reach the shard.
  const result = await applyDisposition(env, plan, consumer, shard, d, held);
  const taken = new Set(result.stale);
  for (const e of entries) if (taken.has(e.lease.messageId)) warnings[e.token] = stale("applied");
  return result;
}

/** What an ack request asks for one lease, in the terms of the settlement rule push consumers share. */
export function verdictOf(lease: LeaseToken, retry: boolean, delaySeconds: number | undefined): Verdict {
  return { ref: tokenRef(lease), attempts: lease.attempts, retry, delaySeconds };
}

/**
 * The dead-letter queue gets the message itself, so the bodies of exhausted messages
 * are read from the shard, under their leases. If that read fails they stay leased and
 * come back when the lease ends, to be retried (and dead-lettered) again: never lost.
 */
async function readExhausted(
  env: Env,
  queueId: string,
  shard: string,
  exhausted: Array<Verified<Asked>>,
  warnings: Record<string, string>,
): Promise<LeasedMessage[]> {
  let found: LeasedMessage[];
  try {
    found = await storageShardFor(env, shard).readLeased(
      queueId,
      exhausted.map((e) => tokenRef(e.lease)),
    );
  } catch (err) {
    console.error(`reading exhausted messages from storage shard ${shard} failed:`, err);
    for (const e of exhausted)
      warnings[e.token] =
        "was not applied: the message could not be read for the dead-letter queue; it is delivered again when its lease ends";
    return [];
  }
  const held = new Set(found.map((m) => m.id));
  for (const e of exhausted) if (!held.has(e.lease.messageId)) warnings[e.token] = stale("applied");
  return found;
}

/** A lease id names its message and lease by these fields. */
const tokenRef = (l: LeaseToken): LeaseRef => leaseRefOf({ id: l.messageId, leaseId: l.leaseId });

function groupByShard<T extends { lease: LeaseToken }>(entries: T[]): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const e of entries) out.set(e.lease.shard, [...(out.get(e.lease.shard) ?? []), e]);
  return out;
}

function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
