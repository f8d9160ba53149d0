// Upgrade in place from the schema of 381a549: that commit's own code, taken from git at test
// time and started as its `npm start` started it, writes a state directory with messages in
// every state a consumer can leave them in, keyed and not; today's code then starts on that
// directory and must find each one as it was, losing and duplicating nothing. Built fresh each
// run, so no stored time ages out as a committed fixture's does (test/e2e/upgrade.test.ts).
//
// 381a549 held an unkeyed message's lease in memory only (a key's lease was in its lane's row):
// a restart of that code itself made the message ready again, its lapsed or running lease
// uncounted. Those messages are expected ready after the upgrade, as after any restart of the
// old code; what the old code wrote to disk must all be there.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT } from "../../cli/wrangler/dev-server.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";
import type { Lookup } from "./message-lookup.js";
import { sleep } from "../../src/kernel/sleep.ts";
import { HEADERS as headers } from "./helpers.ts";

const OLD = "381a549";
const QUEUE = "upgrade-381a549";
const MAX_RETRIES = 5;
const HOUR_S = 3600;
const LONG_LEASE_MS = 12 * 3600_000;
const SHORT_LEASE_MS = 1000;

/** What a message must be once today's code runs: pulled; delayed; leased still; behind its key's held head; acked before. */
type After = "deliver" | "delayed" | "held" | "blocked" | "gone";
interface Planned {
  name: string;
  body: unknown;
  content_type: "json" | "text";
  key?: string;
  delay_seconds?: number;
  after: After;
  /** 381a549 held this message's lease in memory only, so a restart forgets it (see the top). */
  memoryLease?: boolean;
  /** Under a key's lease that ran out: a lookup shows it leased and uncounted until the lane is leased again, which counts that delivery. */
  lapsedKeyLease?: boolean;
  /** The old code's lookup state, where it is not the one `after` implies. */
  leftAs?: string;
  id?: string;
  lease_id?: string;
  /** Its lookup by the old code just before it stopped. */
  old?: Lookup;
}
interface Pulled {
  id: string;
  body: string;
  attempts: number;
  lease_id: string;
  metadata: Record<string, string>;
  ordering_key?: string;
}
type Answer<T> = { status: number; result: T; text: string };

const client = (base: () => string) => {
  const call = async <T>(path: string, init: RequestInit = {}): Promise<Answer<T>> => {
    const res = await fetch(`${base()}/accounts/local/queues${path}`, {
      ...init,
      headers,
      signal: AbortSignal.timeout(30_000),
    });
    const text = await res.text();
    let result = null as T;
    try {
      result = (JSON.parse(text) as { result: T }).result;
    } catch {}
    return { status: res.status, result, text };
  };
  return {
    get: <T>(path: string) => call<T>(path),
    post: <T>(path: string, body: unknown) => call<T>(path, { method: "POST", body: JSON.stringify(body) }),
  };
};

const plan: Planned[] = [];
const add = (name: string, after: After, body: unknown, more: Partial<Planned> = {}) => {
  const p: Planned = { name, after, body, content_type: "json", ...more };
  plan.push(p);
  return p;
};
/** A key's messages `from` to `to - 1`, its order theirs. */
const keyed = (
  key: string,
  from: number,
  to: number,
  after: (i: number) => After,
  more: (i: number) => Partial<Planned> = () => ({}),
) =>
  Array.from({ length: to - from }, (_, j) => from + j).map((i) =>
    add(`${key}#${i}`, after(i), { key, i }, { key, ...more(i) }),
  );

