// Writes test/fixtures/upgrade-v4/: the `wrangler dev` state directory of a queue whose
// messages stand in every state today's storage shard knows (schema "v4": one row per
// message in the `messages` table), and expected.json, what test/e2e/upgrade.test.ts
// checks a later version of the service still finds there after it upgrades that state.
//
//   node scripts/make-upgrade-fixture.mjs      (Node 22, as wrangler needs: `npx node ...` or npm's own)
//
// Run it only against code that still writes the v4 schema: the fixture is what an upgrade
// starts from, so once the storage shard's schema changes, regenerating it here would test
// nothing (a later schema gets a fixture of its own beside this one). It starts that code's
// service the way `npm start` does (the dev config and the example consumer), with a
// fresh state directory, and a small producer Worker of its own for the content types
// HTTP cannot send (bytes, v8). It creates the queue "upgrade" with an http_pull consumer
// (max_retries 5) and drives it over HTTP into these states:
//
//   ready            sent, never delivered (json, text, bytes, v8; empty and 100 KB bodies;
//                    a producer-chosen id and an Idempotency-Key send among them)
//   delayed          sent with delay_seconds 3600
//   retried_ready    pulled, then retried with delay 0 (once or twice): ready again, attempts >= 1
//   retry_scheduled  pulled, then retried with delay 300 s: scheduled
//   retry_pending    pulled, then retried with delay 7200 s: scheduled, still not due when the test runs
//   leased           pulled with a 30 s lease, not acked
//   leased_long      pulled with a 12 h lease, not acked
//   lease_expired    pulled with a 1 s lease that ran out before the stop
//   acked            pulled and acked: gone, must stay gone
//
// A fresh message (never delivered before) is leased in the shard's memory only, so on
// disk a leased fresh message is a ready row, and its lease is lost with the stop; a
// message delivered before holds a stored lease (due_at, lease_id). expected.json has
// each message's row as it is on disk (`v4`), read after the stop.
//
// The files hold absolute times. The test moves every stored time of the copy it starts
// from (enqueued_at, due_at, sent_at, remembered ids and moves) so that the fixture looks
// `virtual_age_ms` old whenever it runs; `at_test` below says what each message is then.
// The stop is clean (SIGTERM), and each SQLite file's WAL is checkpointed into it, so the
// fixture has no -wal or -shm files.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { freePort, ROOT, startWrangler } from "../cli/wrangler/dev-server.mjs";
import { startDevService } from "../test/e2e/dev-service.mjs";

const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
if (major < 22 || (major === 22 && minor < 12)) {
  console.error(`make-upgrade-fixture needs Node 22.12 or later (wrangler does, and node:sqlite); this is ${process.version}. Try: npx node scripts/make-upgrade-fixture.mjs`);
  process.exit(1);
}
const { DatabaseSync } = await import("node:sqlite");

const OUT = join(ROOT, "test", "fixtures", "upgrade-v4");
const QUEUE = "upgrade";
const TOKEN = "shardq-local-dev-token";
const HEADERS = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
/** How old the fixture looks to the test: past the 300 s retries and the 30 s and 1 s leases, short of the 3600 s delays. */
const VIRTUAL_AGE_MS = 20 * 60_000;
const LEASE_MS = 30_000;
const LONG_LEASE_MS = 43_200_000;
const SHORT_LEASE_MS = 1000;
/** The storage shard's schema_version while its messages table has the v4 layout (one row per message). */
const V4_SCHEMA_VERSION = 9;

/** The fixture's own producer Worker (one `send()` per request; bytes and v8 bodies HTTP cannot send). */
const PRODUCER_SOURCE = join(ROOT, "scripts", "upgrade-fixture-producer", "index.js");

/**
 * @typedef {"ready" | "delayed" | "retried_ready" | "retry_scheduled" | "retry_pending" | "leased" | "leased_long" | "lease_expired" | "acked"} FixtureState
 * @typedef {{ id: string, state: FixtureState, how: string, content_type: string, sent_sha256: string | null, deliveries: number, attempts_seen: number, lease_id: string | null, history: string[] }} Tracked
 * @typedef {{ id: string, body: string, attempts: number, lease_id: string, timestamp_ms: number, metadata: Record<string, string> }} Pulled
 */

