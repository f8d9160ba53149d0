/**
 * The security boundary: bearer tokens that are missing, malformed, wrong or
 * revoked (401); tokens with less scope than a route needs (403, on every route of the
 * table in broker/http/route-table.ts); and one account's token against another's queue,
 * message id or lease id (404 exactly like a missing one, or the warning any foreign lease
 * id gets).
 * Every refusal is a JSON error naming its field, and changes nothing.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { PUBLIC } from "../../broker/http/route";
import { ROUTES } from "../../broker/http/route-table";
import { api, backlog, BASE, createQueue, type Envelope, OTHER_TOKEN, queuePath, queuesPath, TOKEN } from "./helpers";

const SEND = "send-only-token";
const CONSUME = "consume-only-token";
const ADMIN = "admin-only-token";
const SEND_CONSUME = "send-consume-token";
const REVOKED = "revoked-token";
const GHOST_ID = "ffffffffffffffffffffffffffffffff";

describe("tokens that are missing, malformed, wrong or revoked: 401", () => {
  it.each([
    ["no Authorization header", null, undefined, "missing"],
    ["Basic credentials", null, { authorization: "Basic dXNlcjpwYXNz" }, "malformed"],
    ["an empty bearer", null, { authorization: "Bearer " }, "malformed"],
    ["two tokens", null, { authorization: `Bearer ${TOKEN} ${TOKEN}` }, "malformed"],
    [
      "a token with a tab inside",
      null,
      { authorization: `Bearer ${TOKEN.slice(0, 5)}\t${TOKEN.slice(5)}` },
      "malformed",
    ],
    ["a token in the wrong case", TOKEN.toUpperCase(), undefined, "invalid"],
    ["a token with one character more", `${TOKEN}x`, undefined, "invalid"],
    ["an unknown token", "not-a-token", undefined, "invalid"],
    ["a revoked token", REVOKED, undefined, "revoked"],
  ])("refuses %s, on every kind of route, storing nothing", async (_what, token, headers, why) => {
    const q = `auth-401-${Math.random().toString(16).slice(2, 8)}`;
    await createQueue(q);
    for (const [method, path, body] of [
      ["GET", queuesPath(), undefined],
      ["POST", `${queuePath(q)}/messages`, { body: 1 }],
      ["POST", `${queuePath(q)}/messages/batch`, { messages: [{ body: 1 }] }],
      ["POST", `${queuePath(q)}/messages/pull`, {}],
      ["POST", `${queuePath(q)}/purge`, { delete_messages_permanently: true }],
      ["DELETE", queuePath(q), undefined],
      ["GET", "/metrics", undefined],
      ["GET", "/no/such/route", undefined],
    ] as const) {
      const res = await api(method, path, body, { token, headers });
      expect(res.status, `${method} ${path}`).toBe(401);
      expect(res.json).toMatchObject({ success: false, result: null });
      expect(res.json.errors[0].field).toBe("authorization");
      expect(res.json.errors[0].message).toContain(why);
    }
    expect(await backlog(q)).toBe(0);
    expect((await api("GET", queuePath(q))).status).toBe(200);
  });
});

/** Like api(), for routes whose success is not JSON (GET /metrics answers in Prometheus' text format). */
async function call(
  method: string,
  path: string,
  body: unknown,
  token: string,
): Promise<{ status: number; json: Envelope | null }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await SELF.fetch(`${BASE}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.headers.get("content-type")?.includes("json")) {
    await res.text();
    return { status: res.status, json: null };
  }
  return { status: res.status, json: (await res.json()) as Envelope };
}

/** What a call of a route sends, by operation id, where it sends more than its path: a body, a query, or a queue that does not exist. */
type Sample = { body?: unknown; query?: string; ghost?: true };

function samples(q: string): Record<string, Sample> {
  return {
    createQueue: { body: { queue_name: `${q}-new` } },
    replaceQueue: { body: { settings: {} } },
    updateQueue: { body: { settings: {} } },
    // Destructive calls go to a queue that does not exist: allowed is a 404, refused a 403.
    deleteQueue: { ghost: true },
    peekMessages: { query: "?limit=5" },
    sendMessage: { body: { body: "one" } },
    sendBatch: { body: { messages: [{ body: "two" }] } },
    pullMessages: { body: { batch_size: 1 } },
    cancelPull: { body: { wait_id: "scopes-wait-000001" } },
    ackMessages: { body: { acks: [] } },
    extendLeases: { body: { lease_ids: ["x"], visibility_timeout_ms: 5000 } },
    peekMessagesCloudflare: { body: { batch_size: 1 } },
    purgePeekedMessages: { body: { refs: [{ ref: GHOST_ID }] } },
    purgeQueue: { body: { delete_messages_permanently: true }, ghost: true },
    redriveQueue: { body: {}, ghost: true },
    listHeldKeys: { ghost: true },
    releaseOrderingKey: { body: { ordering_key: "k", message_id: "0".repeat(32) }, ghost: true },
    createConsumer: { body: { type: "http_pull" } },
    // The queue's consumer is another: a 409 when allowed, nothing changed.
    replaceConsumer: { body: { type: "http_pull" } },
    updateConsumer: { body: { settings: {} } },
    createEventSubscription: { body: { name: "s" } },
    updateEventSubscription: { body: { enabled: false } },
  };
}

/**
 * Every route of the table (broker/http/route-table.ts) but the PUBLIC ones, in its order,
 * with the scopes it accepts and a call it would take: on queue `q`, every other id one that
 * does not exist. `status`, what a token allowed there is answered when it is not a success
 * (501 for what shardq does not serve).
 */
function routes(q: string): Array<{ method: string; path: string; body?: unknown; scopes: string[]; status?: number }> {
  const sample = samples(q);
  return ROUTES.flatMap((route) => {
    if (route.access === PUBLIC) return [];
    const { body, query = "", ghost } = sample[route.operationId] ?? {};
    const ids: Record<string, string> = { account_id: "local", queue: ghost ? "scopes-ghost" : q };
    const path = route.path.replace(/\{(\w+)\}/g, (_, name: string) => ids[name] ?? GHOST_ID) + query;
    return [
      {
        method: route.method,
        path,
        body,
        scopes: [...route.access],
        status: route.answer.kind === "unsupported" ? 501 : undefined,
      },
    ];
  });
}

describe("no token: 401 on every route but GET and HEAD /healthz and /openapi.json", () => {
  it("marks only GET and HEAD /healthz and /openapi.json PUBLIC, and has a body for every route that needs one", () => {
    const open = ROUTES.filter((r) => r.access === PUBLIC).map((r) => `${r.method} ${r.path}`);
    // The routes a request without a token reaches (test/workers/healthz.test.ts, openapi.test.ts).
    expect(open).toEqual(["GET /healthz", "HEAD /healthz", "GET /openapi.json", "HEAD /openapi.json"]);
    const sample = samples("scopes-table");
    for (const route of ROUTES.filter((r) => r.body?.required)) {
      expect(
        sample[route.operationId]?.body,
        `${route.method} ${route.path} needs a body: add one to samples()`,
      ).toBeDefined();
    }
    for (const id of Object.keys(sample))
      expect(
        ROUTES.map((r) => r.operationId),
        `samples() names ${id}`,
      ).toContain(id);
  });

  it("refuses a request without a token on every other route, storing nothing", async () => {
    const q = `scopes-none-${Math.random().toString(16).slice(2, 8)}`;
    await createQueue(q);
    for (const r of routes(q)) {
      const res = await api(r.method, r.path, r.body, { token: null });
      expect(res.status, `${r.method} ${r.path}`).toBe(401);
      expect(res.json).toMatchObject({ success: false, result: null });
      expect(res.json.errors[0].field).toBe("authorization");
    }
    expect(await backlog(q)).toBe(0);
    expect((await api("GET", queuePath(`${q}-new`))).status).toBe(404);
  });
});

describe("tokens with less scope: 403 on every route they must not reach", () => {
  it.each([
    ["send", SEND, ["send"]],
    ["consume", CONSUME, ["consume"]],
    ["admin", ADMIN, ["admin"]],
    ["send and consume", SEND_CONSUME, ["send", "consume"]],
    ["no scopes listed (all of them)", TOKEN, ["send", "consume", "admin"]],
  ])("a token with %s reaches exactly the routes the table gives it", async (_what, token, held) => {
    const q = `scopes-${held.join("-")}-${Math.random().toString(16).slice(2, 8)}`;
    await createQueue(q);
    expect((await api("POST", `${queuePath(q)}/consumers`, { type: "http_pull" })).status).toBe(201);
    let sent = 0;
    for (const r of routes(q)) {
      const res = await call(r.method, r.path, r.body, token);
      const allowed = r.scopes.some((s) => held.includes(s));
      if (allowed) {
        expect([401, 403], `${r.method} ${r.path}`).not.toContain(res.status);
        if (r.status !== undefined) expect(res.status, `${r.method} ${r.path}`).toBe(r.status);
        else expect(res.status, `${r.method} ${r.path}`).toBeLessThan(500);
        if (r.scopes.includes("send") && r.method === "POST") sent += 1;
      } else {
        expect(res.status, `${r.method} ${r.path}`).toBe(403);
        expect(res.json).toMatchObject({ success: false, result: null });
        expect(res.json!.errors[0].field).toBe("authorization");
        expect(res.json!.errors[0].message).toContain(
          r.scopes.length === 1 ? `"${r.scopes[0]}" scope` : "one of the scopes",
        );
      }
    }
    // Refused sends stored nothing; refused admin calls changed nothing.
    expect(await backlog(q)).toBe(sent);
    expect((await api("GET", queuePath(`${q}-new`))).status).toBe(held.includes("admin") ? 200 : 404);
    expect((await api("GET", `${queuePath(q)}/consumers`)).json.result).toHaveLength(1);
  });

  it("answers a token lacking scope the same whether the queue exists or not, and before the account check", async () => {
    await createQueue("scopes-exists");
    const there = await api("DELETE", queuePath("scopes-exists"), undefined, { token: SEND });
    const nowhere = await api("DELETE", queuePath("scopes-never-made"), undefined, { token: SEND });
    const theirs = await api("DELETE", queuePath("scopes-exists", "other"), undefined, { token: SEND });
    for (const res of [there, nowhere, theirs]) {
      expect(res.status).toBe(403);
      expect(res.json.errors[0].code).toBe(there.json.errors[0].code);
    }
    expect((await api("GET", queuePath("scopes-exists"))).status).toBe(200);
  });

  it("keeps a revoked token out even where its scopes would reach", async () => {
    await createQueue("scopes-revoked");
    const res = await api("POST", `${queuePath("scopes-revoked")}/messages`, { body: 1 }, { token: REVOKED });
    expect(res.status).toBe(401);
    expect(res.json.errors[0].message).toContain("revoked");
    expect(await backlog("scopes-revoked")).toBe(0);
  });
});

describe("one account's token against another's queue, message id or lease id: 404, nothing disclosed", () => {
  /** The answer for something that does not exist, with the reference it echoes taken out. */
  const shape = (
    res: { status: number; json: { errors: Array<{ code: number; field?: string; message: string }> } },
    ref: string,
  ) => ({
    status: res.status,
    code: res.json.errors[0]!.code,
    field: res.json.errors[0]!.field,
    message: res.json.errors[0]!.message.replace(ref, "<ref>"),
  });

  it("answers another account's queue, by name or by id, on every route, as it answers a missing one", async () => {
    const theirs = await api("POST", queuesPath("other"), { queue_name: "iso-theirs" }, { token: OTHER_TOKEN });
    expect(theirs.status).toBe(201);
    const theirId = theirs.json.result.queue_id as string;
    await api("POST", `${queuePath("iso-theirs", "other")}/consumers`, { type: "http_pull" }, { token: OTHER_TOKEN });
    await api("POST", `${queuePath("iso-theirs", "other")}/messages`, { body: "secret" }, { token: OTHER_TOKEN });

    for (const [ref, missing] of [
      ["iso-theirs", "iso-never-made"],
      [theirId, GHOST_ID],
    ] as const) {
      for (const r of routes(ref).filter((x) => x.path.startsWith(queuePath(ref)))) {
        // With my own account in the path: their queue is no queue of mine.
        const mine = await api(r.method, r.path, r.body);
        const none = await api(r.method, r.path.replace(queuePath(ref), queuePath(missing)), r.body);
        expect(shape(mine, ref), `${r.method} ${r.path}`).toEqual(shape(none, missing));
        expect(mine.status).toBeLessThan(500);
        // With their account in the path: not my account.
        const cross = await api(r.method, r.path.replace(queuePath(ref), queuePath(ref, "other")), r.body);
        expect(cross.status, `${r.method} ${r.path} on /accounts/other`).toBe(404);
        expect(cross.json.errors[0].field).toBe("account_id");
      }
    }
    // Their queue kept its message and its consumer.
    const metrics = await api("GET", `${queuePath("iso-theirs", "other")}/metrics`, undefined, { token: OTHER_TOKEN });
    expect(metrics.json.result.backlog_count).toBe(1);
    expect(
      (await api("GET", `${queuePath("iso-theirs", "other")}/consumers`, undefined, { token: OTHER_TOKEN })).json
        .result,
    ).toHaveLength(1);
  });

  it("answers another account's message id as a message that does not exist, and cannot cancel it", async () => {
    // Both accounts have a queue of this name; only theirs holds the message.
    await createQueue("iso-msg");
    expect((await api("POST", queuesPath("other"), { queue_name: "iso-msg" }, { token: OTHER_TOKEN })).status).toBe(
      201,
    );
    const id = (
      await api("POST", `${queuePath("iso-msg", "other")}/messages`, { body: "theirs" }, { token: OTHER_TOKEN })
    ).json.result.message_id as string;
    const found = await api("GET", `${queuePath("iso-msg")}/messages/${id}`);
    const ghost = await api("GET", `${queuePath("iso-msg")}/messages/${GHOST_ID}`);
    expect(found.status).toBe(404);
    expect(shape(found, id)).toEqual(shape(ghost, GHOST_ID));
    const cancel = await api("DELETE", `${queuePath("iso-msg")}/messages/${id}`);
    expect(shape(cancel, id)).toEqual(
      shape(await api("DELETE", `${queuePath("iso-msg")}/messages/${GHOST_ID}`), GHOST_ID),
    );
    expect((await api("GET", `${queuePath("iso-msg", "other")}/messages/${id}`)).status).toBe(404);
    expect(
      (await api("GET", `${queuePath("iso-msg", "other")}/messages/${id}`, undefined, { token: OTHER_TOKEN })).json
        .result.state,
    ).toBe("ready");
  });

  it("gives another account's lease id the warning a lease of another queue gets, acking and extending nothing", async () => {
    for (const [account, token] of [
      ["local", TOKEN],
      ["other", OTHER_TOKEN],
    ] as const) {
      if (account === "local") await createQueue("iso-lease");
      else expect((await api("POST", queuesPath(account), { queue_name: "iso-lease" }, { token })).status).toBe(201);
      expect(
        (await api("POST", `${queuePath("iso-lease", account)}/consumers`, { type: "http_pull" }, { token })).status,
      ).toBe(201);
      await api("POST", `${queuePath("iso-lease", account)}/messages`, { body: account }, { token });
    }
    await createQueue("iso-lease-sibling");
    await api("POST", `${queuePath("iso-lease-sibling")}/consumers`, { type: "http_pull" });
    await api("POST", `${queuePath("iso-lease-sibling")}/messages`, { body: "sibling" });
    const pullOne = async (q: string, account: string, token: string) =>
      (await api("POST", `${queuePath(q, account)}/messages/pull`, { batch_size: 1 }, { token })).json.result
        .messages[0].lease_id as string;
    const theirs = await pullOne("iso-lease", "other", OTHER_TOKEN);
    const sibling = await pullOne("iso-lease-sibling", "local", TOKEN);

    const acked = await api("POST", `${queuePath("iso-lease")}/messages/ack`, {
      acks: [{ lease_id: theirs }, { lease_id: sibling }],
    });
    expect(acked.status).toBe(200);
    expect(acked.json.result.ackCount).toBe(0);
    // Word for word what a lease of my own other queue gets: nothing says "another account".
    expect(acked.json.result.warnings[theirs]).toBe(acked.json.result.warnings[sibling]);
    const extended = await api("POST", `${queuePath("iso-lease")}/messages/extend`, {
      lease_ids: [theirs],
      visibility_timeout_ms: 60_000,
    });
    expect(extended.json.result.extended).toBe(0);
    // Through their account's path: 404, before any lease is looked at.
    const cross = await api("POST", `${queuePath("iso-lease", "other")}/messages/ack`, {
      acks: [{ lease_id: theirs }],
    });
    expect(cross.status).toBe(404);
    expect(cross.json.errors[0].field).toBe("account_id");
    // Their message is still theirs, still leased: their own ack works.
    const own = await api(
      "POST",
      `${queuePath("iso-lease", "other")}/messages/ack`,
      { acks: [{ lease_id: theirs }] },
      { token: OTHER_TOKEN },
    );
    expect(own.json.result.ackCount).toBe(1);
  });

  it("lets two accounts have queues of the same name, each its own, and lists only the token's", async () => {
    await createQueue("iso-shared-name");
    expect(
      (await api("POST", queuesPath("other"), { queue_name: "iso-shared-name" }, { token: OTHER_TOKEN })).status,
    ).toBe(201);
    await api("POST", `${queuePath("iso-shared-name", "other")}/messages`, { body: "theirs" }, { token: OTHER_TOKEN });
    expect(await backlog("iso-shared-name")).toBe(0);
    const list = await api("GET", `${queuesPath("other")}?per_page=100`, undefined, { token: OTHER_TOKEN });
    const mine = await api("GET", `${queuesPath()}?per_page=100`);
    const ids = (r: typeof list) => new Set(r.json.result.map((x: { queue_id: string }) => x.queue_id));
    for (const id of ids(list)) expect(ids(mine).has(id)).toBe(false);
  });
});