// Taken from the queue by the old code before anything else is sent, so its pulls lease only these.
const leasedFirst = [
  add("acked", "gone", { acked: true }),
  add("retried, due again", "deliver", "retry me now", { content_type: "text" }),
  add("retry scheduled in an hour", "delayed", { retry: HOUR_S }),
  add("leased for 12 h", "deliver", { lease: "12h" }, { memoryLease: true, leftAs: "leased" }),
  ...keyed("k-held", 0, 1, () => "held"),
  ...keyed("k-retried-now", 0, 1, () => "deliver"),
  ...keyed("k-retried-later", 0, 1, () => "delayed"),
  ...keyed("k-acked", 0, 1, () => "gone"),
];
const lapsing = [
  add("lease ran out", "deliver", "lapsed lease", { content_type: "text", memoryLease: true }),
  ...keyed(
    "k-lapsed",
    0,
    1,
    () => "deliver",
    () => ({ leftAs: "leased", lapsedKeyLease: true }),
  ),
];
const singles = [
  add("ready json object", "deliver", { hello: "world", n: [1, 2, 3] }),
  add("ready text", "deliver", "plain text, ünïcödé", { content_type: "text" }),
  add("ready json string", "deliver", "a json string"),
  add("ready json number", "deliver", 42),
  add("ready empty text", "deliver", "", { content_type: "text" }),
  add("delayed an hour", "delayed", { delayed: true }, { delay_seconds: HOUR_S }),
];
const batch = [
  ...Array.from({ length: 8 }, (_, i) =>
    add(`batch #${i}`, "deliver", i % 2 ? `batch text ${i}` : { batch: i }, { content_type: i % 2 ? "text" : "json" }),
  ),
  add("batch, delayed an hour", "delayed", { batch: "delayed" }, { delay_seconds: HOUR_S }),
];
// Each key's messages after its head, and whole keys, in the order each key must keep.
const followers = [
  ...keyed("k-held", 1, 3, () => "blocked"),
  ...keyed("k-retried-now", 1, 3, () => "deliver"),
  ...keyed("k-retried-later", 1, 3, () => "blocked"),
  ...keyed("k-acked", 1, 3, () => "deliver"),
  ...keyed("k-lapsed", 1, 3, () => "deliver"),
  ...keyed(
    "k-delayed",
    0,
    3,
    (i) => (i === 0 ? "delayed" : "blocked"),
    (i) => (i === 0 ? { delay_seconds: HOUR_S } : {}),
  ),
  ...keyed("k-plain-a", 0, 4, () => "deliver"),
];
// Sent one by one, each awaited: a key's order across single sends.
const keyedSingles = keyed("k-plain-b", 0, 3, () => "deliver");

const named = (p: Planned | undefined, id: string) =>
  p ? `"${p.name}" ${id} (left ${p.old?.state ?? "?"}, must be ${p.after})` : `${id} (not sent by the test)`;
const toWire = (p: Planned) => ({
  body: p.body,
  content_type: p.content_type,
  ...(p.key ? { ordering_key: p.key } : {}),
  ...(p.delay_seconds ? { delay_seconds: p.delay_seconds } : {}),
});
const bodyOf = (m: Pulled) =>
  m.metadata["CF-Content-Type"] === "text" ? m.body : JSON.parse(Buffer.from(m.body, "base64").toString("utf8"));

