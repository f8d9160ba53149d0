import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/kernel/env";
import { newQueueId, QUEUE_ID_PATTERN } from "../src/kernel/ids";
import { jurisdictionOfQueue, type Jurisdiction } from "../src/kernel/jurisdiction";
import type { QueueInfo } from "../src/kernel/queue-info";
import type { QueueSettings } from "../src/kernel/settings";
import { coordinatorFor } from "../src/kernel/addressing";
import { meteredSql, newMeter, readMeter, type MeterReading } from "../src/kernel/sql-meter";
import { meteredRpcs } from "../src/kernel/rpc-meter";
import { runMigrations } from "../src/kernel/sqlite-migrations";

/**
 * The catalog's SQLite schema. The first step is the table the catalog once created by
 * hand, IF NOT EXISTS: a catalog made before it had migrations already holds it, data and all.
 */
const MIGRATIONS: string[] = [
  `CREATE TABLE IF NOT EXISTS queues (
     queue_name TEXT PRIMARY KEY,
     queue_id   TEXT NOT NULL UNIQUE,
     state      TEXT NOT NULL,
     created_at INTEGER NOT NULL
   )`,
  // The queue as its Coordinator last described it, so a listing answers from here alone
  // instead of waking one Coordinator per queue listed.
  `ALTER TABLE queues ADD COLUMN info TEXT`,
  // The unfiltered total, kept beside the rows: COUNT(*) would read every row of the account
  // to answer a page of 20.
  `CREATE TABLE totals (one INTEGER PRIMARY KEY CHECK (one = 1), active INTEGER NOT NULL)`,
  `INSERT INTO totals (one, active) SELECT 1, COUNT(*) FROM queues WHERE state = 'active'`,
];

interface CatalogRow {
  queue_name: string;
  queue_id: string;
  state: "creating" | "active";
}

/** What a listing keeps to: the exact name, names that start with a prefix, or both. */
export interface QueueListFilter {
  name?: string;
  prefix?: string;
}

/** `queue` is null when the account already has a queue of that name. */
export interface CreateQueueResult {
  queue: QueueInfo | null;
}

/**
 * The queues of one account: names are unique per account, and listing must see a
 * queue the moment it is created. Workers KV (eventually consistent, up to 60 s)
 * cannot promise either, so this small object keeps the name -> id index; each
 * queue's state lives in its own Coordinator.
 */