/** @type {Map<string, Tracked>} */
const messages = new Map();
const sha256 = (/** @type {Uint8Array} */ b) => createHash("sha256").update(b).digest("hex");
const utf8 = new TextEncoder();

/** @param {string} id @param {string} how @param {string} contentType @param {Uint8Array | null} bytes @param {FixtureState} [state] */
function track(id, how, contentType, bytes, state = "ready") {
  if (messages.has(id)) throw new Error(`id ${id} returned twice by sends`);
  messages.set(id, { id, state, how, content_type: contentType, sent_sha256: bytes ? sha256(bytes) : null, deliveries: 0, attempts_seen: 0, lease_id: null, history: [] });
}

const work = mkdtempSync(join(tmpdir(), "shardq-upgrade-fixture-"));
const stateDir = join(work, "state");
mkdirSync(stateDir);
console.log(`[fixture] state in ${stateDir}`);
const service = await startDevService("upgrade-fixture", [], { stateDir });
const Q = `${service.base}/accounts/local/queues`;
/** @type {Awaited<ReturnType<typeof startWrangler>> | undefined} */
let producer;

/** @param {string} path @param {RequestInit} [init] @returns {Promise<any>} */
async function api(path, init = {}) {
  const res = await fetch(`${Q}${path}`, { ...init, headers: { ...HEADERS, ...(init.headers ?? {}) } });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? "GET"} ${path}: ${res.status} ${text.slice(0, 500)}`);
  return JSON.parse(text).result;
}
const post = (/** @type {string} */ path, /** @type {unknown} */ body, /** @type {Record<string, string>} */ headers = {}) => api(path, { method: "POST", body: JSON.stringify(body), headers });

try {
  await post("", { queue_name: QUEUE });
  await post(`/${QUEUE}/consumers`, { type: "http_pull", settings: { max_retries: 5, visibility_timeout_ms: LEASE_MS } });

  // --- Sends over HTTP: json and text. Each batch lands on one shard; several batches spread over the queue's shards.
  for (let b = 0; b < 8; b++) {
    const bodies = Array.from({ length: 20 }, (_, i) => ({ batch: b, i, note: "plain json", nested: { list: [i, null, true, "x"] } }));
    const r = await post(`/${QUEUE}/messages/batch`, { messages: bodies.map((body) => ({ body })) });
    r.message_ids.forEach((/** @type {string} */ id, /** @type {number} */ i) => track(id, `json batch ${b}`, "json", utf8.encode(JSON.stringify(bodies[i]))));
  }
  const texts = ["plain text", "unicode: héllo wörld ✓ 日本語 🚀", "line one\nline two\r\n\ttabbed", "", "x".repeat(100_000)];
  for (const [i, text] of texts.entries()) {
    const r = await post(`/${QUEUE}/messages`, { body: text, content_type: "text" });
    track(r.message_id, `text single ${i} (${utf8.encode(text).byteLength} bytes)`, "text", utf8.encode(text));
  }
  const jsons = [{ a: 1 }, [1, 2, 3], "a json string", 42, null, { big: "y".repeat(100_000) }];
  for (const [i, body] of jsons.entries()) {
    const r = await post(`/${QUEUE}/messages`, { body, content_type: "json" });
    track(r.message_id, `json single ${i}`, "json", utf8.encode(JSON.stringify(body)));
  }
  // Producer-chosen ids (remembered_ids rows) and an Idempotency-Key send.
  const chosen = ["00000000000000000000000000000a01", "00000000000000000000000000000a02", "00000000000000000000000000000a03"];
  const r1 = await post(`/${QUEUE}/messages/batch`, { messages: chosen.map((id, i) => ({ id, body: { chosen: i } })) });
  r1.message_ids.forEach((/** @type {string} */ id, /** @type {number} */ i) => track(id, "producer-chosen id", "json", utf8.encode(JSON.stringify({ chosen: i }))));
  const r2 = await post(`/${QUEUE}/messages/batch`, { messages: [{ body: { keyed: 0 } }, { body: "keyed text", content_type: "text" }] }, { "idempotency-key": "upgrade-fixture-1" });
  track(r2.message_ids[0], "idempotency-key batch", "json", utf8.encode(JSON.stringify({ keyed: 0 })));
  track(r2.message_ids[1], "idempotency-key batch", "text", utf8.encode("keyed text"));
  // Delayed sends: a batch-level delay and per-message ones.
  const delayedBodies = Array.from({ length: 10 }, (_, i) => ({ delayed: i }));
  const r3 = await post(`/${QUEUE}/messages/batch`, { messages: delayedBodies.map((body) => ({ body })), delay_seconds: 3600 });
  r3.message_ids.forEach((/** @type {string} */ id, /** @type {number} */ i) => track(id, "json batch, delay_seconds 3600", "json", utf8.encode(JSON.stringify(delayedBodies[i])), "delayed"));
  for (const [i, text] of ["delayed text", "delayed ünïcode"].entries()) {
    const r = await post(`/${QUEUE}/messages`, { body: text, content_type: "text", delay_seconds: 3600 });
    track(r.message_id, `text single, delay_seconds 3600 (${i})`, "text", utf8.encode(text), "delayed");
  }

  // --- Sends through a producer binding: bytes and v8, which HTTP does not carry.
  const producerDir = join(work, "producer");
  mkdirSync(producerDir);
  cpSync(PRODUCER_SOURCE, join(producerDir, "index.js"));
  writeFileSync(
    join(producerDir, "wrangler.toml"),
    `name = "shardq-upgrade-fixture-producer"\nmain = "index.js"\ncompatibility_date = "2026-11-01"\n\n[[services]]\nbinding = "QUEUE"\nservice = "shardq"\nentrypoint = "QueueProducer"\nprops = { account = "local", queue = "${QUEUE}" }\n`,
  );
  const producerPort = await freePort();
  producer = await startWrangler({
    args: ["-c", join(producerDir, "wrangler.toml"), "--port", String(producerPort), "--ip", "127.0.0.1", "--persist-to", join(work, "producer-state"), "--inspector-port", "0"],
    readyUrl: `http://127.0.0.1:${producerPort}/`,
    env: { WRANGLER_REGISTRY_PATH: service.registry },
  });
  /** @param {"bytes" | "v8"} type @param {Uint8Array | null} bytes @param {number} delay @returns {Promise<string>} */
  const produce = async (type, bytes, delay) => {
    for (let tries = 0; ; tries++) {
      const res = await fetch(`http://127.0.0.1:${producerPort}/send?type=${type}&delay=${delay}`, { method: "POST", body: bytes ? Buffer.from(bytes) : "" });
      const text = await res.text();
      if (res.ok) return /** @type {{ id: string }} */ (JSON.parse(text)).id;
      // The dev registry can take a moment to connect the binding to the service.
      if (tries >= 20) throw new Error(`producer /send?type=${type}: ${res.status} ${text.slice(0, 500)}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  };
  const allBytes = new Uint8Array(1024).map((_, i) => i % 256);
  let seed = 12345;
  const random = new Uint8Array(100_000).map(() => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff);
  for (const [what, bytes] of /** @type {Array<[string, Uint8Array]>} */ ([["every byte value", allBytes], ["empty", new Uint8Array(0)], ["100 KB pseudo-random", random], ["NUL bytes", new Uint8Array(16)]])) {
    track(await produce("bytes", bytes, 0), `bytes through the producer binding: ${what}`, "bytes", bytes);
  }
  track(await produce("bytes", allBytes, 3600), "bytes through the producer binding, delaySeconds 3600", "bytes", allBytes, "delayed");
  track(await produce("v8", null, 0), "v8 through the producer binding (Date, Set, Map, BigInt, undefined, Uint8Array)", "v8", null);
  track(await produce("v8", null, 0), "v8 through the producer binding (Date, Set, Map, BigInt, undefined, Uint8Array)", "v8", null);
  track(await produce("v8", null, 3600), "v8 through the producer binding, delaySeconds 3600", "v8", null, "delayed");
  await producer.stop();
  producer = undefined;

  // --- Deliveries. A pull visits the queue's shards in random order and takes, on each, the
  // scheduled messages that are due before fresh ones, so which message lands in which
  // state is chance; each one's story is tracked from what the pulls answer.
  /** @param {number} n @param {number} leaseMs @returns {Promise<Pulled[]>} */
  const pull = async (n, leaseMs) => {
    /** @type {Pulled[]} */
    const got = [];
    for (let empty = 0; got.length < n; ) {
      const r = await post(`/${QUEUE}/messages/pull`, { batch_size: Math.min(100, n - got.length), visibility_timeout_ms: leaseMs });
      if (r.messages.length === 0 && ++empty > 5) throw new Error(`wanted ${n} messages, only ${got.length} are ready`);
      for (const m of /** @type {Pulled[]} */ (r.messages)) {
        const t = messages.get(m.id);
        if (!t) throw new Error(`pulled an unknown message ${m.id}`);
        if (t.state === "delayed" || t.state === "acked") throw new Error(`pulled ${m.id}, which is ${t.state}`);
        const ct = m.metadata["CF-Content-Type"];
        if (ct !== t.content_type) throw new Error(`${m.id}: content type ${ct}, sent as ${t.content_type}`);
        const bytes = ct === "text" ? utf8.encode(m.body) : Buffer.from(m.body, "base64");
        if (t.sent_sha256 !== null && sha256(bytes) !== t.sent_sha256) throw new Error(`${m.id}: pulled body differs from the one sent`);
        t.deliveries++;
        t.attempts_seen = m.attempts;
        t.lease_id = m.lease_id;
        got.push(m);
      }
    }
    return got;
  };
  /**
   * Pulls one message at a time under `leaseMs` until `want` of them had been delivered
   * before (attempts > 1: a stored lease), all left leased as `state`. A pull takes the
   * first shard it visits with anything ready, so the others are fresh messages leased in memory.
   * @param {number} want @param {number} leaseMs @param {FixtureState} state @param {string} note
   */
  const leaseStoredUntil = async (want, leaseMs, state, note) => {
    let stored = 0;
    for (let tries = 0; stored < want; tries++) {
      if (tries >= 60) throw new Error(`only ${stored} of ${want} stored leases after 60 pulls`);
      const got = await pull(1, leaseMs);
      leaveLeased(got, state, note);
      if ((got[0]?.attempts ?? 0) > 1) stored++;
    }
  };
  /** @param {Pulled[]} got @param {FixtureState} state @param {string} note */
  const leaveLeased = (got, state, note) => {
    for (const m of got) {
      const t = /** @type {Tracked} */ (messages.get(m.id));
      t.state = state;
      t.history.push(`${note} (attempts ${m.attempts})`);
    }
  };
  /** @param {Pulled[]} got @param {{ retryDelay?: number }} how @param {FixtureState} state */
  const settle = async (got, how, state) => {
    const r = await post(
      `/${QUEUE}/messages/ack`,
      how.retryDelay === undefined ? { acks: got.map((m) => ({ lease_id: m.lease_id })) } : { retries: got.map((m) => ({ lease_id: m.lease_id, delay_seconds: how.retryDelay })) },
    );
    if (Object.keys(r.warnings).length > 0 || r.ackCount + r.retryCount !== got.length) throw new Error(`ack answered ${JSON.stringify(r)} for ${got.length} leases`);
    for (const m of got) {
      const t = /** @type {Tracked} */ (messages.get(m.id));
      t.state = state;
      t.lease_id = null;
      t.history.push(how.retryDelay === undefined ? `pulled (attempts ${m.attempts}) and acked` : `pulled (attempts ${m.attempts}) and retried with delay ${how.retryDelay} s`);
    }
  };

  // While nothing scheduled is due, every pull takes fresh messages. Their leases live in the shards' memory only.
  await settle(await pull(12, 300_000), {}, "acked");
  leaveLeased(await pull(6, LONG_LEASE_MS), "leased_long", "pulled with a 12 h lease, not acked");
  leaveLeased(await pull(16, LEASE_MS), "leased", `pulled with a ${LEASE_MS / 1000} s lease, not acked`);
  await settle(await pull(8, 300_000), { retryDelay: 7200 }, "retry_pending");
  await settle(await pull(16, 300_000), { retryDelay: 300 }, "retry_scheduled");
  // Retried with delay 0: due at once, so from here on pulls take these first.
  await settle(await pull(30, 300_000), { retryDelay: 0 }, "retried_ready");
  await settle(await pull(10, 300_000), { retryDelay: 0 }, "retried_ready");
  // Stored leases (on retried messages): still held when the test runs, or run out.
  await leaseStoredUntil(8, LONG_LEASE_MS, "leased_long", "pulled with a 12 h lease, not acked");
  await leaseStoredUntil(5, SHORT_LEASE_MS, "lease_expired", "pulled with a 1 s lease that ran out, not acked");
  await new Promise((r) => setTimeout(r, 2 * SHORT_LEASE_MS));
  // Each pull first writes the run-out memory leases of the shards it visits as failed deliveries
  // (attempts counted, lease id kept for a late ack), then takes the oldest due message there.
  for (let i = 0; i < 4; i++) leaveLeased(await pull(1, LEASE_MS), "leased", `pulled with a ${LEASE_MS / 1000} s lease, not acked`);

  // --- What the service says before the stop.
  /** @type {Map<string, any>} */
  const lookups = new Map();
  for (const t of messages.values()) {
    const res = await fetch(`${Q}/${QUEUE}/messages/${t.id}`, { headers: HEADERS });
    if (t.state === "acked") {
      if (res.status !== 404) throw new Error(`acked ${t.id}: lookup answered ${res.status}`);
      continue;
    }
    if (!res.ok) throw new Error(`lookup ${t.id}: ${res.status} ${await res.text()}`);
    lookups.set(t.id, /** @type {any} */ (await res.json()).result);
  }
  const metrics = await api(`/${QUEUE}/metrics`);
  const queueInfo = await api(`/${QUEUE}`);
  const live = [...messages.values()].filter((t) => t.state !== "acked").length;
  if (metrics.backlog_count !== live) throw new Error(`backlog ${metrics.backlog_count} before the stop, ${live} expected`);

  // --- A clean stop, then every SQLite file's WAL merged into it.
  await service.stop();
  const stoppedAt = Date.now();
  const sqliteFiles = walk(stateDir).filter((f) => f.endsWith(".sqlite"));
  for (const f of sqliteFiles) {
    const db = new DatabaseSync(f);
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    db.close();
  }

  // --- The rows as they are on disk.
  /** @type {Map<string, Record<string, unknown>>} */
  const rows = new Map();
  /** @type {Array<Record<string, unknown>>} */
  const shards = [];
  /** @type {unknown[]} */
  let schema = [];
  for (const f of sqliteFiles) {
    // Read-write, as the checkpoint above: a read-only connection leaves empty -wal and -shm files behind.
    const db = new DatabaseSync(f);
    const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all().map((r) => String(r.name));
    if (tables.includes("messages")) {
      const meta = Object.fromEntries(db.prepare("SELECT key, value FROM meta").all().map((r) => [r.key, r.value]));
      const identity = JSON.parse(String(meta.identity));
      const version = db.prepare("SELECT version FROM schema_version").get()?.version;
      // The v4 layout of the messages table, as storage-shard/schema.ts's migrations 4 to 9 leave it.
      if (version !== V4_SCHEMA_VERSION) throw new Error(`storage shard schema_version ${version}, not ${V4_SCHEMA_VERSION}: this code no longer writes the schema the fixture holds (see the top of this file)`);
      const n = db.prepare("SELECT COUNT(*) AS n FROM messages").get()?.n;
      schema = db.prepare("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_autoindex%' ORDER BY rowid").all();
      shards.push({ file: relative(stateDir, f), shard: identity.name, schema_version: version, rows: n, tables, counters: db.prepare("SELECT * FROM counters").get() });
      for (const r of db.prepare("SELECT seq, id, size, enqueued_at, due_at, attempts, lease_id, checksum, content_type, body, nonce, sent_at FROM messages ORDER BY seq").all()) {
        const id = String(r.id);
        if (rows.has(id)) throw new Error(`message ${id} is stored twice`);
        const body = /** @type {Uint8Array} */ (r.body);
        rows.set(id, {
          shard: identity.name,
          seq: r.seq,
          size: r.size,
          body_sha256: sha256(body),
          enqueued_at: r.enqueued_at,
          due_at: r.due_at,
          attempts: r.attempts,
          lease_id: r.lease_id,
          checksum: r.checksum,
          content_type: r.content_type,
          nonce_set: r.nonce !== null,
          sent_at: r.sent_at,
        });
      }
    }
    db.close();
  }
  const leftovers = walk(stateDir).filter((f) => /\.sqlite-(wal|shm|journal)$/.test(f));
  if (leftovers.length > 0) throw new Error(`WAL files left after the checkpoint: ${leftovers.join(", ")}`);
  for (const t of messages.values()) {
    const row = rows.get(t.id);
    if (t.state === "acked" ? row !== undefined : row === undefined) throw new Error(`${t.id} (${t.state}) ${row ? "is" : "is not"} on disk`);
    if (row && t.sent_sha256 !== null && row.body_sha256 !== t.sent_sha256) throw new Error(`${t.id}: the stored body is not the one sent`);
  }
  if (rows.size !== live) throw new Error(`${rows.size} rows on disk, ${live} messages expected`);

  // --- expected.json: each message, its row, and what the test must find.
  /** @type {Array<Record<string, any>>} */
  const out = [...messages.values()].map((t) => {
    const row = rows.get(t.id);
    const lookup = lookups.get(t.id);
    /** @type {Record<string, unknown>} */
    const entry = {
      id: t.id,
      state: t.state,
      how: t.how,
      history: t.history,
      content_type: t.content_type,
      deliveries: t.deliveries,
      attempts_seen: t.attempts_seen,
      ...(t.lease_id ? { lease_id: t.lease_id } : {}),
    };
    if (!row) return { ...entry, at_test: "gone" };
    const dueAt = /** @type {number | null} */ (row.due_at);
    // What the message is `virtual_age_ms` after the stop: due (or never scheduled) is delivered;
    // a stored lease still running is held; anything else scheduled is delayed.
    // The test runs at what is, for these rows, stoppedAt + VIRTUAL_AGE_MS; nothing may fall due near then.
    const testAt = stoppedAt + VIRTUAL_AGE_MS;
    const atTest = dueAt === null || dueAt <= testAt ? "deliver" : row.lease_id !== null ? "held" : "delayed";
    if (dueAt !== null && dueAt > testAt - 5 * 60_000 && dueAt < testAt + 30 * 60_000) throw new Error(`${t.id} (${t.state}) falls due too near the test's start`);
    return {
      ...entry,
      size: row.size,
      body_sha256: row.body_sha256,
      timestamp_ms: lookup.timestamp_ms,
      lookup_before_stop: { state: lookup.state, attempts: lookup.attempts, visible_at_ms: lookup.visible_at_ms, shard: lookup.shard },
      v4: { ...row, enqueued_at: undefined, due_in_ms: dueAt === null ? null : dueAt - stoppedAt },
      at_test: atTest,
      // Each delivery counts: the next one shows at least one more attempt than the row has counted.
      min_attempts: atTest === "deliver" ? Number(row.attempts) + 1 : Number(row.attempts),
    };
  });
  /** @param {(e: Record<string, unknown>) => unknown} key */
  const countBy = (key) => {
    /** @type {Record<string, number>} */
    const c = {};
    for (const e of out) c[String(key(e))] = (c[String(key(e))] ?? 0) + 1;
    return c;
  };
  // Chance decides which message ends in which form on disk: make sure each form is there.
  const forms = countBy((e) => {
    const v4 = /** @type {{ due_at: number | null, lease_id: string | null } | undefined} */ (e.v4);
    return `${e.at_test}: ${!v4 ? "no row" : v4.due_at === null ? "fresh row" : v4.lease_id !== null ? "row with a stored lease" : "scheduled row"}`;
  });
  for (const form of ["deliver: fresh row", "deliver: scheduled row", "deliver: row with a stored lease", "held: row with a stored lease", "delayed: scheduled row", "gone: no row"]) {
    if ((forms[form] ?? 0) < 3) throw new Error(`only ${forms[form] ?? 0} message(s) of the form "${form}" (${JSON.stringify(forms)}); run the script again`);
  }
  const memoryLeased = out.filter((e) => e.at_test === "deliver" && e.lookup_before_stop && /** @type {{ state: string }} */ (e.lookup_before_stop).state === "leased" && /** @type {{ due_at: number | null }} */ (e.v4).due_at === null);
  if (memoryLeased.length < 3) throw new Error(`only ${memoryLeased.length} message(s) leased in memory at the stop; run the script again`);

  const expected = {
    $comment: "Written by scripts/make-upgrade-fixture.mjs; checked by test/e2e/upgrade.test.ts. state: what the fixture did to the message; at_test: what the test must find once the fixture's times are moved to look virtual_age_ms old.",
    made_with_commit: gitHead(),
    stopped_at_ms: stoppedAt,
    virtual_age_ms: VIRTUAL_AGE_MS,
    account: "local",
    queue: { name: QUEUE, id: queueInfo.queue_id, settings: queueInfo.settings, consumer: { type: "http_pull", max_retries: 5, visibility_timeout_ms: LEASE_MS } },
    backlog_before_stop: { count: metrics.backlog_count, bytes: metrics.backlog_bytes, oldest_message_timestamp_ms: metrics.oldest_message_timestamp_ms },
    counts: { by_state: countBy((e) => e.state), at_test: countBy((e) => e.at_test), on_disk: forms, by_content_type: countBy((e) => e.content_type) },
    shards,
    v4_schema: schema,
    messages: out,
  };

  rmSync(OUT, { recursive: true, force: true });
  mkdirSync(OUT, { recursive: true });
  cpSync(stateDir, join(OUT, "state"), { recursive: true });
  writeFileSync(join(OUT, "expected.json"), `${JSON.stringify(expected, null, 1)}\n`);
  console.log(`[fixture] ${out.length} messages; by state ${JSON.stringify(expected.counts.by_state)}; at test ${JSON.stringify(expected.counts.at_test)}`);
  console.log(`[fixture] ${shards.length} storage shards, schema_version ${[...new Set(shards.map((s) => s.schema_version))].join(", ")}; rows ${shards.map((s) => s.rows).join(", ")}`);
  console.log(`[fixture] written to ${relative(ROOT, OUT)} (${Math.round(sizeOf(OUT) / 1024)} KB)`);
} finally {
  await producer?.stop();
  await service.stop();
  rmSync(work, { recursive: true, force: true });
}

/** @param {string} dir @returns {string[]} */
function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}

/** @param {string} dir */
function sizeOf(dir) {
  return walk(dir).reduce((n, f) => n + statSync(f).size, 0);
}

/** The commit the fixture was made at ("-dirty" when the worktree had changes), or null outside git. */
function gitHead() {
  try {
    return execFileSync("git", ["describe", "--always", "--dirty", "--abbrev=40"], { cwd: ROOT, encoding: "utf8" }).trim();
  } catch {
    return null;
  }
}
