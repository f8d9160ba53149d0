// Upgrade in place: the service starts on a state directory written by an older version
// of itself and finds every message there, in the state it was left in, losing and
// duplicating nothing. The state is test/fixtures/upgrade-v4 (the storage shard's "v4"
// schema: one row per message; its README.md says which commit wrote it and how), with messages
// ready, delayed, retried (due and scheduled), leased (in memory and stored, run out and
// still held) and acked; expected.json says what each one must be now.
//
// The fixture's files hold absolute times, so before the start every stored time of the
// copy is moved forward to make the fixture look `virtual_age_ms` old (20 minutes): the
// 30 s and 1 s leases and the 300 s retries have run out, the 3600 s delays, the 7200 s
// retries and the 12 h leases have not, whenever the test runs. Only the copy's v4 rows
// are touched, before the service (and any migration of it) sees them.
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createHash } from "node:crypto";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT } from "../../cli/wrangler/dev-server.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";
import type { Lookup } from "./message-lookup.js";
import { sleep } from "../../src/kernel/sleep.ts";
import { HEADERS as headers } from "./helpers.ts";

const FIXTURE = join(ROOT, "test", "fixtures", "upgrade-v4");

type AtTest = "deliver" | "delayed" | "held" | "gone";
interface Expected {
  id: string;
  state: string;
  how: string;
  content_type: string;
  lease_id?: string;
  at_test: AtTest;
  size?: number;
  body_sha256?: string;
  timestamp_ms?: number;
  min_attempts?: number;
  v4?: { shard: string; attempts: number; due_at: number | null; lease_id: string | null };
}
interface Fixture {
  stopped_at_ms: number;
  virtual_age_ms: number;
  queue: { name: string; id: string; consumer: { type: string; max_retries: number } };
  counts: Record<string, Record<string, number>>;
  messages: Expected[];
}
interface Pulled {
  id: string;
  body: string;
  attempts: number;
  lease_id: string;
  timestamp_ms: number;
  metadata: Record<string, string>;
}

const fixture = JSON.parse(readFileSync(join(FIXTURE, "expected.json"), "utf8")) as Fixture;
const QUEUE = fixture.queue.name;
const all = fixture.messages;
const live = all.filter((m) => m.at_test !== "gone");
const notDelivered = live.filter((m) => m.at_test === "delayed" || m.at_test === "held");
/** Names a message in a failure: its id, what the fixture did to it, and what it must be now. */
const who = (m: Expected | undefined, id: string) =>
  m ? `${id} (${m.state}: ${m.how}; must be ${m.at_test} now)` : `${id} (not in the fixture)`;
const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const sum = (ms: Expected[]) => ms.reduce((n, m) => n + (m.size ?? 0), 0);

