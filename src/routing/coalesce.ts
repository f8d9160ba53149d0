/**
 * Coalescing of concurrent single sends (Quicksilver batches writes in short windows).
 * Under load, single `send()`s and `POST .../messages` that arrive while a queue's
 * writes are in flight join one open batch, stored with one storage-shard RPC and one
 * SQLite transaction; when the queue is idle a send goes out at once, alone, so it
 * waits for nothing. In a steady stream where waiting gathers company (LingerPolicy) a
 * new batch lingers LINGER_MS: sends paced evenly never overlap a write, and one write
 * each (an RPC and an fsync'd commit) costs more CPU and rows than a paced stream
 * leaves room for (bench/README.md, "Why the coalescer's constants").
 *
 * Each batch has a leader: the request that opened it. Only the leader performs the
 * write, in its own request context, and it stays alive until the write is done
 * because it awaits its own message's result. No request performs I/O on behalf of
 * another. Waiters do not await a promise the leader settles: workerd took
 * such requests (no I/O of their own pending) for hung and cancelled them. They poll
 * the batch on a 2 ms timer instead, which also bounds the wait.
 *
 * A batch is stored whole or not at all, like any batch: if its write fails, every
 * sender in it gets the error and none of its messages was stored.
 */
import type { Env } from "../kernel/env";
import { unavailable } from "../kernel/errors";
import { LIMITS } from "../kernel/limits";
import { sleep } from "../kernel/sleep";
import { LingerPolicy } from "./linger-policy";
import type { PendingMessage } from "./pending-messages";
import { storeMessages, type SendTarget, type Stored } from "./store";

/**
 * Writes of one queue in flight at once from one isolate before sends wait and batch.
 * Few enough that concurrent sends find a write under way and join the next batch; with
 * many, writes finish before they queue and almost every send goes alone (bench/README.md,
 * "Why the coalescer's constants").
 */
const MAX_IN_FLIGHT = 2;
/** A waiter's timer tick, and the longest it waits on another request's write. */
const TICK_MS = 2;
const MAX_WAIT_MS = 60_000;
/** A write not finished by then is presumed dead (its request cancelled) and frees its slot. */
const WRITE_TIMEOUT_MS = 30_000;

interface Batch {
  messages: PendingMessage[];
  bytes: number;
  /** No more joiners: full, or being written. */
  closed: boolean;
  /** Set by the leader when the write is done: the ids in order and the shard's backlog, or the error. */
  stored?: Stored;
  error?: unknown;
}

interface Lane {
  open: Batch | null;
  /**
   * Leaders waiting for a slot, first come first served: a send arriving when a slot
   * frees must not overtake a batch that has been waiting (it would starve, and
   * nothing would coalesce). Each entry is when its leader began to wait.
   */
  waiting: Array<{ since: number }>;
  /**
   * Writes under way and when each began. A write whose request was cancelled never
   * removes itself, so one older than WRITE_TIMEOUT_MS no longer holds a slot.
   */
  writes: Map<symbol, number>;
}

/**
 * How long a batch opened in a steady stream waits for joiners: evenly paced sends never
 * overlap a write, so without a short wait each is a write of its own; a turn of the event
 * loop is too short to gather them (bench/README.md, "Why the coalescer's constants").
 * Whether it waits is LingerPolicy's call.
 */
const LINGER_MS = 1;

const lanes = new Map<string, Lane>();

/** Counters for the tests: how many single sends went out in how many writes, and batches that lingered. */
export const coalesceStats = { sends: 0, writes: 0, lingers: 0 };

