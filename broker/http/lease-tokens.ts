/**
 * Lease ids handed to pull consumers. Like Cloudflare's, they are opaque signed tokens
 * that carry their own routing data: the storage shard holding the message, so an ack
 * needs no lookup, and the attempts of that delivery, so a retry knows whether the
 * message is out of retries. The HMAC is what makes carrying this safe: a client can
 * neither point an ack at a shard of its choosing nor claim another account's lease.
 */
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";

export interface LeaseToken {
  accountId: string;
  queueId: string;
  shard: string;
  messageId: string;
  leaseId: string;
  attempts: number;
}

export type VerifiedLease = { ok: true; lease: LeaseToken } | { ok: false; reason: string };

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
const SEGMENT = /^[A-Za-z0-9_-]+$/;
/** Far above any real token: refuses junk before it costs a parse or an HMAC. */
const MAX_TOKEN_CHARS = 2048;

let cachedKey: { secret: string; key: Promise<CryptoKey> } | null = null;

/**
 * The signing key. Without a secret pull consumers are refused outright (503): signing
 * with an empty key would let anyone forge lease ids for any shard.
 */
export async function leaseSigningKey(env: Env): Promise<CryptoKey> {
  const secret = env.LEASE_SIGNING_KEY;
  if (!secret || secret.trim() === "") {
    throw new HttpError(
      "unavailable",
      "pull consumers are unavailable: the LEASE_SIGNING_KEY secret is not set (wrangler secret put LEASE_SIGNING_KEY)",
    );
  }
  // importKey per request would cost more than the HMAC itself; the secret only changes on deploy.
  if (cachedKey?.secret !== secret) {
    const key = crypto.subtle.importKey("raw", utf8.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
      "sign",
      "verify",
    ]);
    cachedKey = { secret, key };
  }
  return await cachedKey.key;
}

/** `<payload>.<signature>`, both base64url: safe in JSON, URLs and headers as they are. */
export async function signLease(key: CryptoKey, lease: LeaseToken): Promise<string> {
  const payload = toBase64Url(
    utf8.encode(
      JSON.stringify([lease.accountId, lease.queueId, lease.shard, lease.messageId, lease.leaseId, lease.attempts]),
    ),
  );
  const signature = await crypto.subtle.sign("HMAC", key, utf8.encode(payload));
  return `${payload}.${toBase64Url(new Uint8Array(signature))}`;
}

/**
 * Checks a lease id's signature (crypto.subtle.verify compares in constant time) and
 * that it was issued for this account and queue. Never throws on bad input: a bad
 * lease id is a warning for the client, not a failed request.
 */
export async function verifyLease(
  key: CryptoKey,
  token: unknown,
  expected: { accountId: string; queueId: string },
): Promise<VerifiedLease> {
  if (typeof token !== "string" || token.length > MAX_TOKEN_CHARS) return { ok: false, reason: "is not a lease id" };
  const parts = token.split(".");
  if (parts.length !== 2 || !SEGMENT.test(parts[0]!) || !SEGMENT.test(parts[1]!))
    return { ok: false, reason: "is not a lease id" };
  const [payload, signature] = parts as [string, string];
  const sig = fromBase64Url(signature);
  // The signature covers the payload text as sent, so a re-encoded payload fails too.
  if (!sig || !(await crypto.subtle.verify("HMAC", key, sig, utf8.encode(payload)))) {
    return { ok: false, reason: "has an invalid signature: it was not issued by this service or was altered" };
  }
  const lease = decodePayload(payload);
  if (!lease) return { ok: false, reason: "is not a lease id" };
  // Another account's lease reads as another queue's: nothing about other accounts is disclosed.
  if (lease.accountId !== expected.accountId || lease.queueId !== expected.queueId) {
    return { ok: false, reason: "was issued for another queue" };
  }
  return { ok: true, lease };
}

function decodePayload(payload: string): LeaseToken | null {
  const bytes = fromBase64Url(payload);
  if (!bytes) return null;
  let v: unknown;
  try {
    v = JSON.parse(utf8Decoder.decode(bytes));
  } catch {
    return null;
  }
  if (!Array.isArray(v) || v.length !== 6) return null;
  const [accountId, queueId, shard, messageId, leaseId, attempts] = v as unknown[];
  if (
    ![accountId, queueId, shard, messageId, leaseId].every((s) => typeof s === "string") ||
    !Number.isSafeInteger(attempts)
  )
    return null;
  return { accountId, queueId, shard, messageId, leaseId, attempts } as LeaseToken;
}

export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  // String.fromCharCode takes its arguments on the stack: convert in slices.
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function toBase64Url(bytes: Uint8Array): string {
  return toBase64(bytes).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * Only the canonical encoding decodes. atob ignores the unused low bits of the last
 * character, so without the round trip one lease would have several spellings that all
 * verify: a request acking two of them would apply once yet warn on the other, and a
 * warning must mean "not applied".
 */
function fromBase64Url(text: string): Uint8Array | null {
  let bytes: Uint8Array;
  try {
    const binary = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
    bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
  return toBase64Url(bytes) === text ? bytes : null;
}
