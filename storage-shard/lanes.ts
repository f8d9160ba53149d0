/**
 * Ordered lanes (docs/ordered-lanes.md): the messages of one ordering key on this shard,
 * kept apart from the segments, one row each, numbered by a shard-wide sequence (lseq)
 * so that a key's order is its lseq order for ever: a retry leaves a message where it is.
 * A lane is leased whole or not at all: its head and the due messages right behind it,
 * under one lease written to the lane's row, so a restart honours it to its end instead of
 * handing the key to a second consumer while the first may still hold it. Every function
 * runs inside the caller's transactionSync; those that remove messages return the
 * backlog delta for the shard's in-memory figures. Settling a lane's messages is
 * lane-settlement.ts.
 */
import { crc32 } from "../src/kernel/checksum";
import { locate, locatedId, randomHex } from "../src/kernel/ids";
import type { ContentType, LeasedMessage } from "../src/kernel/protocol";
import type { NewMessage } from "./segment-rows";

/** What a change did to the backlog (delivery.ts's BacklogDelta; not imported, as delivery.ts imports this). */
export interface BacklogDelta {
  count: number;
  bytes: number;
}

/**
 * The end of a lane's lease in its key's index, for a join of lanes (l) with their messages:
 * a lease taken before schema version 16 named none, and reads the whole lane.
 */
export const UPTO = "COALESCE(l.upto, 9007199254740991)";

export const isLaneLease = (leaseId: string): boolean => leaseId.startsWith("L");

/** The copy a lane message is, for ever: its lseq, which no retry changes. */
export const copyOfLane = (lseq: number): string => `L${lseq}`;

export interface Row extends Record<string, SqlStorageValue> {
  lseq: number;
  key: string;
  id: string;
  content_type: string;
  checksum: number;
  enqueued_at: number;
  due_at: number;
  attempts: number;
  sent_at: number;
  leased: number;
  /** The epoch this shard was in when it accepted the message (handoff.ts). */
  gen: number;
  body: ArrayBuffer;
}

export interface Lane extends Record<string, SqlStorageValue> {
  key: string;
  ready_at: number | null;
  lease: string | null;
  lease_until: number | null;
  last_lease: string | null;
}

/**
 * The slot a located id (src/kernel/ids.ts) names for a lane message, whose segment part is
 * its lseq: segments' slots stay below SEGMENT_MAX_MESSAGES.
 */
export const LANE_SLOT = 0xffff;

/** Rows per INSERT of writeLanes: 12 columns each, under workerd's 100 bound parameters. */
const ROWS_PER_INSERT = 8;
const INSERT_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/**
 * Appends keyed messages to their lanes, in order, tagged with the epoch the shard is in
 * (`gen`, which a hand-off names: handoff.ts); answers each one's id. The shard numbers
 * them itself, from the table's sequence, so that an id it draws can name its lseq (a
 * located id, found without an index); ids given go in lane_ids.
 */