/** Stores one message, alone or with concurrent ones: its id, and the batch it was stored with. */
export async function sendCoalesced(
  env: Env,
  target: SendTarget,
  message: PendingMessage,
): Promise<{ id: string; stored: Stored }> {
  coalesceStats.sends++;
  const key = `${target.accountId}/${target.queueRef}/${target.region ?? ""}`;
  let lane = lanes.get(key);
  if (!lane) lanes.set(key, (lane = { open: null, waiting: [], writes: new Map() }));

  const policy = policyOf(key);
  policy.noteArrival(lane.open !== null || lane.writes.size > 0);
  const size = message.body.byteLength;
  const joinable =
    lane.open &&
    !lane.open.closed &&
    lane.open.messages.length < LIMITS.maxBatchMessages &&
    lane.open.bytes + size <= LIMITS.maxBatchBytes;
  if (joinable) {
    const batch = lane.open!;
    batch.messages.push(message);
    batch.bytes += size;
    if (batch.messages.length >= LIMITS.maxBatchMessages) batch.closed = true;
    const index = batch.messages.length - 1;
    await waitFor(() => batch.stored !== undefined || batch.error !== undefined);
    if (batch.error !== undefined) throw batch.error;
    return { id: batch.stored!.ids[index]!, stored: batch.stored! };
  }

  // Lead a new batch: its own message first, then whoever joins while it waits for a slot.
  const batch: Batch = { messages: [message], bytes: size, closed: false };
  lane.open = batch;
  if (policy.noteLead(Date.now()) && inFlight(lane) < MAX_IN_FLIGHT && lane.waiting.length === 0) {
    coalesceStats.lingers++;
    await sleep(LINGER_MS);
    policy.noteWaited(batch.messages.length);
  }
  if (inFlight(lane) >= MAX_IN_FLIGHT || lane.waiting.length > 0) {
    const ticket = { since: Date.now() };
    lane.waiting.push(ticket);
    try {
      await waitFor(() => firstInLine(lane!) === ticket && inFlight(lane!) < MAX_IN_FLIGHT);
    } finally {
      lane.waiting.splice(lane.waiting.indexOf(ticket), 1);
    }
  }
  batch.closed = true;
  if (lane.open === batch) lane.open = null;
  const write = Symbol();
  lane.writes.set(write, Date.now());
  coalesceStats.writes++;
  try {
    batch.stored = await storeMessages(env, target, batch.messages);
    return { id: batch.stored.ids[0]!, stored: batch.stored };
  } catch (err) {
    batch.error = err;
    throw err;
  } finally {
    lane.writes.delete(write);
    if (lane.writes.size === 0 && !lane.open && lane.waiting.length === 0) lanes.delete(key);
  }
}

/** Per queue: whether its batches wait for company. */
const policies = new Map<string, LingerPolicy>();

function policyOf(key: string): LingerPolicy {
  let p = policies.get(key);
  if (!p) {
    policies.set(key, (p = new LingerPolicy()));
    // One entry per queue this isolate sent to; forget the quiet ones now and then.
    if (policies.size > 1000) for (const [k, v] of policies) if (Date.now() - v.lastLeadAt > 1000) policies.delete(k);
  }
  return p;
}

/** The longest-waiting leader still alive (one whose request was cancelled stops counting after MAX_WAIT_MS). */
function firstInLine(lane: Lane): { since: number } | undefined {
  const now = Date.now();
  while (lane.waiting.length > 0 && now - lane.waiting[0]!.since > MAX_WAIT_MS) lane.waiting.shift();
  return lane.waiting[0];
}

function inFlight(lane: Lane): number {
  const now = Date.now();
  let n = 0;
  for (const [write, began] of lane.writes) {
    if (now - began < WRITE_TIMEOUT_MS) n++;
    else lane.writes.delete(write);
  }
  return n;
}

/** Polls shared state on a short timer: the waiting request always has a timer of its own pending. */
async function waitFor(ready: () => boolean): Promise<void> {
  const deadline = Date.now() + MAX_WAIT_MS;
  while (!ready()) {
    if (Date.now() > deadline) throw unavailable("the write this send joined did not finish in time; retry", null);
    await sleep(TICK_MS);
  }
}
