import type { MessageFilter, MessageStatus, PurgeResult } from "../src/kernel/message-operations";
import type { DrawnIdAnswer, DrawnIdProbe } from "../src/kernel/id-claims";
import type { LeasedMessage, LeaseRef } from "../src/kernel/protocol";
import { PURGE_PER_CALL } from "../src/kernel/limits";
import {
  cancelMessage,
  countMatching,
  findMessage,
  leaseMatching,
  peekReady,
  purgeSome,
  releaseLeases,
} from "./segments/segment-operations";
import { drawnIds } from "./segments/drawn-ids";
import { knownIds } from "./segments/remembered-ids";
import { takeKeyHead, type HeadTaken } from "./keyed/keyed-operations";
import { heldKeys } from "./keyed/held-keys";
import { ShardCore } from "./shard-core";

/**
 * A storage shard's queue operations, as RPCs: purge, lookup and cancel by id, redrive, the
 * ids a retried send asks about, the ordering keys held back and their release, and the
 * dashboard's peek (segments/segment-operations.ts, keyed/keyed-operations.ts). The shard
 * instantiated is StorageShard (storage-shard.ts), whose constructor counts these calls too
 * (src/kernel/rpc-meter.ts).
 */
export abstract class ShardOperations extends ShardCore {
  /** Deletes up to `limit` messages of any state (ready, delayed, leased), oldest first; with `withIds`, answers their ids. */
  purge(queueId: string, limit: number = PURGE_PER_CALL, withIds = false): PurgeResult {
    if (this.notServing(queueId)) return { deleted: 0, more: false, ...(withIds ? { ids: [] } : {}) };
    const now = this.clock.now();
    const ids: string[] | undefined = withIds ? [] : undefined;
    const r = this.inTransaction(now, () => purgeSome(this.sql, this.delivery, now, limit, ids));
    this.afterRemoval(r, now);
    this.flushReleases();
    // Emptied: the next arrival must wake a consumer again, as after a lease that found nothing.
    if (!r.more) this.wakeups.forget();
    return { deleted: r.count, more: r.more, ...(ids ? { ids } : {}) };
  }

  findMessage(queueId: string, id: string): MessageStatus | null {
    const now = this.clock.now();
    return this.ifServing(queueId, null, () => findMessage(this.sql, this.delivery, now, id));
  }

  /**
   * Which of `ids` (ids their sender chose or kept) this shard holds or remembers storing,
   * in any state, retired too: a retried idempotent send asks every shard of its queue,
   * since the shard that took an earlier attempt may have stopped taking sends since.
   */
  heldIds(queueId: string, ids: string[]): string[] {
    if (!this.identity || this.identity.queueId !== queueId) return [];
    return [...knownIds(this.sql, ids)];
  }

  /**
   * Whether this shard drew ids a producer now sends as its own, and for this message or
   * another (drawn-ids.ts). Retired too: the ids it drew stay taken once it is emptied.
   */
  drawnIds(queueId: string, probes: DrawnIdProbe[]): DrawnIdAnswer[] {
    if (!this.identity || this.identity.queueId !== queueId) return probes.map(() => null);
    return drawnIds(this.sql, this.delivery, this.shardNo, this.clock.now(), probes);
  }

  /** The ordering keys held back here and why (held-keys.ts heldKeys). */
  heldKeys(queueId: string, limit: number): ReturnType<typeof heldKeys> {
    return this.ifServing(queueId, { keys: [], lanes: 0, held: { leased: 0, retry: 0, delayed: 0, handoff: 0 } }, () =>
      heldKeys(this.sql, this.delivery, this.clock.now(), limit),
    );
  }

  /** The head of a held key, if it is the message named, leased alone for an operator's release (keyed-operations.ts takeKeyHead). */
  takeLaneHead(queueId: string, key: string, expected: string, leaseMs: number): HeadTaken {
    const now = this.clock.now();
    return this.ifServing(queueId, null, () => {
      this.alarms.wake(now);
      return this.ctx.storage.transactionSync(() => takeKeyHead(this.sql, this.delivery, now, key, expected, leaseMs));
    });
  }

  /** Ready messages with their bodies, untouched (the dashboard's peek). */
  peekReady(queueId: string, limit: number): Array<MessageStatus & { body: Uint8Array; orderingKey?: string }> {
    return this.ifServing(queueId, [], () => peekReady(this.sql, this.delivery, this.clock.now(), limit));
  }

  /** Deletes one message wherever it stands; false when this shard does not hold it. */
  cancelMessage(queueId: string, id: string): boolean {
    if (this.notServing(queueId)) return false;
    const now = this.clock.now();
    const r = this.inTransaction(now, () => cancelMessage(this.sql, this.delivery, now, id));
    this.afterRemoval(r, now);
    this.flushReleases();
    return r.count > 0;
  }

  /** Leases ready messages matching a filter, attempts unchanged: a redrive's batch, acked through settle(). */
  leaseMatching(queueId: string, filter: MessageFilter, limit: number, leaseMs: number): LeasedMessage[] {
    if (this.notServing(queueId)) return [];
    const now = this.clock.now();
    const { messages, delta } = this.inTransaction(now, () =>
      leaseMatching(this.sql, this.delivery, now, filter, limit, leaseMs),
    );
    this.applyDelta(delta);
    if (messages.length > 0) this.alarms.wake(now);
    this.leasedNow += messages.length;
    return messages;
  }

  /** Ends leases early so the messages are ready again now (a redrive that could not write them). */
  releaseLeases(queueId: string, refs: LeaseRef[]): number {
    if (this.notServing(queueId)) return 0;
    const now = this.clock.now();
    const released = this.ctx.storage.transactionSync(() => releaseLeases(this.sql, this.delivery, now, refs));
    this.leasedNow = Math.max(0, this.leasedNow - released);
    if (released > 0) this.alarms.wake(now);
    return released;
  }

  countMatching(queueId: string, filter: MessageFilter): number {
    return this.ifServing(queueId, 0, () => countMatching(this.sql, this.delivery, this.clock.now(), filter));
  }
}
