import { serviceConfig } from "../kernel/config";
import type { Env } from "../kernel/env";
import { unavailable } from "../kernel/errors";
import { randomHex } from "../kernel/ids";
import type { ShardBacklog } from "../kernel/figures";
import type { AppendRequest, AppendResult, EncodedMessage } from "../kernel/protocol";
import { notRetired, type ShardEntry, type ShardMap } from "../kernel/shard-map";
import { storageShardFor } from "../kernel/addressing";
import { sleep } from "../kernel/sleep";
import type { PendingMessage } from "./pending-messages";
import { shardForId, shardForKey } from "./placement";
import { stickyShard } from "./sticky-placement";
import { findQueue, lookupQueue } from "./queue-lookup";
import { noteShardRefused } from "./shard-map-cache";

/**
 * Shards that refused for a reason other than room (draining, retired, unknown: a stale
 * map) before a send gives up; each refusal stored nothing. Refusals for want of room
 * are not counted here: a queue may have more full shards than this, and every one is
 * asked before the send waits.
 */
const MAX_SHARD_ATTEMPTS = 8;
/**
 * How long a send keeps trying when every shard is at its capacity, waiting for the
 * autoscaler. It grows a region only on two readings in a row after the last change has
 * settled (coordinator/autoscaler.ts), and full shards show no more than their capacity,
 * so doubling a region's shards takes it three or so steps of a few heartbeats each: a
 * send waits that out rather than fail.
 */
const OVERLOAD_PATIENCE_MS = 10_000;
/**
 * Rounds over every shard (or waits for a keyed send's map) a send makes before it gives
 * up, however long they took: patience is wall time, and an isolate starved of CPU for
 * seconds (a busy machine, a long collection) would otherwise spend it all in a round or
 * two and answer 503 without having waited for anything. Most rounds sleep under 400 ms.
 */
const MIN_PATIENT_ROUNDS = 8;
/** Retries of the same shard after a transient RPC failure; a retry is deduplicated by id on the shard. */
const MAX_TRANSIENT_RETRIES = 2;
const BACKOFF_BASE_MS = 25;
const BACKOFF_CAP_MS = 400;

/**
 * What a send answers with: its ids in order, its queue, and the backlog of each shard
 * that took some of it (none when nothing was written: an idempotent send already stored).
 */
export interface Stored {
  ids: string[];
  queueId: string;
  backlogs: ShardBacklog[];
  /** The other shards' figures as the shards written to last heard them (src/routing/queue-figures.ts). */
  peers?: ShardBacklog[];
  /** The shards not retired in the latest map the send went by. */
  live?: string[];
}

export interface SendTarget {
  accountId: string;
  queueRef: string;
  region: string | undefined;
}

/**
 * Stores a batch and returns the message ids in order (with the backlog of each shard
 * that took some, for the queue's figures). A batch of fresh messages goes to one shard,
 * all or nothing. Messages that keep their ids (`keepIds`: a move, an idempotent send)
 * go each to the shard its id picks (placement.ts), one all-or-nothing write per shard:
 * if one of those fails the call throws, and a write again of the same ids stores the
 * rest, each shard skipping the ids it has. Messages with an ordering key go to their
 * key's shard, in the batch's order, never in the same write as keyless ones (a shard
 * keeps them in lanes: docs/ordered-lanes.md); a batch with keys may so take several
 * writes, each all or nothing.
 */
