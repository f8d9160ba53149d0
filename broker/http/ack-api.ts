/**
 * What a pull consumer does with its leases over HTTP, in Cloudflare's shapes: ack settles
 * them, and extend (beyond Cloudflare, like SQS's ChangeMessageVisibility) keeps a lease
 * alive. Lease ids are signed tokens naming their shard (broker/http/lease-tokens.ts), so ack
 * and extend go straight to the shards. A lease id that cannot be honoured is a warning, never
 * a failed request: a client acking a batch must learn which acks counted, not lose the ones
 * that did.
 */
import { z } from "zod";
import { decide, type Verdict } from "../../src/delivery/disposition";
import { applyDisposition, refKey } from "../../src/delivery/settle";
import { storageShardFor } from "../../src/kernel/addressing";
import type { ConsumerRecord } from "../../src/kernel/consumer-settings";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import { LIMITS } from "../../src/kernel/limits";
import { leaseRefOf, type LeasedMessage, type LeaseRef } from "../../src/kernel/protocol";
import type { DeliveryPlan } from "../../src/kernel/shard-map";
import { parseWith, wholeNumber as int } from "../../src/kernel/validate";
import { lookupQueue } from "../../src/routing/queue-lookup";
import { ok } from "./envelope";
import { leaseSigningKey, verifyLease, type LeaseToken } from "./lease-tokens";
import { visibilityTimeout } from "./pull-api";
import { pullQueue } from "./pull-queue";
import { readJson } from "./read-json";

const MAX_LEASES_PER_CALL = 100;
const leaseId = z
  .string({ error: (iss) => (iss.input === undefined ? "is required" : "must be a string") })
  .min(1, "must not be empty");
const list = <T extends z.ZodType>(item: T, what: string) =>
  z
    .array(item, { error: (iss) => (iss.input === undefined ? "is required" : `must be an array of ${what}`) })
    .max(MAX_LEASES_PER_CALL, `must hold at most ${MAX_LEASES_PER_CALL} entries`);

/** What the handlers below validate with, and what the OpenAPI description says of them (broker/openapi/). */
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
