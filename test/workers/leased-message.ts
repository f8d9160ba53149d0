import type { LeasedMessage } from "../../src/kernel/protocol";

/** A leased message as a consumer shard holds it, with nothing in it but its id and attempts. */
export const leased = (id: string, attempts = 1): LeasedMessage => ({
  id,
  body: new Uint8Array(),
  contentType: "json",
  enqueuedAt: 0,
  attempts,
  leaseId: "L",
  copyKey: "",
});
