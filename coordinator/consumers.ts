/** The consumer of a queue, kept in its Coordinator's SQLite (one consumer per queue, as on Cloudflare). */
import type { ConsumerRecord, ConsumerSettings, ConsumerType } from "../src/kernel/consumer-settings";

interface ConsumerRow {
  consumer_id: string;
  type: ConsumerType;
  script_name: string | null;
  settings: string;
  dead_letter_queue: string | null;
  created_at: number;
  modified_at: number;
}

export interface NewConsumer {
  type: ConsumerType;
  script_name: string | null;
  settings: ConsumerSettings;
  dead_letter_queue: string | null;
}

export function readConsumers(sql: SqlStorage, queueName: string): ConsumerRecord[] {
  const rows = sql.exec("SELECT * FROM consumers ORDER BY created_at").toArray() as unknown as ConsumerRow[];
  return rows.map((r) => ({
    consumer_id: r.consumer_id,
    type: r.type,
    script_name: r.script_name,
    queue_name: queueName,
    settings: JSON.parse(r.settings) as ConsumerSettings,
    dead_letter_queue: r.dead_letter_queue,
    created_on: new Date(r.created_at).toISOString(),
    modified_on: new Date(r.modified_at).toISOString(),
  }));
}

export function insertConsumer(sql: SqlStorage, id: string, c: NewConsumer, now: number): void {
  sql.exec(
    "INSERT INTO consumers (consumer_id, type, script_name, settings, dead_letter_queue, created_at, modified_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
    id,
    c.type,
    c.script_name,
    JSON.stringify(c.settings),
    c.dead_letter_queue,
    now,
    now,
  );
}

export function updateConsumer(
  sql: SqlStorage,
  id: string,
  settings: ConsumerSettings,
  deadLetterQueue: string | null,
  now: number,
): boolean {
  return (
    sql
      .exec(
        "UPDATE consumers SET settings = ?, dead_letter_queue = ?, modified_at = ? WHERE consumer_id = ? RETURNING consumer_id",
        JSON.stringify(settings),
        deadLetterQueue,
        now,
        id,
      )
      .toArray().length > 0
  );
}

export function deleteConsumer(sql: SqlStorage, id: string): boolean {
  return sql.exec("DELETE FROM consumers WHERE consumer_id = ? RETURNING consumer_id", id).toArray().length > 0;
}