export class AccountCatalog extends DurableObject<Env> {
  /** RPCs served and rows written and read since this object started (src/kernel/sql-meter.ts). */
  private readonly cost = newMeter();
  private readonly since = Date.now();
  private readonly sql: SqlStorage;
  /** Names whose create awaits its Coordinator right now (the input gate lets others in meanwhile). */
  private readonly inFlight = new Set<string>();
  /** Per queue, the latest refreshInfo() call: only its answer is kept (see refreshInfo). */
  private readonly refreshes = new Map<string, number>();
  private refreshSeq = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = meteredSql(ctx.storage.sql, this.cost);
    runMigrations(this.sql, MIGRATIONS);
    return meteredRpcs(this, this.cost, ["costFigures"]);
  }

  /** What this object was billed for since it started: the benchmark's read, not counted as an RPC. */
  costFigures(): MeterReading {
    return readMeter(this.cost, this.since);
  }

  /**
   * The row is written before the Coordinator is initialised, so a concurrent create
   * of the same name sees it; a create that failed half-way is finished by the next.
   */
  async createQueue(
    accountId: string,
    queueName: string,
    settings: QueueSettings,
    jurisdiction?: Jurisdiction,
  ): Promise<CreateQueueResult> {
    let row = this.byName(queueName);
    // Active, or being created by a request still in flight here: the name is taken.
    if (row?.state === "active" || this.inFlight.has(queueName)) return { queue: null };
    // A create that failed half-way in another jurisdiction: its id cannot serve this one, and
    // its objects hold nothing (no send reaches a queue before it is active).
    if (row && jurisdictionOfQueue(row.queue_id) !== jurisdiction) {
      this.sql.exec("DELETE FROM queues WHERE queue_name = ? AND state = 'creating'", queueName);
      row = null;
    }
    if (!row) {
      row = { queue_name: queueName, queue_id: newQueueId(jurisdiction), state: "creating" };
      this.sql.exec(
        "INSERT INTO queues (queue_name, queue_id, state, created_at) VALUES (?, ?, 'creating', ?)",
        queueName,
        row.queue_id,
        Date.now(),
      );
    }
    this.inFlight.add(queueName);
    try {
      const queue = await coordinatorFor(this.env, row.queue_id).initialize({
        accountId,
        queueId: row.queue_id,
        queueName,
        settings,
      });
      this.ctx.storage.transactionSync(() => {
        // A delete may have taken the row meanwhile: only a row that became active is counted.
        const activated = this.sql
          .exec(
            "UPDATE queues SET state = 'active', info = ? WHERE queue_id = ? AND state = 'creating' RETURNING queue_id",
            JSON.stringify(queue),
            row.queue_id,
          )
          .toArray();
        if (activated.length) this.sql.exec("UPDATE totals SET active = active + 1");
      });
      return { queue };
    } finally {
      this.inFlight.delete(queueName);
    }
  }

  /** A queue's id from its name or id; null when this account has no such queue. */
  resolve(ref: string): string | null {
    const row = QUEUE_ID_PATTERN.test(ref) ? this.byId(ref) : this.byName(ref);
    return row?.state === "active" ? row.queue_id : null;
  }

  /**
   * A page of the account's queues, by name, answered from this object's rows: the page
   * walks the primary-key index (queue_name) from its start, or from the prefix, and
   * the unfiltered total is one row of `totals`, so a page of n after k others reads
   * about k + n rows, plus the rows matching a filter when one is given (counted once).
   * A Coordinator is asked only for a queue whose description this catalog lacks (created
   * before it kept them), once.
   */
  async listQueues(
    page: number,
    perPage: number,
    filter: QueueListFilter = {},
  ): Promise<{ queues: QueueInfo[]; total: number }> {
    const conds = ["state = 'active'"];
    const args: SqlStorageValue[] = [];
    if (filter.name !== undefined) {
      conds.push("queue_name = ?");
      args.push(filter.name);
    }
    if (filter.prefix) {
      conds.push("queue_name >= ? AND queue_name < ?");
      args.push(filter.prefix, prefixEnd(filter.prefix));
    }
    const where = conds.join(" AND ");
    const total =
      conds.length === 1
        ? (this.sql.exec<{ active: number }>("SELECT active FROM totals").toArray()[0]?.active ?? 0)
        : this.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM queues WHERE ${where}`, ...args).one().n;
    const rows = this.sql
      .exec(
        `SELECT queue_id, info FROM queues WHERE ${where} ORDER BY queue_name LIMIT ? OFFSET ?`,
        ...args,
        perPage,
        (page - 1) * perPage,
      )
      .toArray() as unknown as Array<{ queue_id: string; info: string | null }>;
    const infos = await Promise.all(
      rows.map((r) => {
        const kept = r.info !== null ? (JSON.parse(r.info) as QueueInfo) : null;
        // A description kept before consumers were listed whole (with their settings) is taken again, once.
        return kept && kept.consumers.every((c) => c.settings !== undefined) ? kept : this.describe(r.queue_id, r.info);
      }),
    );
    const queues: QueueInfo[] = [];
    for (const q of infos) if (q) queues.push(q);
    return { queues, total };
  }

  /**
   * Takes the queue's description from its Coordinator again, after a change to what a
   * listing shows (settings, consumers). Two refreshes of one queue may overlap and their
   * answers arrive in either order; the one asked for last started after every change
   * whose refresh came in before it, so only its answer is kept.
   * Cost: one RPC here, one Coordinator RPC, one row written, per queue or consumer change.
   */
  async refreshInfo(queueId: string): Promise<void> {
    const ticket = ++this.refreshSeq;
    this.refreshes.set(queueId, ticket);
    const info = await coordinatorFor(this.env, queueId).info();
    if (this.refreshes.get(queueId) !== ticket) return;
    this.refreshes.delete(queueId);
    if (info)
      this.sql.exec(
        "UPDATE queues SET info = ? WHERE queue_id = ? AND state = 'active'",
        JSON.stringify(info),
        queueId,
      );
  }

  /** The queue's description from its Coordinator, kept unless a refresh replaced `had` (the one read) meanwhile. */
  private async describe(queueId: string, had: string | null): Promise<QueueInfo | null> {
    const info = await coordinatorFor(this.env, queueId).info();
    if (info)
      this.sql.exec("UPDATE queues SET info = ? WHERE queue_id = ? AND info IS ?", JSON.stringify(info), queueId, had);
    return info;
  }

  /** Every queue of the account, by name, without asking their Coordinators (GET /metrics walks them). */
  queueIds(): Array<{ queue_name: string; queue_id: string }> {
    return this.sql
      .exec("SELECT queue_name, queue_id FROM queues WHERE state = 'active' ORDER BY queue_name")
      .toArray() as unknown as Array<{
      queue_name: string;
      queue_id: string;
    }>;
  }

  /** Deletes the queue's data first and its name last, so a retried delete finishes the job. */
  async deleteQueue(ref: string): Promise<boolean> {
    const row = QUEUE_ID_PATTERN.test(ref) ? this.byId(ref) : this.byName(ref);
    if (!row) return false;
    await coordinatorFor(this.env, row.queue_id).destroy();
    this.ctx.storage.transactionSync(() => {
      // Read again: a concurrent delete of the same queue may have counted it already.
      const gone = this.sql
        .exec<{ state: string }>("DELETE FROM queues WHERE queue_id = ? RETURNING state", row.queue_id)
        .toArray();
      if (gone[0]?.state === "active") this.sql.exec("UPDATE totals SET active = active - 1");
    });
    return true;
  }

  private byName(name: string): CatalogRow | null {
    return (
      (this.sql
        .exec("SELECT queue_name, queue_id, state FROM queues WHERE queue_name = ?", name)
        .toArray()[0] as unknown as CatalogRow | undefined) ?? null
    );
  }

  private byId(id: string): CatalogRow | null {
    return (
      (this.sql
        .exec("SELECT queue_name, queue_id, state FROM queues WHERE queue_id = ?", id)
        .toArray()[0] as unknown as CatalogRow | undefined) ?? null
    );
  }
}

/** The first name after every name that starts with `prefix` (names sort bytewise). */
function prefixEnd(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}
