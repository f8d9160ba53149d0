import { describe, expect, it } from "vitest";
import { signLease, verifyLease, type LeaseToken } from "../../broker/http/lease-tokens";
import { api, backlog, createQueue, queuePath, shardsOnFakeClock } from "./helpers";

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/** What atob makes of a base64url segment: lenient, so it ignores the last character's unused bits. */
const lenientBytes = (s: string) => atob(s.replace(/-/g, "+").replace(/_/g, "/"));

/**
 * The other spellings of a segment: its last character swapped for every one that decodes
 * to the same bytes. There are 2^(unused bits) - 1 of them, none when no bits are unused.
 */
function nonCanonicalVariants(segment: string): string[] {
  const bytes = lenientBytes(segment);
  return [...ALPHABET].map((c) => segment.slice(0, -1) + c).filter((v) => v !== segment && lenientBytes(v) === bytes);
}

/** Bits of the last base64 character that carry no data, by the byte count mod 3. */
const unusedBits = (segment: string) => [0, 4, 2][lenientBytes(segment).length % 3]!;

describe("lease id encoding", () => {
  const key = crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode("test-signing-key"),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
  const lease = (messageId: string): LeaseToken => ({
    accountId: "local",
    queueId: "q-1",
    shard: "shard-0",
    messageId,
    leaseId: "l-1",
    attempts: 1,
  });
  const expected = { accountId: "local", queueId: "q-1" };

  it("refuses every non-canonical spelling of the signature's last character, and verifies the original", async () => {
    const token = await signLease(await key, lease("m-1"));
    const [payload, signature] = token.split(".") as [string, string];
    // A 32-byte HMAC is 43 characters; the last one carries 2 unused bits.
    expect(signature).toHaveLength(43);
    const variants = nonCanonicalVariants(signature);
    expect(variants).toHaveLength(2 ** unusedBits(signature) - 1);
    expect(variants.length).toBeGreaterThan(0);
    expect(await verifyLease(await key, token, expected)).toMatchObject({ ok: true, lease: lease("m-1") });
    for (const v of variants) {
      const result = await verifyLease(await key, `${payload}.${v}`, expected);
      expect(result, v).toEqual({ ok: false, reason: expect.stringContaining("invalid signature") });
    }
  });

  it("refuses every non-canonical spelling of the payload's last character, whichever count of bits is unused", async () => {
    const seen = new Set<number>();
    // The message id's length moves the payload through every byte count mod 3.
    for (const messageId of ["m-1", "m-12", "m-123"]) {
      const token = await signLease(await key, lease(messageId));
      const [payload, signature] = token.split(".") as [string, string];
      expect(await verifyLease(await key, token, expected)).toMatchObject({ ok: true, lease: lease(messageId) });
      const bits = unusedBits(payload);
      seen.add(bits);
      const variants = nonCanonicalVariants(payload);
      expect(variants).toHaveLength(2 ** bits - 1);
      for (const v of variants) {
        expect((await verifyLease(await key, `${v}.${signature}`, expected)).ok, v).toBe(false);
      }
    }
    expect([...seen].sort()).toEqual([0, 2, 4]);
  });
});

describe("acking a lease id and its non-canonical spelling", () => {
  it("applies the ack once, warns only on the variant, and the message is not delivered again", async () => {
    const q = await createQueue("lease-canonical");
    expect(
      (
        await api("POST", `${queuePath("lease-canonical")}/consumers`, {
          type: "http_pull",
          settings: { visibility_timeout_ms: 1000 },
        })
      ).status,
    ).toBe(201);
    const { clock } = await shardsOnFakeClock(q.queue_id);
    await api("POST", `${queuePath("lease-canonical")}/messages`, { body: "once" });
    const pulled = await api("POST", `${queuePath("lease-canonical")}/messages/pull`, { batch_size: 1 });
    expect(pulled.json.result.messages).toHaveLength(1);
    const original: string = pulled.json.result.messages[0].lease_id;
    const [payload, signature] = original.split(".") as [string, string];
    const variant = `${payload}.${nonCanonicalVariants(signature)[0]!}`;
    expect(variant).not.toBe(original);

    const res = await api("POST", `${queuePath("lease-canonical")}/messages/ack`, {
      acks: [{ lease_id: original }, { lease_id: variant }],
    });
    expect(res.status).toBe(200);
    expect(res.json.result.ackCount).toBe(1);
    // No warning on the original: it was confirmed. The variant is refused as not issued by us.
    expect(Object.keys(res.json.result.warnings)).toEqual([variant]);
    expect(res.json.result.warnings[variant]).toContain("invalid signature");

    expect(await backlog("lease-canonical")).toBe(0);
    clock.advance(10_000);
    expect(
      (await api("POST", `${queuePath("lease-canonical")}/messages/pull`, { batch_size: 10 })).json.result.messages,
    ).toEqual([]);
  });
});