export async function storeMessages(
  env: Env,
  target: SendTarget,
  pending: PendingMessage[],
  batchDelaySeconds?: number,
  keepIds?: string[],
  /** Ask the shard to skip ids it already stored: a write again of the same messages. */
  dedupe = keepIds !== undefined,
): Promise<Stored> {
  const map = await lookupQueue(env, target.accountId, target.queueRef);
  const messages: EncodedMessage[] = pending.map((m, i) => ({
    ...(keepIds ? { id: keepIds[i]! } : {}),
    body: m.body,
    contentType: m.contentType,
    delayMs: (m.delaySeconds ?? batchDelaySeconds ?? map.settings.delivery_delay) * 1000,
    checksum: m.checksum,
    ...(m.moveKey !== undefined ? { moveKey: m.moveKey } : {}),
    ...(m.sentAt !== undefined ? { sentAt: m.sentAt } : {}),
    ...(m.orderingKey !== undefined ? { orderingKey: m.orderingKey } : {}),
  }));
  const region = target.region ?? serviceConfig(env).defaultRegion;
  // Ids kept or chosen by the sender may be written again after a lost reply, even once consumed.
  const flags = { ...(dedupe ? { dedupe: true } : {}), ...(keepIds ? { remember: true } : {}) };
  if (!keepIds && messages.every((m) => m.orderingKey === undefined)) {
    // Fresh messages get their ids from the shard that stores them: ids that say where they live.
    // A write again after a lost reply is recognised by its batch token and answered with the same ids.
    const batch = randomHex(8);
    const { queueId, backlog, ids, peers, live } = await storeOnOneShard(
      env,
      target,
      map,
      messages,
      { ...flags, batch },
      (m, exclude) => stickyShard(m, region, exclude, messages.length, Date.now()),
    );
    return { ids, queueId, backlogs: [backlog], peers, live };
  }
  const ids: string[] = keepIds ? [...keepIds] : new Array<string>(messages.length);
  const storeGroups = async (current: ShardMap, groups: Placed[]): Promise<OneShard[]> => {
    const settled = await Promise.allSettled(
      groups.map(async ({ indexes, choose }) => {
        const group = indexes.map((i) => messages[i]!);
        // Fresh keyless messages (beside keyed ones) stay together on one shard, as alone.
        const batch = keepIds ? {} : { batch: randomHex(8) };
        try {
          const stored = await storeOnOneShard(env, target, current, group, { ...flags, ...batch }, choose);
          indexes.forEach((i, k) => (ids[i] = stored.ids[k]!));
          return [stored];
        } catch (err) {
          if (!(err instanceof KeysApart)) throw err;
          // Keys that shared a shard in the map they were placed by do not in the current
          // one (a scale-out since): no shard takes them all, and none of them is stored
          // yet, so each goes to its own shard, still in the batch's order.
          return storeGroups(err.map, placeEach(err.map, region, messages, keepIds, indexes));
        }
      }),
    );
    // Thrown only once every group is done: a retry must not start while a write of this
    // attempt is still waiting for room, or it could look for these ids before they land.
    const failed = settled.find((s) => s.status === "rejected");
    if (failed) throw failed.reason;
    return settled.flatMap((s) => (s as PromiseFulfilledResult<OneShard[]>).value);
  };
  const stored = await storeGroups(map, placeEach(map, region, messages, keepIds));
  return {
    ids,
    queueId: stored[0]?.queueId ?? map.queueId,
    backlogs: stored.map((s) => s.backlog),
    peers: stored.flatMap((s) => s.peers ?? []),
    ...(stored[0] ? { live: stored[0].live } : {}),
  };
}

/** One shard's write: its exact figures and what it knew of the others. */
interface OneShard {
  queueId: string;
  backlog: ShardBacklog;
  ids: string[];
  peers: ShardBacklog[] | undefined;
  live: string[];
}

/** A keyed write's keys have different shards in the current map `map`: it is placed again by it. */
class KeysApart extends Error {
  constructor(readonly map: ShardMap) {
    super("the keys of a write have different shards in the current map");
  }
}

interface Placed {
  /** Indexes into the batch, in its order. */
  indexes: number[];
  /** Should the shard refuse, the group goes on together to the next shard this picks. */
  choose: (map: ShardMap, exclude: ReadonlySet<string>) => ShardEntry | undefined;
}

/**
 * A batch cut into the writes it takes: keyed messages by their key's shard, keyless ones
 * that keep their ids by the shard each id picks, fresh keyless ones all on the sticky
 * shard. A write holds keyed or keyless messages, never both. A keyed write whose keys
 * part in a newer map throws KeysApart from its choose, to be placed again by that map.
 */
function placeEach(
  map: ShardMap,
  region: string,
  messages: EncodedMessage[],
  keepIds: string[] | undefined,
  only: readonly number[] = messages.map((_, i) => i),
): Placed[] {
  const groups = new Map<string, Placed>();
  const keyless = only.filter((i) => messages[i]!.orderingKey === undefined).length;
  for (const i of only) {
    const m = messages[i]!;
    let key: string;
    let choose: Placed["choose"];
    if (m.orderingKey !== undefined) {
      const orderingKey = m.orderingKey;
      const groupKey = `key:${shardForKey(map, orderingKey)?.name ?? ""}`;
      key = groupKey;
      choose = (current, exclude) => {
        // Placed by one map, asked again with a newer one: its keys may part.
        const keys = new Set(groups.get(groupKey)!.indexes.map((j) => messages[j]!.orderingKey!));
        if (keys.size > 1 && new Set([...keys].map((k) => shardForKey(current, k)?.name)).size > 1)
          throw new KeysApart(current);
        return shardForKey(current, orderingKey, exclude);
      };
    } else if (keepIds) {
      const id = keepIds[i]!;
      key = `id:${shardForId(map, region, id)?.name ?? ""}`;
      choose = (current, exclude) => shardForId(current, region, id, exclude);
    } else {
      key = "fresh";
      choose = (current, exclude) => stickyShard(current, region, exclude, keyless, Date.now());
    }
    const group = groups.get(key);
    if (group) group.indexes.push(i);
    else groups.set(key, { indexes: [i], choose });
  }
  return [...groups.values()];
}

