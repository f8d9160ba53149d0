// Listing an account's queues when it holds hundreds: pages in name order, a name-prefix
// filter, Cloudflare's result_info, answered from the catalog without waking Coordinators.
import { env, runInDurableObject } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { catalogFor, coordinatorFor } from "../../src/kernel/addressing";
import { AccountCatalog } from "../../coordinator/account-catalog";
import { ACCOUNT, api, createQueue, queuePath, queuesPath } from "./helpers";

const PREFIXES = ["alpha", "beta", "delta", "gamma", "omega"];
/** 250 names, 50 per prefix: alpha-000, beta-001, ... */
const SEEDED = Array.from({ length: 250 }, (_, i) => `${PREFIXES[i % 5]}-${String(i).padStart(3, "0")}`);

type Listed = {
  queue_id: string;
  queue_name: string;
  consumers_total_count: number;
  consumers: Array<{ type: string; consumer_id: string }>;
  settings: { delivery_paused: boolean };
};
const names = (r: { json: { result: Listed[] } }) => r.json.result.map((q) => q.queue_name);
const list = (query: string) => api<Listed[]>("GET", `${queuesPath()}?${query}`);

/**
 * Catalog rows written directly, each with the description a create stores: 250 queues
 * without 250 Coordinators. A listing that asked a Coordinator would find none and drop
 * the queue from its page.
 */
async function seed(): Promise<void> {
  await runInDurableObject(catalogFor(env, ACCOUNT), (_obj, state) => {
    for (const [i, name] of SEEDED.entries()) {
      const id = i.toString(16).padStart(32, "0");
      const info = {
        queue_id: id,
        queue_name: name,
        created_on: new Date(0).toISOString(),
        modified_on: new Date(0).toISOString(),
        producers_total_count: 0,
        producers: [],
        consumers_total_count: 0,
        consumers: [],
        settings: { delivery_delay: 0, delivery_paused: false, message_retention_period: 345600 },
      };
      state.storage.sql.exec(
        "INSERT INTO queues (queue_name, queue_id, state, created_at, info) VALUES (?, ?, 'active', 0, ?)",
        name,
        id,
        JSON.stringify(info),
      );
    }
    state.storage.sql.exec("UPDATE totals SET active = active + ?", SEEDED.length);
  });
}

describe("listing 250 queues", () => {
  beforeAll(seed);

  it("answers 20 by name on page 1 when asked nothing, with Cloudflare's result_info", async () => {
    const res = await list("");
    expect(res.status).toBe(200);
    expect(names(res)).toEqual([...SEEDED].sort().slice(0, 20));
    expect(res.json.result_info).toEqual({ page: 1, per_page: 20, count: 20, total_count: 250, total_pages: 13 });
  });

  it("pages through every queue once, in name order, and answers an empty page past the last", async () => {
    const seen: string[] = [];
    for (let page = 1; page <= 3; page++) {
      const res = await list(`page=${page}&per_page=100`);
      expect(res.json.result_info).toEqual({
        page,
        per_page: 100,
        count: page < 3 ? 100 : 50,
        total_count: 250,
        total_pages: 3,
      });
      seen.push(...names(res));
    }
    expect(seen).toEqual([...SEEDED].sort());
    const past = await list("page=4&per_page=100");
    expect(past.status).toBe(200);
    expect(past.json.result).toEqual([]);
    expect(past.json.result_info).toEqual({ page: 4, per_page: 100, count: 0, total_count: 250, total_pages: 3 });
  });

  it("keeps to the names that start with name_prefix, paged, counting only those", async () => {
    const beta = SEEDED.filter((n) => n.startsWith("beta")).sort();
    const first = await list("name_prefix=beta&per_page=20");
    expect(names(first)).toEqual(beta.slice(0, 20));
    expect(first.json.result_info).toEqual({ page: 1, per_page: 20, count: 20, total_count: 50, total_pages: 3 });
    const last = await list("name_prefix=beta&per_page=20&page=3");
    expect(names(last)).toEqual(beta.slice(40));
    // A longer prefix narrows; the next name after it (gamma-1 vs gamma-2) is not let in.
    const narrow = await list("name_prefix=gamma-1&per_page=100");
    expect(names(narrow)).toEqual(SEEDED.filter((n) => n.startsWith("gamma-1")).sort());
    expect(narrow.json.result_info!.total_count).toBe(narrow.json.result.length);
    expect(narrow.json.result.length).toBeGreaterThan(0);
    const none = await list("name_prefix=zeta");
    expect(none.json.result).toEqual([]);
    expect(none.json.result_info).toEqual({ page: 1, per_page: 20, count: 0, total_count: 0, total_pages: 0 });
    // Empty is no filter (an empty filter box); with name, both apply.
    expect((await list("name_prefix=")).json.result_info!.total_count).toBe(250);
    expect(names(await list("name_prefix=omega&name=omega-004"))).toEqual(["omega-004"]);
    expect((await list("name_prefix=alpha&name=omega-004")).json.result).toEqual([]);
  });

  it("reads about a page of rows for a page, not the account's 250", async () => {
    const catalog = catalogFor(env, ACCOUNT);
    const rowsRead = async (query: string) => {
      const before = (await catalog.costFigures()).rowsRead;
      expect((await list(query)).status).toBe(200);
      return (await catalog.costFigures()).rowsRead - before;
    };
    const first = await rowsRead("per_page=20");
    const prefixed = await rowsRead("name_prefix=beta&per_page=20");
    const deep = await rowsRead("page=10&per_page=20");
    console.log(
      `catalog rows read: page 1 of 20: ${first}; name_prefix (50 match) page 1 of 20: ${prefixed}; page 10 of 20: ${deep}`,
    );
    expect(first).toBeLessThanOrEqual(25);
    // The matches counted once (50), then the page.
    expect(prefixed).toBeLessThanOrEqual(75);
    // OFFSET walks the index: 180 skipped + 20 answered.
    expect(deep).toBeLessThanOrEqual(205);
  });

  it.each([
    ["per_page=0", "query.per_page", "at least 1"],
    ["per_page=101", "query.per_page", "at most 100"],
    ["per_page=ten", "query.per_page", "must be a number"],
    ["page=0", "query.page", "at least 1"],
    ["page=-2", "query.page", "at least 1"],
    ["page=1.5", "query.page", "whole number"],
    ["page=two", "query.page", "must be a number"],
    ["page=1000001", "query.page", "at most 1000000"],
    ["page=1&page=2", "query.page", "must be a number"],
    ["name_prefix=Beta", "query.name_prefix", "lowercase letters"],
    ["name_prefix=a%25", "query.name_prefix", "lowercase letters"],
    [`name_prefix=${"a".repeat(64)}`, "query.name_prefix", "at most 63"],
    ["name_prefix=a&name_prefix=b", "query.name_prefix", "given once"],
  ])("refuses %s with a 400 naming %s", async (query, field, text) => {
    const res = await list(query);
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
    expect(res.json.errors[0].field).toBe(field);
    expect(res.json.errors[0].message).toContain(text);
  });
});

