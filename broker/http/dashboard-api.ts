/**
 * What the dashboard reads beyond the queue API: a queue's last hour (kept by its
 * Coordinator from heartbeats) and a peek at its ready messages, bodies included,
 * that leases nothing and counts no attempt. The same peek in Cloudflare's shape
 * (POST .../messages/peek), and Cloudflare's purge of the messages a peek named.
 */
import { z } from "zod";
import { coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { unavailable } from "../../src/kernel/errors";
import type { MessageStatus } from "../../src/kernel/message-operations";
import { notRetired, type ShardMap } from "../../src/kernel/shard-map";
import { MESSAGE_ID_PATTERN } from "../../src/kernel/ids";
import { lookupQueue, lookupQueueId } from "../../src/routing/queue-lookup";
import { ok } from "./envelope";
import { toBase64 } from "./lease-tokens";
import { parseCount, parseWith, wholeNumber } from "../../src/kernel/validate";
import { readJson, readOptionalJson } from "./read-json";

const MAX_PEEK = 100;
const DEFAULT_PEEK = 10;

/** The query GET .../messages takes, for the handler and the OpenAPI description alike. */
export const peekQuery = z.object({ limit: z.number().int().min(1).max(MAX_PEEK).default(DEFAULT_PEEK) });

/** GET .../series: points of backlog, bytes, rates and shards, oldest first. */
export async function getSeries(env: Env, accountId: string, queueRef: string): Promise<Response> {
  const queueId = await lookupQueueId(env, accountId, queueRef);
  const { stepMs, points } = await coordinatorFor(env, queueId).series();
  return ok({ step_ms: stepMs, points });
}

/** GET .../messages?limit=N: up to N ready messages, oldest first over all shards. */
export async function peekMessages(url: URL, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const limit = parseCount(
    peekQuery.shape.limit,
    url.searchParams.get("limit"),
    "limit",
    `must be a whole number from 1 to ${MAX_PEEK}`,
  );
  const { found, incomplete } = await peekShards(
    env,
    await lookupQueue(env, accountId, queueRef, { current: true }),
    limit,
  );
  const messages = found.map(({ message: m }) => ({
    id: m.id,
    body: bodyText(m),
    content_type: m.contentType,
    attempts: m.attempts,
    timestamp_ms: m.enqueuedAt,
    size: m.size,
    ...(m.orderingKey !== undefined ? { ordering_key: m.orderingKey } : {}),
  }));
  return ok({ messages, incomplete });
}

/** The body POST .../messages/peek takes (Cloudflare's): how many messages at most. No body at all reads as `{}`. */
export const peekBody = z.object({ batch_size: wholeNumber(1, MAX_PEEK).optional() }).strict();

/**
 * POST .../messages/peek: Cloudflare's peek, GET .../messages in Cloudflare's shape. Up to
 * `batch_size` (default 10) ready messages, oldest first, leasing nothing and counting no
 * attempt; each with a `ref` that POST .../messages/purge deletes it by. Bodies and
 * `metadata` as a pull gives them; beyond Cloudflare, `ordering_key` and `incomplete` as GET's.
 */
export async function peekByPost(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const body = parseWith(peekBody, await readOptionalJson(request));
  const { found, incomplete } = await peekShards(
    env,
    await lookupQueue(env, accountId, queueRef, { current: true }),
    body.batch_size ?? DEFAULT_PEEK,
  );
  const messages = found.map(({ message: m, shard }) => ({
    id: m.id,
    body: bodyText(m),
    attempts: m.attempts,
    timestamp_ms: m.enqueuedAt,
    metadata: { "CF-Content-Type": m.contentType },
    ref: peekRef(m.id, shard),
    ...(m.orderingKey !== undefined ? { ordering_key: m.orderingKey } : {}),
  }));
  return ok({ messages, incomplete });
}

/** Refs one POST .../messages/purge takes at most. */
export const MAX_PURGE_REFS = 100;

/** The body POST .../messages/purge takes (Cloudflare's): the refs of peeked messages. */
export const purgePeekedBody = z
  .object({
    refs: z
      .array(
        z
          .object({
            ref: z
              .string({ error: (iss) => (iss.input === undefined ? "is required" : "must be a string") })
              .min(1, "must not be empty"),
          })
          .strict(),
        {
          error: (iss) => (iss.input === undefined ? "is required" : "must be an array of { ref }"),
        },
      )
      .min(1, "must hold at least one ref")
      .max(MAX_PURGE_REFS, `must hold at most ${MAX_PURGE_REFS} refs`),
  })
  .strict();

/**
 * POST .../messages/purge: deletes the messages peeked refs name, wherever they stand (ready,
 * delayed, leased), as DELETE .../messages/:message_id does one. Like an ack, a ref that cannot
 * be honoured is a warning under it, never a failed request: `purged` counts the others.
 */
export async function purgePeeked(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const body = parseWith(purgePeekedBody, await readJson(request));
  const map = await lookupQueue(env, accountId, queueRef, { current: true });
  const shards = notRetired(map.shards);
  const warnings: Record<string, string> = {};
  let purged = 0;
  await Promise.all(
    [...new Set(body.refs.map((r) => r.ref))].map(async (ref) => {
      const named = readPeekRef(ref);
      if (!named) {
        warnings[ref] = "was not purged: it is not a ref a peek returned";
        return;
      }
      // The shard the peek found it on first, if the queue still has it; then every other.
      const first = shards.find((s) => s.name === named.shard);
      const there = first
        ? await storageShardFor(env, first.name, first.region)
            .cancelMessage(map.queueId, named.id)
            .catch(() => null)
        : false;
      if (there) {
        purged++;
        return;
      }
      const others = shards.filter((s) => s !== first || there === null);
      const outcomes = await Promise.allSettled(
        others.map((s) => storageShardFor(env, s.name, s.region).cancelMessage(map.queueId, named.id)),
      );
      if (outcomes.some((o) => o.status === "fulfilled" && o.value)) purged++;
      else if (outcomes.some((o) => o.status === "rejected"))
        warnings[ref] = "may or may not have been purged: a storage shard did not answer; send it again";
      else warnings[ref] = "was not purged: the message is gone (acked, purged, cancelled, dead-lettered or expired)";
    }),
  );
  return ok({ purged, warnings });
}

/**
 * A peeked message's ref: its id and the storage shard the peek found it on (base64url), so a
 * purge goes there first. Opaque to clients; a made-up shard costs nothing, since a purge
 * only asks shards of the queue's map.
 */
function peekRef(id: string, shard: string): string {
  return `${id}.${base64url(shard)}`;
}

function readPeekRef(ref: string): { id: string; shard: string } | null {
  const dot = ref.indexOf(".");
  const id = dot < 0 ? ref : ref.slice(0, dot);
  if (!MESSAGE_ID_PATTERN.test(id)) return null;
  if (dot < 0) return { id, shard: "" };
  try {
    return { id, shard: fromBase64url(ref.slice(dot + 1)) };
  } catch {
    return null;
  }
}

function base64url(s: string): string {
  return btoa(String.fromCharCode(...new TextEncoder().encode(s)))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
}

function fromBase64url(s: string): string {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) throw new Error("not base64url");
  const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/"));
  return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(
    Uint8Array.from(bin, (c) => c.charCodeAt(0)),
  );
}

