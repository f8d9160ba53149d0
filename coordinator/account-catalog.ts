import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/kernel/env";
import { newQueueId, QUEUE_ID_PATTERN } from "../src/kernel/ids";
import type { QueueInfo } from "../src/kernel/queue-info";
import type { QueueSettings } from "../src/kernel/settings";
import { coordinatorFor } from "../src/kernel/addressing";
import { meteredSql, newMeter, readMeter, type MeterReading } from "../src/kernel/sql-meter";
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
];

interface CatalogRow {
  queue_name: string;
  queue_id: string;
  state: "creating" | "active";
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

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = meteredSql(ctx.storage.sql, this.cost);
    runMigrations(this.sql, MIGRATIONS);
  }

  /** What this object was billed for since it started: the benchmark's read, not counted as an RPC. */
  costFigures(): MeterReading {
    return readMeter(this.cost, this.since);
  }

  /**
   * The row is written before the Coordinator is initialised, so a concurrent create
   * of the same name sees it; a create that failed half-way is finished by the next.
   */
  async createQueue(accountId: string, queueName: string, settings: QueueSettings): Promise<CreateQueueResult> {
    this.cost.rpcs++;
    let row = this.byName(queueName);
    // Active, or being created by a request still in flight here: the name is taken.
    if (row?.state === "active" || this.inFlight.has(queueName)) return { queue: null };
    if (!row) {
      row = { queue_name: queueName, queue_id: newQueueId(), state: "creating" };
      this.sql.exec("INSERT INTO queues (queue_name, queue_id, state, created_at) VALUES (?, ?, 'creating', ?)", queueName, row.queue_id, Date.now());
    }
    this.inFlight.add(queueName);
    try {
      const queue = await coordinatorFor(this.env, row.queue_id).initialize({ accountId, queueId: row.queue_id, queueName, settings });
      this.sql.exec("UPDATE queues SET state = 'active' WHERE queue_id = ?", row.queue_id);
      return { queue };
    } finally {
      this.inFlight.delete(queueName);
    }
  }

  /** A queue's id from its name or id; null when this account has no such queue. */
  resolve(ref: string): string | null {
    this.cost.rpcs++;
    const row = QUEUE_ID_PATTERN.test(ref) ? this.byId(ref) : this.byName(ref);
    return row?.state === "active" ? row.queue_id : null;
  }

  /** A page of the account's queues, by name; `name`: only the queue of exactly that name (none when no queue has it). */
  async listQueues(page: number, perPage: number, name?: string): Promise<{ queues: QueueInfo[]; total: number }> {
    this.cost.rpcs++;
    const [where, args] = name === undefined ? ["state = 'active'", []] : ["state = 'active' AND queue_name = ?", [name]];
    const total = this.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM queues WHERE ${where}`, ...args).one().n;
    const rows = this.sql
      .exec(`SELECT queue_id FROM queues WHERE ${where} ORDER BY queue_name LIMIT ? OFFSET ?`, ...args, perPage, (page - 1) * perPage)
      .toArray() as unknown as Array<{ queue_id: string }>;
    const infos = await Promise.all(rows.map((r) => coordinatorFor(this.env, r.queue_id).info()));
    const queues: QueueInfo[] = [];
    for (const q of infos) if (q) queues.push(q);
    return { queues, total };
  }

  /** Every queue of the account, by name, without asking their Coordinators (GET /metrics walks them). */
  queueIds(): Array<{ queue_name: string; queue_id: string }> {
    this.cost.rpcs++;
    return this.sql.exec("SELECT queue_name, queue_id FROM queues WHERE state = 'active' ORDER BY queue_name").toArray() as unknown as Array<{
      queue_name: string;
      queue_id: string;
    }>;
  }

  /** Deletes the queue's data first and its name last, so a retried delete finishes the job. */
  async deleteQueue(ref: string): Promise<boolean> {
    this.cost.rpcs++;
    const row = QUEUE_ID_PATTERN.test(ref) ? this.byId(ref) : this.byName(ref);
    if (!row) return false;
    await coordinatorFor(this.env, row.queue_id).destroy();
    this.sql.exec("DELETE FROM queues WHERE queue_id = ?", row.queue_id);
    return true;
  }

  private byName(name: string): CatalogRow | null {
    return (this.sql.exec("SELECT queue_name, queue_id, state FROM queues WHERE queue_name = ?", name).toArray()[0] as unknown as CatalogRow | undefined) ?? null;
  }

  private byId(id: string): CatalogRow | null {
    return (this.sql.exec("SELECT queue_name, queue_id, state FROM queues WHERE queue_id = ?", id).toArray()[0] as unknown as CatalogRow | undefined) ?? null;
  }
}

