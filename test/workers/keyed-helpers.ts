// The count of the keyed messages a shard holds, read from its rows, for the keyed-message suites.
import { env, runInDurableObject } from "cloudflare:test";
import { storageShardFor } from "../../src/kernel/addressing";
import type { DeliveryState } from "../../storage-shard/segments/delivery-state";
import { decodeHeaders } from "../../storage-shard/segments/segment";
import { settledOf } from "../../storage-shard/segments/segment-rows";
import type { StorageShard } from "../../storage-shard/storage-shard";

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
    for (const row of state.storage.sql.exec<{ seg: number; settled: ArrayBuffer; headers: string }>(
      "SELECT seg, settled, headers FROM segments WHERE keyed > 0",
    )) {
      const settled = settledOf(ds, row.seg, row.settled);
      decodeHeaders(row.headers).forEach((h, slot) => {
        if (h.key !== undefined && (key === undefined || h.key === key) && !settled.has(slot)) n++;
      });
    }
    return n;
  });
}