describe(`upgrade in place from the state ${OLD} wrote`, () => {
  const oldTree = mkdtempSync(join(tmpdir(), "shardq-e2e-old-tree-"));
  const stateDir = mkdtempSync(join(tmpdir(), "shardq-e2e-upgrade-381a549-state-"));
  let oldService: DevService | undefined;
  let service: DevService | undefined;
  let base = "";
  const api = client(() => base);
  const byId = new Map<string, Planned>();
  const live = () => plan.filter((p) => p.after !== "gone");
  let queueId = "";

  /** Pulls until every one of `want` came, with no other; gives their pulls' answers by id. */
  const pullExactly = async (want: Planned[], visibility_timeout_ms: number) => {
    const got = new Map<string, Pulled>();
    for (const until = Date.now() + 20_000; got.size < want.length && Date.now() < until;) {
      const r = await api.post<{ messages: Pulled[] }>(`/${QUEUE}/messages/pull`, {
        batch_size: 100,
        visibility_timeout_ms,
      });
      expect(r.status, r.text).toBe(200);
      for (const m of r.result.messages) {
        expect(
          want.map((p) => p.id),
          `the old code handed out ${named(byId.get(m.id), m.id)}`,
        ).toContain(m.id);
        got.set(m.id, m);
      }
      if (r.result.messages.length === 0) await sleep(200);
    }
    expect([...got.keys()].sort(), "the old code's pulls").toEqual(want.map((p) => p.id).sort());
    for (const p of want) p.lease_id = got.get(p.id!)!.lease_id;
  };

  const sendBatch = async (ms: Planned[]) => {
    const r = await api.post<{ message_ids: string[] }>(`/${QUEUE}/messages/batch`, { messages: ms.map(toWire) });
    expect(r.status, r.text).toBe(200);
    ms.forEach((p, i) => byId.set((p.id = r.result.message_ids[i]!), p));
  };
  const sendOne = async (p: Planned) => {
    const r = await api.post<{ message_id: string }>(`/${QUEUE}/messages`, toWire(p));
    expect(r.status, r.text).toBe(200);
    byId.set((p.id = r.result.message_id), p);
  };

  /** The old code, its state built through its own API, then stopped. */
  const writeOldState = async () => {
    const created = await api.post<{ queue_id: string }>(``, { queue_name: QUEUE });
    expect(created.status, created.text).toBe(201);
    queueId = created.result.queue_id;
    const consumer = await api.post(`/${QUEUE}/consumers`, {
      type: "http_pull",
      settings: { max_retries: MAX_RETRIES },
    });
    expect(consumer.status, consumer.text).toBeLessThan(300);

    await sendBatch(leasedFirst);
    await pullExactly(leasedFirst, LONG_LEASE_MS);
    await sendBatch(lapsing);
    await pullExactly(lapsing, SHORT_LEASE_MS);
    const lapsedAt = Date.now() + SHORT_LEASE_MS;
    const lease = (name: string) => leasedFirst.find((p) => p.name === name)!.lease_id!;
    const settled = await api.post<{ ackCount: number; retryCount: number; warnings: Record<string, string> }>(
      `/${QUEUE}/messages/ack`,
      {
        acks: ["acked", "k-acked#0"].map((n) => ({ lease_id: lease(n) })),
        retries: [
          ...["retried, due again", "k-retried-now#0"].map((n) => ({ lease_id: lease(n), delay_seconds: 0 })),
          ...["retry scheduled in an hour", "k-retried-later#0"].map((n) => ({
            lease_id: lease(n),
            delay_seconds: HOUR_S,
          })),
        ],
      },
    );
    expect(settled.status, settled.text).toBe(200);
    expect(settled.result.warnings, "the old code's acks and retries").toEqual({});

    for (const p of singles) await sendOne(p);
    await sendBatch(batch);
    await sendBatch(followers);
    for (const p of keyedSingles) await sendOne(p);
    await sleep(Math.max(0, lapsedAt + 500 - Date.now()));

    await Promise.all(
      plan.map(async (p) => {
        const r = await api.get<Lookup>(`/${QUEUE}/messages/${p.id}`);
        expect(r.status, `the old code's lookup of ${named(p, p.id!)}: ${r.text}`).toBe(p.after === "gone" ? 404 : 200);
        if (r.status === 200) p.old = r.result;
      }),
    );
    // The states the test means to carry across, as the old code itself reports them.
    const oldState = (p: Planned) =>
      p.leftAs ?? (p.after === "delayed" ? "delayed" : p.after === "held" ? "leased" : "ready");
    const unlike = live().filter((p) => p.old?.state !== oldState(p));
    expect(
      unlike.map((p) => `${named(p, p.id!)}: the old code says ${p.old?.state}`),
      "the state the old code was left in",
    ).toEqual([]);
  };

  beforeAll(async () => {
    try {
      execFileSync("git", ["-C", ROOT, "cat-file", "-e", `${OLD}^{commit}`], { stdio: "ignore" });
    } catch {
      throw new Error(
        `this test builds the state of commit ${OLD} from git: it needs a git clone of shardq with its history (not a shallow clone or a source archive); try \`git fetch --unshallow\``,
      );
    }
    execFileSync("tar", ["-x", "-C", oldTree], {
      input: execFileSync("git", ["-C", ROOT, "archive", OLD], { maxBuffer: 1 << 30 }),
    });
    // package.json and its lock are the same at both commits, so today's modules run the old code.
    symlinkSync(join(ROOT, "node_modules"), join(oldTree, "node_modules"), "dir");
    expect(
      existsSync(join(oldTree, ".dev.vars")),
      `${OLD} carries its .dev.vars (the token and the lease signing key)`,
    ).toBe(true);
    const old = (await import(pathToFileURL(join(oldTree, "test", "e2e", "dev-service.mjs")).href)) as {
      startDevService: typeof startDevService;
    };
    oldService = await old.startDevService("upgrade-381a549-old", [], { stateDir });
    base = oldService.base;
    await writeOldState();
    // By process group, as its own helpers stop it: wrangler and its workerd.
    await oldService.stop();
    oldService = undefined;
    service = await startDevService("upgrade-381a549", [], { stateDir });
    base = service.base;
  }, 150_000);

  afterAll(async () => {
    await oldService?.stop();
    await service?.stop();
    rmSync(stateDir, { recursive: true, force: true });
    rmSync(oldTree, { recursive: true, force: true });
  });

  it("still has the queue and its pull consumer", async () => {
    const q = await api.get<{ queue_id: string }>(`/${QUEUE}`);
    expect(q.status, q.text).toBe(200);
    expect(q.result.queue_id, "the queue's id").toBe(queueId);
    const c = await api.get<Array<{ type: string; settings: { max_retries: number } }>>(`/${QUEUE}/consumers`);
    expect(c.status, c.text).toBe(200);
    expect(c.result.map((x) => ({ type: x.type, max_retries: x.settings.max_retries }))).toEqual([
      { type: "http_pull", max_retries: MAX_RETRIES },
    ]);
  });

  it("counts every message not acked in the backlog", async () => {
    const m = await api.get<{ backlog_count: number; backlog_bytes: number }>(`/${QUEUE}/metrics`);
    expect(m.status, m.text).toBe(200);
    expect({ count: m.result.backlog_count, bytes: m.result.backlog_bytes }, "the queue's backlog").toEqual({
      count: live().length,
      bytes: live().reduce((n, p) => n + p.old!.size, 0),
    });
  });

  it("answers a lookup of every message in the state it was left in; acked ones stay gone", async () => {
    const problems: string[] = [];
    await Promise.all(
      plan.map(async (p) => {
        const r = await api.get<Lookup>(`/${QUEUE}/messages/${p.id}`);
        if (p.after === "gone")
          return void (r.status !== 404 && problems.push(`${named(p, p.id!)}: lookup answered ${r.status}, not 404`));
        if (r.status !== 200)
          return void problems.push(`${named(p, p.id!)}: lookup answered ${r.status} ${r.text.slice(0, 200)}`);
        const o = p.old!;
        // What the old code's memory added to its lookup (a lease, the delivery it counts) a restart
        // forgets. A key's lease that ran out showed leased in the old code until the key was leased
        // again; today's shows it as it is, ready with that delivery counted.
        // A key's running lease: the old code's lookup counted its delivery only once the lease ran
        // out; today's counts the delivery under way, as for a message without a key.
        const was = p.memoryLease
          ? { ...o, state: "ready", attempts: o.attempts - 1 }
          : p.lapsedKeyLease
            ? { ...o, state: "ready", attempts: o.attempts + 1 }
            : p.key !== undefined && p.after === "held"
              ? { ...o, attempts: o.attempts + 1 }
              : o;
        const { visible_at_ms: _v, ...now } = r.result;
        const { visible_at_ms: _w, ...then } = was;
        const fields = Object.keys(then) as Array<keyof typeof then>;
        for (const f of fields)
          if (now[f] !== then[f]) problems.push(`${named(p, p.id!)}: ${f} ${now[f]}, was ${then[f]}`);
        if ((p.after === "delayed" || p.after === "held") && r.result.visible_at_ms !== o.visible_at_ms)
          problems.push(`${named(p, p.id!)}: visible at ${r.result.visible_at_ms}, was ${o.visible_at_ms}`);
      }),
    );
    expect(problems, `${problems.length} of ${plan.length} lookups wrong`).toEqual([]);
  });

  it("delivers every ready message once, bodies and attempts intact, each key in its order, and nothing delayed, leased or held back", async () => {
    const backlog = async () => (await api.get<{ backlog_count: number }>(`/${QUEUE}/metrics`)).result.backlog_count;
    const before = await backlog();
    const order: string[] = [];
    const problems: string[] = [];
    let acked = 0;
    // Each batch acked at once: a key's next messages come once its batch is settled, and an
    // id pulled again after its ack counted is a duplicate.
    for (let empty = 0, until = Date.now() + 40_000; empty < 3 && Date.now() < until;) {
      const r = await api.post<{ messages: Pulled[] }>(`/${QUEUE}/messages/pull`, {
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
      for (const m of r.result.messages) {
        const p = byId.get(m.id);
        if (order.includes(m.id)) problems.push(`${named(p, m.id)}: delivered twice`);
        order.push(m.id);
        if (!p || p.after !== "deliver") {
          problems.push(`${named(p, m.id)}: delivered`);
          continue;
        }
        if (m.metadata["CF-Content-Type"] !== p.content_type)
          problems.push(`${named(p, m.id)}: content type ${m.metadata["CF-Content-Type"]}`);
        if (JSON.stringify(bodyOf(m)) !== JSON.stringify(p.body))
          problems.push(`${named(p, m.id)}: body ${m.body}, not ${JSON.stringify(p.body)}`);
        const attempts = p.old!.attempts - (p.memoryLease ? 1 : 0) + (p.lapsedKeyLease ? 1 : 0) + 1;
        if (m.attempts !== attempts) problems.push(`${named(p, m.id)}: attempts ${m.attempts}, not ${attempts}`);
        if (m.ordering_key !== p.key) problems.push(`${named(p, m.id)}: ordering key ${m.ordering_key}, not ${p.key}`);
      }
      const ack = await api.post<{ ackCount: number; warnings: Record<string, string> }>(`/${QUEUE}/messages/ack`, {
        acks: r.result.messages.map((m) => ({ lease_id: m.lease_id })),
      });
      expect(ack.status, ack.text).toBe(200);
      for (const m of r.result.messages) {
        const warning = ack.result.warnings[m.lease_id];
        if (warning !== undefined) problems.push(`${named(byId.get(m.id), m.id)}: its ack ${warning}`);
      }
      acked += ack.result.ackCount;
    }
    for (const p of plan.filter((x) => x.after === "deliver" && !order.includes(x.id!)))
      problems.push(`${named(p, p.id!)}: never delivered`);
    for (const key of new Set(plan.map((p) => p.key).filter((k) => k !== undefined))) {
      const came = order.filter((id) => byId.get(id)?.key === key).map((id) => byId.get(id)!.name);
      const due = plan.filter((p) => p.key === key && p.after === "deliver").map((p) => p.name);
      if (JSON.stringify(came) !== JSON.stringify(due))
        problems.push(`key ${key}: delivered ${JSON.stringify(came)}, must be ${JSON.stringify(due)}`);
    }
    expect(
      problems,
      `${new Set(order).size} distinct ids delivered, ${plan.filter((p) => p.after === "deliver").length} due`,
    ).toEqual([]);
    expect(acked, "acks that counted").toBe(order.length);
    const left = live().filter((p) => p.after !== "deliver").length;
    expect({ before, after: await backlog() }, "the backlog before the pulls and once every delivery is acked").toEqual(
      { before: live().length, after: left },
    );
  }, 90_000);

  it("honours a key's lease held across the upgrade: its ack lets the key go on, in order", async () => {
    const head = plan.find((p) => p.name === "k-held#0")!;
    const ack = await api.post<{ ackCount: number; warnings: Record<string, string> }>(`/${QUEUE}/messages/ack`, {
      acks: [{ lease_id: head.lease_id }],
    });
    expect(ack.status, ack.text).toBe(200);
    expect(
      { count: ack.result.ackCount, warnings: ack.result.warnings },
      `the ack of ${named(head, head.id!)} under its lease from before`,
    ).toEqual({ count: 1, warnings: {} });
    const rest = plan.filter((p) => p.key === head.key && p !== head);
    const came: string[] = [];
    for (const until = Date.now() + 15_000; came.length < rest.length && Date.now() < until; await sleep(200)) {
      const r = await api.post<{ messages: Pulled[] }>(`/${QUEUE}/messages/pull`, {
        batch_size: 100,
        visibility_timeout_ms: 600_000,
      });
      expect(r.status, r.text).toBe(200);
      came.push(...r.result.messages.map((m) => byId.get(m.id)?.name ?? m.id));
    }
    expect(came, "what the pulls give once the head is acked").toEqual(rest.map((p) => p.name));
  }, 30_000);
});
