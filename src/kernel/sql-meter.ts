/**
 * Counts what a Durable Object's SQLite work costs, the way Cloudflare bills it:
 * rows written (index entries included: each statement's cursor.rowsWritten, known as
 * soon as exec() returns) and rows read. The benchmark divides these counts by messages.
 */
export interface CostMeter {
  /** RPC calls served. */
  rpcs: number;
  rowsWritten: number;
  rowsRead: number;
  /** Alarm invocations (each one a billed request). */
  alarms: number;
}

/** The same SqlStorage, with every exec() adding its rows written and read to `meter`. */
export function meteredSql(sql: SqlStorage, meter: CostMeter): SqlStorage {
  return new Proxy(sql, {
    get(target, prop) {
      if (prop === "exec") {
        return (query: string, ...bindings: SqlStorageValue[]) => {
          return counted(target.exec(query, ...bindings), meter);
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * A cursor's rowsRead (and a RETURNING statement's rowsWritten) grow as its rows are
 * taken, after exec() has returned. The last few cursors are kept and their growth added
 * at every exec() and whenever the meter is read (settleReads), so a figure lags by at
 * most the statements still being iterated.
 */
const OPEN_CURSORS = 16;
interface OpenCursor {
  cursor: SqlStorageCursor<Record<string, SqlStorageValue>>;
  read: number;
  written: number;
}
const open = new WeakMap<CostMeter, OpenCursor[]>();

function counted<T extends Record<string, SqlStorageValue>>(cursor: SqlStorageCursor<T>, meter: CostMeter): SqlStorageCursor<T> {
  settleReads(meter);
  const list = open.get(meter) ?? [];
  open.set(meter, list);
  const c: OpenCursor = { cursor: cursor as unknown as OpenCursor["cursor"], read: 0, written: 0 };
  list.push(c);
  add(meter, c);
  if (list.length > OPEN_CURSORS) list.shift();
  return cursor;
}

function add(meter: CostMeter, c: OpenCursor): void {
  meter.rowsRead += c.cursor.rowsRead - c.read;
  meter.rowsWritten += c.cursor.rowsWritten - c.written;
  c.read = c.cursor.rowsRead;
  c.written = c.cursor.rowsWritten;
}

/** Adds the rows the recent cursors read since last counted: call before reading `meter`. */
export function settleReads(meter: CostMeter): void {
  for (const c of open.get(meter) ?? []) add(meter, c);
}
