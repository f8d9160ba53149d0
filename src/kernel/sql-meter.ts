/**
 * Counts what a Durable Object's SQLite work costs, the way Cloudflare bills it:
 * rows written (index entries included: each statement's cursor.rowsWritten, known as
 * soon as exec() returns). The benchmark divides these counts by messages.
 */
export interface CostMeter {
  /** RPC calls served. */
  rpcs: number;
  rowsWritten: number;
}

/** The same SqlStorage, with every exec() adding its rows written to `meter`. */
export function meteredSql(sql: SqlStorage, meter: CostMeter): SqlStorage {
  return new Proxy(sql, {
    get(target, prop) {
      if (prop === "exec") {
        return (query: string, ...bindings: SqlStorageValue[]) => {
          const cursor = target.exec(query, ...bindings);
          meter.rowsWritten += cursor.rowsWritten;
          return cursor;
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
