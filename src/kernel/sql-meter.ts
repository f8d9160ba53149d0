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

function counted<T extends Record<string, SqlStorageValue>>(
  cursor: SqlStorageCursor<T>,
  meter: CostMeter,
): SqlStorageCursor<T> {
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

/** A meter's figures as a benchmark reads them: settled, with when the object started counting. */
export interface MeterReading extends CostMeter {
  /** When this object started (ms since the epoch): a later `since` than before means it restarted and counted afresh. */
  since: number;
}

/**
 * Requests (RPCs and alarms) every meter made by newMeter() in this isolate has counted.
 * Locally every Durable Object of the service runs in workerd's one isolate for the
 * script, so this is the whole stack's count, read by `npm run bench -- many` through
 * the test hooks' route without waking an object to ask it. On Cloudflare each object has
 * its own isolate (or shares one with a few others) and the total means nothing.
 */
let isolateRequests = 0;

/** What every meter of this isolate counted as requests (RPCs and alarms) since the isolate started. */
export function requestsCounted(): number {
  return isolateRequests;
}

/** A new meter, all zeros, whose RPCs and alarms also add to this isolate's count (requestsCounted). */
export function newMeter(): CostMeter {
  let rpcs = 0;
  let alarms = 0;
  // Accessors, so that every RPC meteredRpcs counts (rpc-meter.ts) and every alarm an object
  // counts is counted here as well, with no second counter to keep in step. Spread or
  // serialised, a meter is plain figures.
  return {
    get rpcs() {
      return rpcs;
    },
    set rpcs(n: number) {
      if (n > rpcs) isolateRequests += n - rpcs;
      rpcs = n;
    },
    get alarms() {
      return alarms;
    },
    set alarms(n: number) {
      if (n > alarms) isolateRequests += n - alarms;
      alarms = n;
    },
    rowsWritten: 0,
    rowsRead: 0,
  };
}

/** The figures of `meter` now, reads settled. */
export function readMeter(meter: CostMeter, since: number): MeterReading {
  settleReads(meter);
  return { ...meter, since };
}

/**
 * The same DurableObjectStorage, with its SQL metered (meteredSql) and its key-value and
 * alarm calls counted as Cloudflare bills them on a SQLite-backed object: get() a row read
 * per key asked (found or not, so an upper bound), put() and delete() a row written per key,
 * setAlarm() and deleteAlarm() one row written each (deleteAlarm's an upper bound). getAlarm()
 * is not billed as a row; transactionSync() and the rest pass through.
 */
export function meteredStorage(storage: DurableObjectStorage, meter: CostMeter): DurableObjectStorage {
  const sql = meteredSql(storage.sql, meter);
  const keys = (k: unknown) => (Array.isArray(k) ? k.length : 1);
  return new Proxy(storage, {
    get(target, prop) {
      switch (prop) {
        case "sql":
          return sql;
        case "get":
          return (k: string | string[], ...rest: unknown[]) => {
            meter.rowsRead += keys(k);
            return (target.get as (...a: unknown[]) => unknown).call(target, k, ...rest);
          };
        case "put":
          return (k: string | Record<string, unknown>, ...rest: unknown[]) => {
            meter.rowsWritten += typeof k === "string" ? 1 : Object.keys(k).length;
            return (target.put as (...a: unknown[]) => unknown).call(target, k, ...rest);
          };
        case "delete":
          return (k: string | string[], ...rest: unknown[]) => {
            meter.rowsWritten += keys(k);
            return (target.delete as (...a: unknown[]) => unknown).call(target, k, ...rest);
          };
        case "setAlarm":
        case "deleteAlarm":
          return (...a: unknown[]) => {
            meter.rowsWritten++;
            return (target[prop] as (...a: unknown[]) => unknown).call(target, ...a);
          };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
