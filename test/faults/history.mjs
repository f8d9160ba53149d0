// The history of a fault run, Jepsen style: every operation a client performs is
// logged when it is invoked and again when it completes, as one JSON object per line.
// A completion is "ok" (the service answered yes), "fail" (it certainly did not happen:
// a 4xx answer, or a connection refused before the request left) or "unknown" (it may
// or may not have happened: a reset connection, a timeout, a 5xx while the service was
// being killed). The checker reads nothing but this file, so a history can be checked
// again later: `node test/faults/run.mjs --check <history.jsonl>`.
import { createReadStream, createWriteStream } from "node:fs";
import { once } from "node:events";
import { createInterface } from "node:readline";

/**
 * @typedef {"invoke" | "ok" | "fail" | "unknown"} OpType
 * @typedef {object} Op
 * @property {number} op    the operation's number: its invoke and its completion share it
 * @property {string} p     the process: "producer-0", "consumer-1", "dlq-consumer-0", "nemesis", "harness"
 * @property {OpType} type
 * @property {string} f     "send" | "pull" | "ack" | "kill" | "start" | "phase"
 * @property {number} t     ms since the run began, on a monotonic clock
 * @property {any} [value]
 */

export class History {
  /** @param {string} file */
  constructor(file) {
    this.file = file;
    this.out = createWriteStream(file, { flags: "w" });
    this.t0 = performance.now();
    this.next = 0;
    this.count = 0;
    /** @type {Map<number, { p: string, f: string }>} */
    this.open = new Map();
  }

  /** @param {string} f @returns {number} how many operations of kind `f` are in flight now */
  inFlight(f) {
    let n = 0;
    for (const o of this.open.values()) if (o.f === f) n++;
    return n;
  }

  /** ms since the run began, to a tenth of a ms. */
  now() {
    return Math.round((performance.now() - this.t0) * 10) / 10;
  }

  /**
   * Logs the start of an operation; returns its number for `complete`.
   * @param {string} p @param {string} f @param {any} [value]
   */
  invoke(p, f, value) {
    const op = this.next++;
    this.open.set(op, { p, f });
    this.write({ op, p, type: "invoke", f, t: this.now(), ...(value === undefined ? {} : { value }) });
    return op;
  }

  /**
   * Logs how an operation ended.
   * @param {number} op @param {Exclude<OpType, "invoke">} type @param {any} [value]
   */
  complete(op, type, value) {
    const o = this.open.get(op);
    if (!o) throw new Error(`operation ${op} is not open`);
    this.open.delete(op);
    this.write({ op, p: o.p, type, f: o.f, t: this.now(), ...(value === undefined ? {} : { value }) });
  }

  /**
   * A marker with no completion (the phases of the run).
   * @param {string} p @param {string} f @param {any} [value]
   */
  note(p, f, value) {
    this.write({ op: this.next++, p, type: "ok", f, t: this.now(), ...(value === undefined ? {} : { value }) });
  }

  /** @param {Op} op */
  write(op) {
    // A client the run's end stopped waiting for (watchdog.mjs) may still complete: dropped, not an error after end.
    if (this.out.writableEnded) return;
    this.count++;
    this.out.write(`${JSON.stringify(op)}\n`);
  }

  /** Flushes and closes the file. Operations still open stay without a completion (the checker treats them as unknown). */
  async close() {
    if (this.out.closed) return;
    this.out.end();
    await once(this.out, "close");
  }
}

/**
 * Reads a history file back.
 * @param {string} file
 * @returns {Promise<Op[]>}
 */
export async function readHistory(file) {
  /** @type {Op[]} */
  const ops = [];
  const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n++;
    if (!line.trim()) continue;
    try {
      ops.push(JSON.parse(line));
    } catch {
      throw new Error(`${file}:${n}: not a JSON line`);
    }
  }
  return ops;
}

/**
 * Each call of operation `f` paired with its answer, in answer order; then each call never
 * answered (a run cut off), with `done` null. The checkers read calls this way.
 * @param {Op[]} ops @param {string} f
 * @returns {Generator<{ inv: Op, done: Op | null }>}
 */
export function* callsOf(ops, f) {
  const invokes = /** @type {Map<number, Op>} */ (new Map());
  for (const o of ops) {
    if (o.f !== f) continue;
    if (o.type === "invoke") {
      invokes.set(o.op, o);
      continue;
    }
    const inv = invokes.get(o.op);
    invokes.delete(o.op);
    if (inv) yield { inv, done: o };
  }
  for (const inv of invokes.values()) yield { inv, done: null };
}
