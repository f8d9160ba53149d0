/**
 * Message ids: 32 lowercase hex characters like Cloudflare's, time-ordered so that
 * an id tells when it was made and ids from one broker sort in send order:
 * 12 hex of milliseconds since the epoch, then 20 random hex.
 */
export function newMessageId(now: number): string {
  return now.toString(16).padStart(12, "0").slice(-12) + randomHex(10);
}

/** Queue ids: 32 random hex characters, as Cloudflare's queue_id. */
export function newQueueId(): string {
  return randomHex(16);
}

export function randomHex(bytes: number): string {
  const buf = new Uint8Array(bytes);
  crypto.getRandomValues(buf);
  let out = "";
  for (const b of buf) out += HEX[b]!;
  return out;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

export const QUEUE_ID_PATTERN = /^[0-9a-f]{32}$/;
export const MESSAGE_ID_PATTERN = /^[0-9a-f]{32}$/;
