// A queue's bill over a window of its life, as `npm run bench -- idle` and `traffic`
// (traffic.mjs) take it: its objects' counters (GET /cost) read over the window, the readings'
// own cost taken off, and the counts priced a month at list prices beside what Cloudflare
// Queues would bill for the messages delivered in it.
import { CLASSES, costDelta, readCost } from "./cost.mjs";
import { PRICES, queuesUsd, usd } from "./prices.mjs";
import { sleep } from "../src/kernel/sleep.ts";

/** An average month (365 x 24 / 12 hours): a queue-month, as idle queues are priced. */
export const HOURS_PER_MONTH = 730;
/** The driver's bodies ({ i, sent_at }), for Cloudflare Queues' 64 KB operations: one each. */
const BODY_BYTES = 40;

/**
 * @typedef {ReturnType<typeof costDelta>} Delta
 * @typedef {{ requests: number, alarms: number, rowsWritten: number, rowsRead: number, delivered: number }} PerHour
 * @typedef {{ seconds: number, delta: Delta, perHour: PerHour, usd: number, cq_usd: number, restarted: number, shards: { storage: number, consumer: number } }} Priced
 */

/**
 * A reading's own cost taken off a window's: GET /cost wakes every object it reads, and a
 * storage shard's stats() reads rows and counts itself. `reading` is what two readings back to
 * back saw, one reading's worth; each window spans one reading's worth too (the rest of the
 * reading that opened it, the part of the one that closed it before its figures were taken).
 * Per class, floored at 0: an object restarted in the window counts from its restart and may
 * show less than a whole reading.
 * @param {Delta} window @param {Delta} reading @returns {Delta}
 */
export function withoutReading(window, reading) {
  /** @type {any} */
  const out = {};
  for (const c of CLASSES) {
    const w = window[c];
    const r = reading[c];
    const rpcs = Math.max(0, w.rpcs - r.rpcs);
    const alarms = Math.max(0, w.alarms - r.alarms);
    out[c] = {
      ...w,
      rpcs,
      alarms,
      rowsWritten: Math.max(0, w.rowsWritten - r.rowsWritten),
      rowsRead: Math.max(0, w.rowsRead - r.rowsRead),
      active: rpcs + alarms > 0 ? w.active : 0,
    };
  }
  return out;
}

/**
 * A window's counts per hour and per month at list prices: Durable Object requests (RPCs and
 * alarms), rows written and rows read, beside Cloudflare Queues' price for the messages
 * delivered in it. Duration and Workers CPU are left out, as in the idle figures.
 * @param {Delta} delta @param {number} seconds @param {number} delivered
 */
export function priceWindow(delta, seconds, delivered) {
  const sum = (/** @type {"rpcs" | "alarms" | "rowsWritten" | "rowsRead" | "restarted"} */ k) =>
    CLASSES.reduce((n, c) => n + delta[c][k], 0);
  const h = 3600 / seconds;
  /** @type {PerHour} */
  const perHour = {
    requests: (sum("rpcs") + sum("alarms")) * h,
    alarms: sum("alarms") * h,
    rowsWritten: sum("rowsWritten") * h,
    rowsRead: sum("rowsRead") * h,
    delivered: delivered * h,
  };
  return {
    perHour,
    usd: monthlyUsd(perHour),
    cq_usd:
      delivered > 0 ? queuesUsd({ delivered: perHour.delivered * HOURS_PER_MONTH, bytesPerMessage: BODY_BYTES }) : 0,
    restarted: sum("restarted"),
  };
}

/** Dollars a queue-month for these hourly counts. @param {Omit<PerHour, "alarms" | "delivered">} perHour */
export function monthlyUsd(perHour) {
  const m = HOURS_PER_MONTH;
  return (
    usd(PRICES.doRequests, perHour.requests * m) +
    usd(PRICES.rowsWritten, perHour.rowsWritten * m) +
    usd(PRICES.rowsRead, perHour.rowsRead * m)
  );
}

/**
 * The queue's objects' work over `seconds`, the readings' own cost taken off (withoutReading);
 * `mark` is read just before the window's first reading and just after its last, and the
 * difference answered as `marked` (the sink's deliveries). With `everyS`, the counters are
 * read every `everyS` s and the intervals added up: an object idle for about 10 s is evicted
 * and its counters start again, which a window of one interval loses (a lower bound); read
 * more often than that, none is evicted in between. Eviction changes no request or row.
 * @param {import("./stacks.mjs").Stack} stack @param {number} seconds @param {() => Promise<number>} mark @param {number} [everyS]
 */
export async function costWindow(stack, seconds, mark, everyS = seconds) {
  const queueId = /** @type {string} */ (stack.queueId);
  const m0 = await mark();
  const first = await readCost(stack.base, queueId);
  let before = await readCost(stack.base, queueId);
  const reading = costDelta(first, before);
  const started = performance.now();
  /** @type {Delta | null} */
  let delta = null;
  let after = before;
  for (let left = seconds; left > 0; left -= everyS) {
    await sleep(Math.min(everyS, left) * 1000);
    after = await readCost(stack.base, queueId);
    const part = withoutReading(costDelta(before, after), reading);
    delta = delta === null ? part : addDeltas(delta, part);
    before = after;
  }
  const elapsed = (performance.now() - started) / 1000;
  const m1 = await mark();
  return {
    seconds: elapsed,
    delta: /** @type {Delta} */ (delta ?? withoutReading(costDelta(before, before), reading)),
    marked: m1 - m0,
    shards: { storage: Object.keys(after.storage).length, consumer: Object.keys(after.consumer).length },
  };
}

/** Two intervals' work as one: counts added; objects and active ones, the larger. @param {Delta} a @param {Delta} b @returns {Delta} */
function addDeltas(a, b) {
  /** @type {any} */
  const out = {};
  for (const c of CLASSES) {
    const [x, y] = [a[c], b[c]];
    out[c] = {
      rpcs: x.rpcs + y.rpcs,
      alarms: x.alarms + y.alarms,
      rowsWritten: x.rowsWritten + y.rowsWritten,
      rowsRead: x.rowsRead + y.rowsRead,
      objects: Math.max(x.objects, y.objects),
      active: Math.max(x.active, y.active),
      restarted: x.restarted + y.restarted,
    };
  }
  return out;
}