describe("upgrade in place from the v4 storage shard schema", () => {
  const stateDir = mkdtempSync(join(tmpdir(), "shardq-e2e-upgrade-state-"));
  let service: DevService | undefined;
  let base = "";
  /** What the test added to every stored time of the copy. */
  let shift = 0;

  const api = async <T>(path: string, init: RequestInit = {}): Promise<{ status: number; result: T; text: string }> => {
    const res = await fetch(`${base}/accounts/local/queues${path}`, { ...init, headers });
    const text = await res.text();
    let result = null as T;
    try {
      result = (JSON.parse(text) as { result: T }).result;
    } catch {}
    return { status: res.status, result, text };
  };
  const post = <T>(path: string, body: unknown) => api<T>(path, { method: "POST", body: JSON.stringify(body) });
  const metrics = async () => {
    const r = await api<{ backlog_count: number; backlog_bytes: number; oldest_message_timestamp_ms: number | null }>(
      `/${QUEUE}/metrics`,
    );
    expect(r.status, r.text).toBe(200);
    return r.result;
  };

  beforeAll(async () => {
    cpSync(join(FIXTURE, "state"), stateDir, { recursive: true });
    shift = Date.now() - fixture.virtual_age_ms - fixture.stopped_at_ms;
    // The copy must hold what expected.json says, or nothing below means anything.
    const stored = moveTimes(stateDir, shift);
    const mismatch = [
      ...live.filter((m) => !stored.includes(m.id)).map((m) => `${who(m, m.id)}: no row in the fixture's state`),
      ...stored
        .filter((id, i) => stored.indexOf(id) !== i || !live.some((m) => m.id === id))
        .map(
          (id) =>
            `${who(
              all.find((m) => m.id === id),
              id,
            )}: a row it should not have`,
        ),
    ];
    expect(
      mismatch,
      "test/fixtures/upgrade-v4/state does not match its expected.json (both written together: see its README.md)",
    ).toEqual([]);
    service = await startDevService("upgrade", [], { stateDir });
    base = service.base;
  });

  afterAll(async () => {
    // By process group: wrangler and the workerd it runs (cli/wrangler/dev-server.mjs).
    await service?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it("still has the queue, its id and its pull consumer", async () => {
    const q = await api<{ queue_id: string; consumers: Array<{ type: string }> }>(`/${QUEUE}`);
    expect(q.status, q.text).toBe(200);
    expect(q.result.queue_id).toBe(fixture.queue.id);
    const c = await api<Array<{ type: string; settings: { max_retries: number } }>>(`/${QUEUE}/consumers`);
    expect(c.status, c.text).toBe(200);
    expect(c.result.map((x) => ({ type: x.type, max_retries: x.settings.max_retries }))).toEqual([
      { type: "http_pull", max_retries: fixture.queue.consumer.max_retries },
    ]);
  });

  it("counts the fixture's backlog: every message not acked, its bytes and its oldest timestamp", async () => {
    const m = await metrics();
    // A message lost or stored twice shows here first; the lookups and pulls below name it.
    expect(
      { count: m.backlog_count, bytes: m.backlog_bytes, oldest: m.oldest_message_timestamp_ms },
      "the queue's backlog",
    ).toEqual({
      count: live.length,
      bytes: sum(live),
      oldest: Math.min(...live.map((x) => x.timestamp_ms!)) + shift,
    });
  });

  it("answers a lookup of every message by id, in the state it was left in; acked ones stay gone", async () => {
    const problems: string[] = [];
    await inBatches(all, 16, async (m) => {
      const r = await api<Lookup>(`/${QUEUE}/messages/${m.id}`);
      if (m.at_test === "gone") {
        if (r.status !== 404) problems.push(`${who(m, m.id)}: lookup answered ${r.status}, not 404`);
        return;
      }
      if (r.status !== 200)
        return void problems.push(`${who(m, m.id)}: lookup answered ${r.status} ${r.text.slice(0, 200)}`);
      const l = r.result;
      const state = { deliver: "ready", delayed: "delayed", held: "leased" }[m.at_test];
      if (l.state !== state) problems.push(`${who(m, m.id)}: state ${l.state}, not ${state}`);
      if (l.content_type !== m.content_type)
        problems.push(`${who(m, m.id)}: content type ${l.content_type}, not ${m.content_type}`);
      if (l.size !== m.size) problems.push(`${who(m, m.id)}: size ${l.size}, not ${m.size}`);
      if (l.timestamp_ms !== m.timestamp_ms! + shift)
        problems.push(`${who(m, m.id)}: timestamp ${l.timestamp_ms}, not ${m.timestamp_ms! + shift}`);
      if (l.attempts < m.v4!.attempts)
        problems.push(`${who(m, m.id)}: attempts ${l.attempts}, fewer than the ${m.v4!.attempts} counted before`);
      // A delayed message, a scheduled retry or a held lease ends when it ended before.
      if (m.at_test !== "deliver" && l.visible_at_ms !== m.v4!.due_at! + shift)
        problems.push(`${who(m, m.id)}: visible at ${l.visible_at_ms}, not ${m.v4!.due_at! + shift}`);
    });
    expect(problems, `${problems.length} of ${all.length} lookups wrong`).toEqual([]);
  });

  it("delivers every message that is due exactly once through pulls, bodies, content types and timestamps intact, and nothing delayed, held or acked", async () => {
    const byId = new Map(all.map((m) => [m.id, m]));
    const deliveries = new Map<string, number>();
    const problems: string[] = [];
    const notAcked = new Set<string>();
    const deadline = Date.now() + 90_000;
    // Every pulled batch is acked at once under a lease far longer than the test: a second
    // delivery of an id whose ack counted is a duplicate.
    for (let empty = 0; empty < 2 && Date.now() < deadline;) {
      const r = await post<{ messages: Pulled[] }>(`/${QUEUE}/messages/pull`, {
        batch_size: 100,
        visibility_timeout_ms: 600_000,
      });
      expect(r.status, r.text).toBe(200);
      if (r.result.messages.length === 0) {
        empty++;
        await sleep(500);
        continue;
      }
      empty = 0;
      for (const p of r.result.messages) {
        const m = byId.get(p.id);
        const n = (deliveries.get(p.id) ?? 0) + 1;
        deliveries.set(p.id, n);
        if (n === 2)
          problems.push(
            `${who(m, p.id)}: delivered again ${notAcked.has(p.id) ? "(its first ack did not count, see above)" : "after its ack counted"}`,
          );
        if (!m || m.at_test !== "deliver") {
          if (n === 1) problems.push(`${who(m, p.id)}: delivered`);
          continue;
        }
        const ct = p.metadata["CF-Content-Type"];
        const bytes = ct === "text" ? new TextEncoder().encode(p.body) : Buffer.from(p.body, "base64");
        if (ct !== m.content_type) problems.push(`${who(m, p.id)}: content type ${ct}, not ${m.content_type}`);
        if (bytes.byteLength !== m.size || sha256(bytes) !== m.body_sha256)
          problems.push(`${who(m, p.id)}: body of ${bytes.byteLength} bytes differs from the ${m.size} stored`);
        if (p.timestamp_ms !== m.timestamp_ms! + shift)
          problems.push(`${who(m, p.id)}: timestamp ${p.timestamp_ms}, not ${m.timestamp_ms! + shift}`);
        if (p.attempts < m.min_attempts!)
          problems.push(
            `${who(m, p.id)}: attempts ${p.attempts}, below ${m.min_attempts} (the ${m.v4!.attempts} counted before, plus this delivery)`,
          );
      }
      const ack = await post<{ ackCount: number; warnings: Record<string, string> }>(`/${QUEUE}/messages/ack`, {
        acks: r.result.messages.map((p) => ({ lease_id: p.lease_id })),
      });
      expect(ack.status, ack.text).toBe(200);
      for (const p of r.result.messages) {
        const warning = ack.result.warnings[p.lease_id];
        if (warning !== undefined) {
          notAcked.add(p.id);
          problems.push(`${who(byId.get(p.id), p.id)}: its ack ${warning}`);
        }
      }
    }
    const missing = live.filter((m) => m.at_test === "deliver" && !deliveries.has(m.id));
    for (const m of missing) problems.push(`${who(m, m.id)}: never delivered`);
    const due = live.filter((m) => m.at_test === "deliver").length;
    expect(problems, `${deliveries.size} distinct ids delivered, ${due} due; ${missing.length} missing`).toEqual([]);
  });

  it("has only the delayed messages and the held leases left once the others are acked", async () => {
    const m = await metrics();
    expect(
      { count: m.backlog_count, bytes: m.backlog_bytes },
      `left: ${fixture.counts.at_test?.delayed ?? 0} delayed, ${fixture.counts.at_test?.held ?? 0} held`,
    ).toEqual({
      count: notDelivered.length,
      bytes: sum(notDelivered),
    });
    const states = await Promise.all(
      notDelivered.map(
        async (x) => [x.id, (await api<Lookup>(`/${QUEUE}/messages/${x.id}`)).result?.state ?? "not found"] as const,
      ),
    );
    expect(
      states.filter(
        ([id, s]) =>
          s !== { delayed: "delayed", held: "leased" }[all.find((x) => x.id === id)!.at_test as "delayed" | "held"],
      ),
    ).toEqual([]);
  });

  it("honours a lease held across the upgrade: the ack under its old lease id deletes the message", async () => {
    const held = live.filter((m) => m.at_test === "held");
    expect(held.length).toBeGreaterThan(0);
    const ack = await post<{ ackCount: number; warnings: Record<string, string> }>(`/${QUEUE}/messages/ack`, {
      acks: held.map((m) => ({ lease_id: m.lease_id })),
    });
    expect(ack.status, ack.text).toBe(200);
    expect(ack.result.warnings).toEqual({});
    expect(ack.result.ackCount).toBe(held.length);
    const m = await metrics();
    expect(m.backlog_count, "the backlog once the held leases are acked").toBe(notDelivered.length - held.length);
  });
});

/**
 * Moves every stored time of the v4 storage shards under `dir` forward by `shift` ms:
 * when messages arrived, fall due and were first sent, and when ids and moves were
 * remembered. Returns the ids of the message rows it moved.
 */
function moveTimes(dir: string, shift: number): string[] {
  const ids: string[] = [];
  for (const file of walk(join(dir, "v3", "do")).filter((f) => f.endsWith(".sqlite"))) {
    const db = new DatabaseSync(file);
    try {
      const tables = new Set(
        db
          .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
          .all()
          .map((r) => String(r.name)),
      );
      if (!tables.has("messages") || !tables.has("schema_version")) continue;
      const moved = db
        .prepare(
          "UPDATE messages SET enqueued_at = enqueued_at + ?, due_at = due_at + ?, sent_at = sent_at + ? RETURNING id",
        )
        .all(shift, shift, shift);
      ids.push(...moved.map((r) => String(r.id)));
      for (const t of ["remembered_ids", "remembered_moves"])
        if (tables.has(t)) db.prepare(`UPDATE ${t} SET at = at + ?`).run(shift);
    } finally {
      db.close();
    }
  }
  return ids;
}

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}

/** Runs `fn` over `items`, `n` at a time. */
async function inBatches<T>(items: T[], n: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let i = 0; i < items.length; i += n) await Promise.all(items.slice(i, i + n).map(fn));
}
