/**
 * The queue's own rows in its Coordinator's SQLite: the `queue` row (settings, map
 * version, publication) and the `shards` table. Every read and write of them is here,
 * so the RPC methods and the control loop change a shard the same way, every change
 * of the map bumps its version with it, and the settings JSON is parsed in one place.
 */
import type { ShardEntry, ShardMap, ShardState } from "../src/kernel/shard-map";
import type { QueueSettings } from "../src/kernel/settings";

export interface InitializeQueue {
  accountId: string;
  queueId: string;
  queueName: string;
  settings: QueueSettings;
}

/** The queue table's one row, as stored. */
interface QueueRow {
  queue_id: string;
  account_id: string;
  queue_name: string;
  created_at: number;
  modified_at: number;
  settings: string;
  ready: number;
  map_version: number;
  published_version: number;
  published_at: number;
  next_shard: number;
  consumer_shards_wanted: number;
}

/** The queue's row with its settings read. */
export interface QueueRecord extends Omit<QueueRow, "settings"> {
  settings: QueueSettings;
}

/** A row of the shards table; `pending` until the shard has been told who it is. */
export interface ShardRecord {
  name: string;
  region: string;
  state: ShardState | "pending";
  created_at: number;
}

/** A storage shard's Durable Object name: its queue, its region, and a number the queue never reuses. */
export function shardName(queueId: string, region: string, index: number): string {
  return `${queueId}:${region}:${index}`;
}

export class QueueStore {
  private readonly sql: SqlStorage;

  constructor(private readonly storage: DurableObjectStorage) {
    this.sql = storage.sql;
  }

  /** The queue, or null before it is created (and after it is destroyed). */
  queue(): QueueRecord | null {
    const row = this.sql.exec("SELECT * FROM queue").toArray()[0] as unknown as QueueRow | undefined;
    return row ? { ...row, settings: JSON.parse(row.settings) as QueueSettings } : null;
  }

  /** The queue once its first shards are active and its map published; null before that. */
  readyQueue(): QueueRecord | null {
    const queue = this.queue();
    return queue?.ready ? queue : null;
  }

  exists(): boolean {
    return this.sql.exec("SELECT 1 FROM queue").toArray().length > 0;
  }

  /** Writes the queue and its first shards, already active: `perRegion[region]` in each region. */
  create(init: InitializeQueue, perRegion: Readonly<Record<string, number>>, now: number): void {
    const most = Math.max(0, ...Object.values(perRegion));
    this.storage.transactionSync(() => {
      this.sql.exec(
        `INSERT INTO queue (one, queue_id, account_id, queue_name, created_at, modified_at, settings, next_shard)
         VALUES (1, ?, ?, ?, ?, ?, ?, ?)`,
        init.queueId,
        init.accountId,
        init.queueName,
        now,
        now,
        JSON.stringify(init.settings),
        most,
      );
      for (const [region, n] of Object.entries(perRegion)) {
        for (let i = 0; i < n; i++) this.insertShard(shardName(init.queueId, region, i), region, "active", now);
      }
    });
  }

  markReady(): void {
    this.sql.exec("UPDATE queue SET ready = 1");
  }

  /** Stores new settings in a new map version; false when they are the settings stored already. */
  writeSettings(next: QueueSettings, now: number): boolean {
    const json = JSON.stringify(next);
    return (
      this.sql
        .exec(
          "UPDATE queue SET settings = ?, modified_at = ?, map_version = map_version + 1 WHERE settings != ? RETURNING one",
          json,
          now,
          json,
        )
        .toArray().length > 0
    );
  }

  /** The map brokers route by, as of now; null until the queue is ready. */
  shardMap(now: number): ShardMap | null {
    const queue = this.readyQueue();
    if (!queue) return null;
    return {
      version: queue.map_version,
      accountId: queue.account_id,
      queueId: queue.queue_id,
      queueName: queue.queue_name,
      settings: queue.settings,
      shards: this.shards(),
      publishedAt: now,
    };
  }