/**
 * Stores messages on one shard of the queue, all or nothing: the shard `choose` names. A
 * shard that refuses stored nothing, so `choose` is asked again without it. One that
 * refuses for want of room (at capacity) is passed over until every shard of the map has
 * been asked: then the Coordinator's current map is read, since shards added since may
 * have room, and only when it names none untried does the send wait (full jitter,
 * growing) and ask them all again, for OVERLOAD_PATIENCE_MS and MIN_PATIENT_ROUNDS rounds. A send is answered
 * "unavailable" for want of room only after every active shard refused it. A keyed write
 * refused by its key's shard under a newer epoch waits, as long, for the map that goes
 * with it, and so does one refused by its key's shard as draining (a drain not in the map
 * yet, or cut short by a reset). Other refusals (draining, retired, unknown: a stale map)
 * re-read the map.
 * Lands exactly once or throws.
 */
async function storeOnOneShard(
  env: Env,
  target: SendTarget,
  firstMap: ShardMap,
  messages: EncodedMessage[],
  flags: Pick<AppendRequest, "dedupe" | "remember" | "batch">,
  choose: (map: ShardMap, exclude: ReadonlySet<string>) => ShardEntry | undefined,
): Promise<OneShard> {
  let map = firstMap;
  /** Shards that will not take this batch: draining, retired, unknown, corrupt. */
  const refused = new Set<string>();
  /** Shards that had no room when asked in this round. */
  const full = new Set<string>();
  const passOver = () => new Set([...refused, ...full]);
  let refreshed = false;
  let round = 0;
  const patience = Date.now() + OVERLOAD_PATIENCE_MS;
  const outOfPatience = () => Date.now() >= patience && round >= MIN_PATIENT_ROUNDS;
  const keyed = messages.some((m) => m.orderingKey !== undefined);

  for (;;) {
    const shard = choose(map, passOver());
    if (!shard) {
      if (full.size > 0) {
        // Every shard of this map refused, some for want of room. A scale-out this
        // map predates may have added shards with room: ask for the current map first.
        map = (await findQueue(env, target.accountId, target.queueRef, { current: true })) ?? map;
        if (choose(map, passOver())) continue;
        if (outOfPatience()) break;
        await sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(6, round++)));
        full.clear(); // a new round over every shard that may take sends
        continue;
      }
      if (refreshed) break;
      map = await lookupQueue(env, target.accountId, target.queueRef, { current: true });
      refreshed = true;
      continue;
    }
    // A send from a region without a shard of its own says so: the autoscaler gives the region one once it sends enough.
    const origin = target.region !== undefined && target.region !== shard.region ? { origin: target.region } : {};
    const result = await appendWithRetry(env, shard, { queueId: map.queueId, messages, ...flags, ...origin });
    if (result.ok)
      return {
        queueId: map.queueId,
        backlog: result.backlog,
        ids: result.ids,
        peers: result.peers,
        live: notRetired(map.shards).map((s) => s.name),
      };
    if (result.refused === "overloaded") {
      full.add(shard.name);
      continue;
    }
    if (result.refused === "not_owner" || (result.refused === "draining" && keyed)) {
      // The shard has entered an epoch the stored map does not show yet: the Coordinator
      // stores that map once every shard has entered it, or pushes the stored one's again
      // (docs/ordered-lanes.md). Sending the key anywhere the stored map does not name would
      // break the hand-off, so the send waits for the map, as for room. So too when the
      // key's shard in the map is draining: a drain tells the shard before its epoch and
      // map exist, and one a Coordinator reset cut short is undone; either way the key
      // has no other home until the map says so.
      if (outOfPatience()) break;
      await sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.min(6, round++)));
      map = await lookupQueue(env, target.accountId, target.queueRef, { current: true });
      continue;
    }
    refused.add(shard.name);
    if (refused.size >= MAX_SHARD_ATTEMPTS) break;
    if (result.refused === "draining" || result.refused === "retired") {
      noteShardRefused(target.accountId, target.queueRef, shard.name, result.refused);
    }
    if (!refreshed && result.refused !== "draining" && result.refused !== "corrupt") {
      // Retired or unknown: the map is older than a shard change or a queue delete.
      map = await lookupQueue(env, target.accountId, target.queueRef, { current: true });
      refreshed = true;
    }
  }
  throw unavailable("no storage shard of this queue accepted the messages; retry later");
}

async function appendWithRetry(env: Env, shard: ShardEntry, req: AppendRequest): Promise<AppendResult> {
  for (let retry = 0; ; retry++) {
    try {
      // The first try may have been stored with its reply lost: a retry skips what is there.
      return await storageShardFor(env, shard.name, shard.region).append(retry > 0 ? { ...req, dedupe: true } : req);
    } catch (err) {
      const e = err as { retryable?: boolean; overloaded?: boolean };
      // Never retry an overloaded object: that only adds to its load.
      if (!e.retryable || e.overloaded || retry >= MAX_TRANSIENT_RETRIES) {
        console.error(`append to shard ${shard.name} failed:`, err);
        throw unavailable("storage shard unavailable; retry later", null);
      }
      await sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** retry));
    }
  }
}