describe("what a listing shows of real queues", () => {
  it("lists a queue without asking its Coordinator, and shows its changes at once", async () => {
    const q = await createQueue("zz-real");
    const coordinator = coordinatorFor(env, q.queue_id);
    const rpcsBefore = (await coordinator.costFigures()).rpcs;
    const one = () => list("name=zz-real").then((r) => r.json.result[0]!);
    expect((await one()).settings.delivery_paused).toBe(false);
    expect((await coordinator.costFigures()).rpcs).toBe(rpcsBefore);

    await api("PATCH", queuePath("zz-real"), { settings: { delivery_paused: true } });
    expect((await one()).settings.delivery_paused).toBe(true);
    const consumer = await api("POST", `${queuePath("zz-real")}/consumers`, { type: "http_pull" });
    expect(consumer.status).toBe(201);
    expect((await one()).consumers_total_count).toBe(1);
    expect((await one()).consumers[0]).toMatchObject({
      type: "http_pull",
      consumer_id: consumer.json.result.consumer_id,
    });
    await api("DELETE", `${queuePath("zz-real")}/consumers/${consumer.json.result.consumer_id}`);
    expect((await one()).consumers_total_count).toBe(0);
  });

  // Each delete asks every queue's Coordinator whether a consumer dead-letters into it
  // (broker/http/queues-api.ts): here the 250 seeded queues, each a Coordinator started afresh,
  // twice, which a loaded CI machine took past the default timeout to do.
  it("counts a create and a delete in the total, and a delete only once when two race", async () => {
    const total = async () => (await list("")).json.result_info!.total_count!;
    const before = await total();
    await createQueue("zz-counted");
    expect(await total()).toBe(before + 1);
    const [a, b] = await Promise.all([api("DELETE", queuePath("zz-counted")), api("DELETE", queuePath("zz-counted"))]);
    expect([a.status, b.status]).toContain(200);
    expect(await total()).toBe(before);
    expect((await list("name_prefix=zz-counted")).json.result_info!.total_count).toBe(0);
  }, 30_000);

  it("has a queue the catalog holds no description of described by its Coordinator, once", async () => {
    const q = await createQueue("zz-older");
    const catalog = catalogFor(env, ACCOUNT);
    await runInDurableObject(catalog, (_obj, state) => {
      state.storage.sql.exec("UPDATE queues SET info = NULL WHERE queue_id = ?", q.queue_id);
    });
    const coordinator = coordinatorFor(env, q.queue_id);
    const rpcs0 = (await coordinator.costFigures()).rpcs;
    expect(names(await list("name=zz-older"))).toEqual(["zz-older"]);
    expect((await coordinator.costFigures()).rpcs).toBe(rpcs0 + 1);
    expect(names(await list("name=zz-older"))).toEqual(["zz-older"]);
    expect((await coordinator.costFigures()).rpcs).toBe(rpcs0 + 1);
  });

  it("counts a catalog's existing queues when it first keeps a total", async () => {
    await runInDurableObject(catalogFor(env, ACCOUNT), (_obj, state) => {
      const sql = state.storage.sql;
      const active = sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM queues WHERE state = 'active'").one().n;
      expect(active).toBeGreaterThan(0);
      // The schema as it was before the copy and the total: the migrations run again.
      sql.exec("DROP TABLE totals");
      sql.exec("ALTER TABLE queues DROP COLUMN info");
      sql.exec("UPDATE schema_version SET version = 1");
      new AccountCatalog(state, env);
      expect(sql.exec<{ active: number }>("SELECT active FROM totals").one().active).toBe(active);
      expect(sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM queues WHERE info IS NULL").one().n).toBe(active);
    });
  });
});