  /** Marks `version` as written to KV at `now`; a later version written meanwhile stays marked. */
  markPublished(version: number, now: number): void {
    this.sql.exec("UPDATE queue SET published_version = MAX(published_version, ?), published_at = ?", version, now);
  }

  /** Has the next publish write the map again although it has not changed. */
  markStale(): void {
    this.sql.exec("UPDATE queue SET published_version = MIN(published_version, map_version - 1)");
  }

  /** The shards brokers and consumers may use: not the ones still being created. */
  shards(): ShardEntry[] {
    return this.sql
      .exec("SELECT name, region, state FROM shards WHERE state != 'pending' ORDER BY created_at, name")
      .toArray() as unknown as ShardEntry[];
  }

  /** Every shard, pending ones too. */
  allShards(): ShardRecord[] {
    return this.sql.exec("SELECT name, region, state, created_at FROM shards").toArray() as unknown as ShardRecord[];
  }

  pendingShards(): Array<{ name: string; region: string }> {
    return this.sql.exec("SELECT name, region FROM shards WHERE state = 'pending'").toArray() as unknown as Array<{
      name: string;
      region: string;
    }>;
  }

  /**
   * Writes `count` new shards of `region` as pending, numbered on from the last, and
   * calls `alongside` with their names in the same transaction; returns the names.
   */
  addPendingShards(region: string, count: number, now: number, alongside: (names: string[]) => void): string[] {
    const { queue_id, next_shard } = this.sql
      .exec<{ queue_id: string; next_shard: number }>("SELECT queue_id, next_shard FROM queue")
      .one();
    const names = Array.from({ length: count }, (_, i) => shardName(queue_id, region, next_shard + i));
    this.storage.transactionSync(() => {
      for (const name of names) this.insertShard(name, region, "pending", now);
      this.sql.exec("UPDATE queue SET next_shard = next_shard + ?", count);
      alongside(names);
    });
    return names;
  }

  /** Puts shards still pending on the map as active, in a new map version. */
  markActive(names: readonly string[]): void {
    this.storage.transactionSync(() => {
      for (const name of names)
        this.sql.exec("UPDATE shards SET state = 'active' WHERE name = ? AND state = 'pending'", name);
      this.bumpMapVersion();
    });
  }

  /** Records a shard's new state in a new map version, and `alongside` in the same transaction. */
  recordShardState(name: string, state: ShardState, now: number, alongside?: () => void): void {
    this.storage.transactionSync(() => {
      this.sql.exec("UPDATE shards SET state = ?, changed_at = ? WHERE name = ?", state, now, name);
      this.bumpMapVersion();
      alongside?.();
    });
  }

  /** Deletes the shards retired before `before`, in a new map version if there were any; returns their names. */
  /** When the earliest retired shard was retired, or null when none is. */
  firstRetiredAt(): number | null {
    return this.sql.exec<{ t: number | null }>("SELECT MIN(changed_at) AS t FROM shards WHERE state = 'retired'").one()
      .t;
  }

  forgetRetired(before: number): string[] {
    const gone = this.sql
      .exec("DELETE FROM shards WHERE state = 'retired' AND changed_at < ? RETURNING name", before)
      .toArray() as unknown as Array<{ name: string }>;
    if (gone.length > 0) this.bumpMapVersion();
    return gone.map((g) => g.name);
  }

  /** Records how many consumer shards the backlog calls for, and `alongside` in the same transaction. */
  setConsumerShardsWanted(wanted: number, alongside: () => void): void {
    this.storage.transactionSync(() => {
      this.sql.exec("UPDATE queue SET consumer_shards_wanted = ?", wanted);
      alongside();
    });
  }

  private insertShard(name: string, region: string, state: "active" | "pending", now: number): void {
    this.sql.exec("INSERT INTO shards (name, region, state, created_at) VALUES (?, ?, ?, ?)", name, region, state, now);
  }

  private bumpMapVersion(): void {
    this.sql.exec("UPDATE queue SET map_version = map_version + 1");
  }
}
