/**
 * The calls one storage shard makes to others for the hand-off of ordering keys
 * (handoff.ts): the registrations it owes when it enters an epoch, awaited, since the
 * Coordinator may use the new map only once every owner knows what waits elsewhere; and the
 * releases the trigger of handoff.ts writes as a handed-off key's messages go, sent in the
 * background, each deleted once its owner has it, the rest tried again by the heartbeat.
 */
import { storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { pendingReleases, releasesSent, type Registration } from "./handoff";

export class HandoffOutbox {
  /** Releases being sent: one send at a time, so none goes twice at once. */
  private sending = false;

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly env: Env,
    private readonly sql: SqlStorage,
  ) {}

  /** Delivers every registration to its owner; throws if one could not be. */
  async register(queueId: string, self: string, registrations: readonly Registration[]): Promise<void> {
    await Promise.all(
      registrations.map((r) => storageShardFor(this.env, r.owner).acceptBridges(queueId, self, r.gen, r.keys)),
    );
  }

  /** Sends the releases owed, if any and none are on their way. */
  flush(queueId: string, self: string): void {
    if (this.sending) return;
    const owed = pendingReleases(this.sql);
    if (owed.length === 0) return;
    this.sending = true;
    const send = async (r: Registration) => {
      await storageShardFor(this.env, r.owner).acceptReleases(queueId, self, r.gen, r.keys);
      this.ctx.storage.transactionSync(() => releasesSent(this.sql, r));
    };
    this.ctx.waitUntil(
      Promise.allSettled(owed.map(send)).then((done) => {
        this.sending = false;
        for (const d of done)
          if (d.status === "rejected")
            console.error("sending releases of ordering keys failed (the heartbeat tries again):", d.reason);
      }),
    );
  }
}
