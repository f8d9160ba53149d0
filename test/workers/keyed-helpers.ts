// The HTTP calls the keyed-message suites (ordered-lanes, keyed-dead-letters) make, and the count of the keyed messages a shard holds, in one place.
import { env, runInDurableObject } from "cloudflare:test";
import { storageShardFor } from "../../src/kernel/addressing";
import type { DeliveryState } from "../../storage-shard/segments/delivery-state";
import { decodeHeaders } from "../../storage-shard/segments/segment";
import { settledOf } from "../../storage-shard/segments/segment-rows";
import type { StorageShard } from "../../storage-shard/storage-shard";
import { api, queuePath } from "./helpers";

/** A pulled message as the pull route answers it. */
export interface Pulled {
  id: string;
  body: string;
  attempts: number;
  lease_id: string;
  ordering_key?: string;
}

export const pull = (q: string, body: unknown = {}) => api("POST", `${queuePath(q)}/messages/pull`, body);
export const ack = (q: string, body: unknown) => api("POST", `${queuePath(q)}/messages/ack`, body);
/** One message sent over HTTP, with an ordering key when `key` is given. */
export const send = (q: string, body: unknown, key?: string, extra: Record<string, unknown> = {}) =>
  api("POST", `${queuePath(q)}/messages`, { body, ...(key === undefined ? {} : { ordering_key: key }), ...extra });

/**
 * Keyed messages a shard holds unsettled (ready, delayed or leased): the slots of its
 * segments whose header carries a key (`key`'s alone when given), less those settled,
 * in the row's bitmap or by an ack the shard deferred in memory and has not written yet
 * (segment-rows.ts settledOf). What a count of the old `lane_messages` rows counted.
 */
export async function unsettledKeyed(shard: string, key?: string): Promise<number> {
  return runInDurableObject(storageShardFor(env, shard), (obj: StorageShard, state) => {
    const ds = (obj as unknown as { delivery: DeliveryState }).delivery;
    let n = 0;
    for (const row of state.storage.sql.exec<{ seg: number; settled: ArrayBuffer; headers: string }>("SELECT seg, settled, headers FROM segments WHERE keyed > 0")) {
      const settled = settledOf(ds, row.seg, row.settled);
      decodeHeaders(row.headers).forEach((h, slot) => {
        if (h.key !== undefined && (key === undefined || h.key === key) && !settled.has(slot)) n++;
      });
    }
    return n;
  });
}