type Peeked = MessageStatus & { body: Uint8Array; orderingKey?: string };

/** Up to `limit` ready messages, oldest first over the queue's shards, each with the shard it is on. */
async function peekShards(
  env: Env,
  map: ShardMap,
  limit: number,
): Promise<{ found: Array<{ message: Peeked; shard: string }>; incomplete: boolean }> {
  const shards = notRetired(map.shards);
  const outcomes = await Promise.allSettled(
    shards.map((s) => storageShardFor(env, s.name, s.region).peekReady(map.queueId, limit)),
  );
  if (outcomes.every((o) => o.status === "rejected") && outcomes.length > 0)
    throw unavailable("no storage shard of this queue answered; retry");
  const found = outcomes.flatMap((o, i) =>
    o.status === "fulfilled" ? (o.value as Peeked[]).map((message) => ({ message, shard: shards[i]!.name })) : [],
  );
  found.sort((a, b) => a.message.enqueuedAt - b.message.enqueuedAt);
  return { found: found.slice(0, limit), incomplete: outcomes.some((o) => o.status === "rejected") };
}

const utf8 = new TextDecoder();

/** As pull encodes them: text as it is, everything else base64 of the stored bytes. */
function bodyText(m: Peeked): string {
  return m.contentType === "text" ? utf8.decode(m.body) : toBase64(m.body);
}