export function writeLanes(sql: SqlStorage, now: number, shardNo: number, messages: ReadonlyArray<NewMessage & { key: string }>, batch: string | null, gen: number): string[] {
  inUse.set(sql, true);
  const first = sql.exec<{ seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'lane_messages'").one().seq + 1;
  const ids = messages.map((m, i) => m.id ?? locatedId(first + i, shardNo, LANE_SLOT, randomHex(4)));
  // Bodies bound as they are: a few statements of many rows cost less than one that parses them from JSON.
  for (let at = 0; at < messages.length; at += ROWS_PER_INSERT) {
    const part = messages.slice(at, at + ROWS_PER_INSERT);
    const args: SqlStorageValue[] = [];
    part.forEach((m, k) => args.push(first + at + k, m.key, ids[at + k]!, m.contentType, m.checksum, m.enqueuedAt, m.dueAt, m.attempts, m.sentAt, batch, gen, m.body as unknown as ArrayBuffer));
    sql.exec(
      `INSERT INTO lane_messages (lseq, key, id, content_type, checksum, enqueued_at, due_at, attempts, sent_at, batch, gen, body) VALUES ${Array(part.length).fill(INSERT_ROW).join(", ")}`,
      ...args,
    );
  }
  const given = messages.flatMap((m, i) => (m.id === undefined ? [] : [[m.id, first + i]]));
  if (given.length > 0) sql.exec("INSERT OR IGNORE INTO lane_ids (id, lseq) SELECT value ->> '$[0]', value ->> '$[1]' FROM json_each(?)", JSON.stringify(given));
  const heads = new Map<string, [readyAt: number, id: string]>();
  messages.forEach((m, i) => {
    if (!heads.has(m.key)) heads.set(m.key, [m.dueAt || m.enqueuedAt, ids[i]!]);
  });
  // A new lane whose head is delayed is held from now, by that head: a producer's delay can
  // hold a key for a day, and operators must see it (GET .../ordering/held) and may release it.
  const created = sql
    .exec<{ key: string }>(
      `INSERT INTO lanes (key, ready_at, reason, blocker, held_since)
       SELECT value ->> '$[0]', value ->> '$[1]', CASE WHEN value ->> '$[1]' > ? THEN 'delayed' END, CASE WHEN value ->> '$[1]' > ? THEN value ->> '$[2]' END, CASE WHEN value ->> '$[1]' > ? THEN ? END
       FROM json_each(?) WHERE true ON CONFLICT(key) DO NOTHING RETURNING key`,
      now, now, now, now, JSON.stringify([...heads].map(([key, [at, id]]) => [key, at, id])),
    )
    .toArray();
  // A new lane is ready when its head is due, unless another shard still holds older messages of its key.
  for (const key of bridgedKeys(sql, created.map((c) => c.key)).keys()) reopen(sql, now, key, null);
  return ids;
}

/**
 * The lseq of the lane message with this id here (the oldest, should a redrive have
 * brought the id back while it is still here), or null: a located id names its own.
 */
export function laneOfId(sql: SqlStorage, id: string): number | null {
  const at = locate(id);
  if (at?.slot === LANE_SLOT && sql.exec<{ id: string }>("SELECT id FROM lane_messages WHERE lseq = ?", at.seg).toArray()[0]?.id === id) return at.seg;
  return sql.exec<{ lseq: number }>("SELECT lseq FROM lane_ids WHERE id = ? ORDER BY lseq LIMIT 1", id).toArray()[0]?.lseq ?? null;
}

/**
 * Per shard (its SqlStorage), whether it has ever held a lane, or owes a hand-off: a
 * queue without ordering keys then pays none of the lanes' queries on its lease, settle
 * and append path. Learnt once from the tables, and set by the first keyed append.
 */
const inUse = new WeakMap<SqlStorage, boolean>();

export function lanesInUse(sql: SqlStorage): boolean {
  let used = inUse.get(sql);
  if (used === undefined) {
    used = sql.exec("SELECT 1 FROM lanes UNION ALL SELECT 1 FROM releases UNION ALL SELECT 1 FROM registrations LIMIT 1").toArray().length > 0;
    inUse.set(sql, used);
  }
  return used;
}

/**
 * The first epoch of `key` held back here: messages of the key this shard accepted in that
 * epoch or later wait until every shard that told it, on entering an epoch, that it holds
 * older messages of the key has released it (handoff.ts). Null when nothing holds the key.
 */
export function blockedFrom(sql: SqlStorage, key: string): number | null {
  if (!bridgedAny(sql)) return null;
  return sql.exec<{ g: number | null }>("SELECT MIN(gen) AS g FROM bridges WHERE key = ? AND released = 0", key).one().g;
}

/** Of `keys`, those a bridge holds here, each with its blockedFrom(): one read for them all. */
export function bridgedKeys(sql: SqlStorage, keys: readonly string[]): Map<string, number> {
  if (keys.length === 0 || !bridgedAny(sql)) return new Map();
  const rows = sql.exec<{ key: string; g: number }>("SELECT key, MIN(gen) AS g FROM bridges WHERE released = 0 AND key IN (SELECT value FROM json_each(?)) GROUP BY key", JSON.stringify(keys));
  return new Map(rows.toArray().map((r) => [r.key, r.g]));
}

/**
 * Per shard (its SqlStorage), whether any bridge holds a key: almost always none, and then
 * no lane asks. handoff.ts forgets the answer whenever it changes the bridges.
 */
const bridged = new WeakMap<SqlStorage, boolean>();

function bridgedAny(sql: SqlStorage): boolean {
  let any = bridged.get(sql);
  if (any === undefined) bridged.set(sql, (any = sql.exec("SELECT 1 FROM bridges WHERE released = 0 LIMIT 1").toArray().length > 0));
  return any;
}

export function bridgesChanged(sql: SqlStorage): void {
  bridged.delete(sql);
}

/** The ids a keyed batch written again (its token) got the first time, if all of it is still here. */
export function laneIdsOfBatch(sql: SqlStorage, batch: string, count: number): string[] | null {
  const ids = sql.exec<{ id: string }>("SELECT id FROM lane_messages WHERE batch = ? ORDER BY lseq", batch).toArray().map((r) => r.id);
  return ids.length === count ? ids : null;
}

/** A message a lease may take: the head of a ready lane, or one right behind a head taken with it. */
export interface LaneCandidate {
  key: string;
  lseq: number;
  id: string;
  contentType: ContentType;
  checksum: number;
  enqueuedAt: number;
  sentAt: number;
  attempts: number;
  body: Uint8Array;
}

/** A row of readyLanes' read, in its columns' order. */
type RawCandidate = [key: string, lseq: number, id: string, contentType: ContentType, checksum: number, enqueuedAt: number, dueAt: number, attempts: number, sentAt: number, gen: number, body: ArrayBuffer];

/**
 * Up to `want` messages of ready lanes, the lanes whose head became ready first before the
 * others, each lane's due messages from its head on, in order. Leases nothing: the caller
 * takes a prefix of each lane (takeLanes) once it has weighed them against the segments. A
 * lane whose head waits on a hand-off is marked held, so it is not read again until released.
 */
export function readyLanes(sql: SqlStorage, now: number, want: number): LaneCandidate[] {
  const out: LaneCandidate[] = [];
  if (want <= 0) return out;
  // The lanes first, in the order they became ready; then, in one read, each one's first
  // messages up to `want`, through its key's index: ordering the join of the lanes with all
  // their messages read every message of a deep lane to sort it. Rows as arrays (raw), since
  // naming each row's columns costs more than the read.
  const keys = sql.exec<{ key: string }>("SELECT key FROM lanes WHERE ready_at IS NOT NULL AND ready_at <= ? ORDER BY ready_at LIMIT ?", now, want).toArray().map((r) => r.key);
  if (keys.length === 0) return out;
  const rows = [
    ...sql.exec(
      `SELECT m.key, m.lseq, m.id, m.content_type, m.checksum, m.enqueued_at, m.due_at, m.attempts, m.sent_at, m.gen, m.body
       FROM json_each(?) l JOIN lane_messages m ON m.lseq IN (SELECT lseq FROM lane_messages WHERE key = l.value ORDER BY lseq LIMIT ?)
       ORDER BY l.key, m.lseq LIMIT ?`,
      JSON.stringify(keys), want, want,
    ).raw(),
  ] as RawCandidate[];
  const blocked = bridgedKeys(sql, keys);
  let lane: string | null = null;
  let stopped = false;
  let from: number | null = null;
  for (const [key, lseq, id, contentType, checksum, enqueuedAt, dueAt, attempts, sentAt, gen, body] of rows) {
    if (key !== lane) {
      lane = key;
      stopped = false;
      from = blocked.get(key) ?? null;
      if (from !== null && gen >= from) {
        reopen(sql, now, key, null);
        stopped = true;
      }
    }
    if (stopped) continue;
    // The first message not due yet, or held by a hand-off, holds the rest of its lane.
    if (dueAt > now || (from !== null && gen >= from)) {
      stopped = true;
      continue;
    }
    out.push({ key, lseq, id, contentType, checksum, enqueuedAt, sentAt, attempts, body: new Uint8Array(body) });
  }
  return out;
}

/**
 * Leases the given candidates (for each lane, its head and those right behind it) under
 * one new lease. A body whose checksum fails is never handed out: it moves to the
 * quarantine table and its lane goes on without it.
 */
export function takeLanes(sql: SqlStorage, now: number, candidates: readonly LaneCandidate[], leaseMs: number): { messages: LeasedMessage[]; quarantined: number; delta: BacklogDelta } {
  const lease = randomHex(12);
  const messages: LeasedMessage[] = [];
  /** Each leased lane's first message leased (its head) and its last lseq leased. */
  const leasedKeys = new Map<string, [head: string, upto: number]>();
  const emptied = new Set<string>();
  const lseqs: number[] = [];
  let quarantined = 0;
  let bytes = 0;
  for (const c of candidates) {
    if (crc32(c.body) !== c.checksum) {
      sql.exec("INSERT OR REPLACE INTO quarantine (id, body, checksum, reason, detected_at) VALUES (?, ?, ?, 'checksum mismatch', ?)", c.id, c.body, c.checksum, now);
      sql.exec("DELETE FROM lane_messages WHERE lseq = ?", c.lseq);
      quarantined++;
      bytes += c.body.byteLength;
      emptied.add(c.key);
      continue;
    }
    const taken = leasedKeys.get(c.key);
    if (taken) taken[1] = c.lseq;
    else leasedKeys.set(c.key, [c.id, c.lseq]);
    lseqs.push(c.lseq);
    messages.push({
      id: c.id,
      body: c.body,
      contentType: c.contentType,
      enqueuedAt: c.sentAt || c.enqueuedAt,
      attempts: c.attempts + 1,
      leaseId: `L${c.lseq}-${lease}`,
      copyKey: copyOfLane(c.lseq),
      orderingKey: c.key,
    });
  }
  if (lseqs.length > 0) {
    // One statement for every message and one for every lane of the lease, whatever their number.
    sql.exec("UPDATE lane_messages SET leased = 1 WHERE lseq IN (SELECT value FROM json_each(?))", JSON.stringify(lseqs));
    // A lane's blocker is its head: the first message of it leased (one quarantined before it is gone).
    sql.exec(
      `UPDATE lanes SET ready_at = NULL, lease = ?, lease_until = ?, reason = 'leased', held_since = ?, blocker = h.value ->> '$[1][0]', upto = h.value ->> '$[1][1]'
       FROM json_each(?) AS h WHERE lanes.key = h.value ->> '$[0]'`,
      lease, now + leaseMs, now, JSON.stringify([...leasedKeys]),
    );
    laneLeaseTaken(sql, now + leaseMs);
  }
  // A lane whose every candidate was quarantined takes its next head.
  for (const key of emptied) if (!leasedKeys.has(key)) reopen(sql, now, key, null);
  return { messages, quarantined, delta: { count: -quarantined, bytes: -bytes } };
}

/**
 * Per shard (its SqlStorage), the earliest end of a lane lease (null: none), or nothing when
 * not known yet (a restart). A settle or an extension leaves it early, never late: reaching
 * it costs one read of the leased lanes, which finds the true one. Kept in memory so that a
 * lease's end is not an index entry written and deleted with every lease.
 */
const leaseEnds = new WeakMap<SqlStorage, number | null>();

function earliestLeaseEnd(sql: SqlStorage): number | null {
  let end = leaseEnds.get(sql);
  if (end === undefined) leaseEnds.set(sql, (end = sql.exec<{ t: number | null }>("SELECT MIN(lease_until) AS t FROM lanes WHERE lease IS NOT NULL").one().t));
  return end;
}

/** Whether a lane lease may have run out by `now` (a lower bound: one settled since may be the earliest). */
export function laneLeaseMayHaveLapsed(sql: SqlStorage, now: number): boolean {
  const end = earliestLeaseEnd(sql);
  return end !== null && end <= now;
}

/** A lane lease taken, running to `until`. */
export function laneLeaseTaken(sql: SqlStorage, until: number): void {
  const end = earliestLeaseEnd(sql);
  if (end === null || until < end) leaseEnds.set(sql, until);
}

/** Lane leases that ran out: each message it held was a delivery that failed; the lane is ready again at once. */
export function expireLaneLeases(sql: SqlStorage, now: number): number {
  const end = earliestLeaseEnd(sql);
  if (end === null || end > now) return 0;
  let next: number | null = null;
  let lapsed = 0;
  for (const { key, lease, upto, lease_until } of sql.exec<{ key: string; lease: string; upto: number | null; lease_until: number }>("SELECT key, lease, upto, lease_until FROM lanes WHERE lease IS NOT NULL").toArray()) {
    if (lease_until > now) {
      if (next === null || lease_until < next) next = lease_until;
      continue;
    }
    sql.exec("UPDATE lane_messages SET attempts = attempts + 1, leased = 0 WHERE key = ? AND lseq <= ? AND leased = 1", key, upto ?? Number.MAX_SAFE_INTEGER);
    reopen(sql, now, key, lease);
    lapsed++;
  }
  leaseEnds.set(sql, next);
  return lapsed;
}

/**
 * A lane whose lease ended (settled, or run out) or whose head changed: deleted when it
 * holds nothing more, else ready when its head is due, and held (why, by which message,
 * since when) until then; held with no time while its head waits on a hand-off from
 * another shard. `lastLease` is the lease that ended: an ack under it still lands until
 * someone else leases the lane, as a segment's lapsed lease does. True when the lane is ready now.
 */
export function reopen(sql: SqlStorage, now: number, key: string, lastLease: string | null): boolean {
  const head = sql.exec<{ id: string; due_at: number; enqueued_at: number; attempts: number; gen: number }>("SELECT id, due_at, enqueued_at, attempts, gen FROM lane_messages WHERE key = ? ORDER BY lseq LIMIT 1", key).toArray()[0];
  if (!head) {
    sql.exec("DELETE FROM lanes WHERE key = ?", key);
    return false;
  }
  const from = blockedFrom(sql, key);
  if (from !== null && head.gen >= from) {
    const holder = sql.exec<{ holder: string }>("SELECT holder FROM bridges WHERE key = ? AND released = 0 ORDER BY gen LIMIT 1", key).one().holder;
    sql.exec(
      "UPDATE lanes SET ready_at = NULL, lease = NULL, lease_until = NULL, last_lease = COALESCE(?, last_lease), reason = 'handoff', blocker = ?, held_since = CASE WHEN reason = 'handoff' AND held_since IS NOT NULL THEN held_since ELSE ? END WHERE key = ?",
      lastLease, holder, now, key,
    );
    return false;
  }
  const readyAt = head.due_at || head.enqueued_at;
  const held = readyAt > now;
  sql.exec(
    "UPDATE lanes SET ready_at = ?, lease = NULL, lease_until = NULL, last_lease = COALESCE(?, last_lease), reason = ?, blocker = ?, held_since = ? WHERE key = ?",
    readyAt, lastLease, held ? (head.attempts > 0 ? "retry" : "delayed") : null, held ? head.id : null, held ? now : null, key,
  );
  return !held;
}

/** Whether a lane is ready now and nobody has leased it. */
export function lanesReadyAt(sql: SqlStorage, now: number): boolean {
  return sql.exec("SELECT 1 FROM lanes WHERE ready_at IS NOT NULL AND ready_at <= ? LIMIT 1", now).toArray().length > 0;
}

/** When a held lane is next ready, or a lane lease runs out; null when neither. */
export function nextLaneVisible(sql: SqlStorage, now: number): number | null {
  const ready = sql.exec<{ t: number | null }>("SELECT MIN(ready_at) AS t FROM lanes WHERE ready_at > ?", now).one().t;
  const lease = earliestLeaseEnd(sql);
  if (ready === null) return lease;
  return lease === null ? ready : Math.min(ready, lease);
}
