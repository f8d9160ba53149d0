import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { shardMapKeyById, shardMapKeyByName } from "../../src/kernel/addressing";
import { OTHER_TOKEN, api, createQueue, queuePath, queuesPath } from "./helpers";

describe("queue management over HTTP", () => {
  it("creates a queue with Cloudflare's defaults and answers in the envelope", async () => {
    const res = await api("POST", queuesPath(), { queue_name: "orders" });
    expect(res.status).toBe(201);
    expect(res.json.success).toBe(true);
    expect(res.json.errors).toEqual([]);
    expect(res.json.result.queue_name).toBe("orders");
    expect(res.json.result.queue_id).toMatch(/^[0-9a-f]{32}$/);
    expect(res.json.result.settings).toEqual({
      delivery_delay: 0,
      delivery_paused: false,
      message_retention_period: 345600,
    });
  });

  it("refuses a second queue with the same name (409)", async () => {
    await createQueue("twice");
    const res = await api("POST", queuesPath(), { queue_name: "twice" });
    expect(res.status).toBe(409);
    expect(res.json.errors[0].field).toBe("queue_name");
  });

  it("lets exactly one of two concurrent creates of a name win", async () => {
    const [a, b] = await Promise.all([
      api("POST", queuesPath(), { queue_name: "race" }),
      api("POST", queuesPath(), { queue_name: "race" }),
    ]);
    expect([a.status, b.status].sort()).toEqual([201, 409]);
    const list = await api("GET", `${queuesPath()}?per_page=100`);
    expect(list.json.result.filter((q: { queue_name: string }) => q.queue_name === "race")).toHaveLength(1);
  });

  it("leaves settings and the map version alone when a change changes nothing", async () => {
    const q = await createQueue("same-settings");
    const res = await api("PATCH", queuePath("same-settings"), { settings: { delivery_delay: 0 } });
    expect(res.status).toBe(200);
    expect(res.json.result.modified_on).toBe((await api("GET", queuePath(q.queue_id))).json.result.created_on);
  });

  it.each([
    [{}, "queue_name", "is required"],
    [{ queue_name: "" }, "queue_name", "must not be empty"],
    [{ queue_name: "Upper" }, "queue_name", "lowercase"],
    [{ queue_name: "-dash" }, "queue_name", "lowercase"],
    [{ queue_name: "a".repeat(64) }, "queue_name", "at most 63"],
    [{ queue_name: "0123456789abcdef0123456789abcdef" }, "queue_name", "queue id"],
    [{ queue_name: 7 }, "queue_name", "must be a string"],
    [{ queue_name: "ok-name", extra: 1 }, "extra", "not a known field"],
    [{ queue_name: "ok-name", settings: { delivery_delay: 86401 } }, "settings.delivery_delay", "at most 86400"],
    [
      { queue_name: "ok-name", settings: { message_retention_period: 59 } },
      "settings.message_retention_period",
      "at least 60",
    ],
    [{ queue_name: "ok-name", settings: { delivery_paused: "yes" } }, "settings.delivery_paused", "true or false"],
  ])("refuses a bad create body %j with a 400 naming %s", async (body, field, text) => {
    const res = await api("POST", queuesPath(), body);
    expect(res.status).toBe(400);
    expect(res.json.success).toBe(false);
    expect(res.json.errors[0].field).toBe(field);
    expect(res.json.errors[0].message).toContain(text);
    expect(res.json.result).toBeNull();
  });

  it("finds a queue by name and by id", async () => {
    const q = await createQueue("lookup");
    const byName = await api("GET", queuePath("lookup"));
    const byId = await api("GET", queuePath(q.queue_id));
    expect(byName.status).toBe(200);
    expect(byId.json.result).toEqual(byName.json.result);
  });

  it("lists the account's queues with paging", async () => {
    for (const n of ["list-a", "list-b", "list-c"]) await createQueue(n);
    const all = await api("GET", `${queuesPath()}?per_page=100`);
    const names = all.json.result.map((q: { queue_name: string }) => q.queue_name);
    expect(names).toEqual(expect.arrayContaining(["list-a", "list-b", "list-c"]));
    const page = await api("GET", `${queuesPath()}?per_page=1&page=2`);
    expect(page.json.result).toHaveLength(1);
    expect(page.json.result_info).toMatchObject({
      page: 2,
      per_page: 1,
      total_count: all.json.result_info!.total_count,
    });
    const bad = await api("GET", `${queuesPath()}?per_page=1000`);
    expect(bad.status).toBe(400);
    expect(bad.json.errors[0].field).toBe("query.per_page");
  });

  it("filters the list by exact name: only that queue, or none when no queue has the name", async () => {
    const target = await createQueue("named-b");
    for (const n of ["named-a", "named-bb"]) await createQueue(n);
    const one = await api("GET", `${queuesPath()}?name=named-b`);
    expect(one.status).toBe(200);
    expect(one.json.result.map((q: { queue_id: string }) => q.queue_id)).toEqual([target.queue_id]);
    expect(one.json.result_info).toMatchObject({ count: 1, total_count: 1 });
    const none = await api("GET", `${queuesPath()}?name=wq-6189`);
    expect(none.status).toBe(200);
    expect(none.json.result).toEqual([]);
    expect(none.json.result_info).toMatchObject({ count: 0, total_count: 0 });
    // Another account's queue of that name is not this account's.
    expect(
      (await api("GET", `${queuesPath("other")}?name=named-b`, undefined, { token: OTHER_TOKEN })).json.result,
    ).toEqual([]);
    const twice = await api("GET", `${queuesPath()}?name=named-a&name=named-b`);
    expect(twice.status).toBe(400);
    expect(twice.json.errors[0].field).toBe("query.name");
  });

  it("updates settings, versions the shard map and publishes it to KV", async () => {
    const q = await createQueue("settings");
    const before = await env.SHARD_MAPS.get<{ version: number }>(shardMapKeyById("local", q.queue_id), "json");
    expect(before?.version).toBe(1);
    const res = await api("PATCH", queuePath("settings"), { settings: { delivery_delay: 30, delivery_paused: true } });
    expect(res.status).toBe(200);
    expect(res.json.result.settings).toEqual({
      delivery_delay: 30,
      delivery_paused: true,
      message_retention_period: 345600,
    });
    expect((await api("GET", queuePath(q.queue_id))).json.result.settings.delivery_delay).toBe(30);
  });

  it("refuses bad settings and renames, changing nothing", async () => {
    await createQueue("strict");
    const bad = await api("PATCH", queuePath("strict"), { settings: { delivery_delay: -1 } });
    expect(bad.status).toBe(400);
    expect(bad.json.errors[0].field).toBe("settings.delivery_delay");
    const typo = await api("PATCH", queuePath("strict"), { settings: { delivery_dely: 5 } });
    expect(typo.status).toBe(400);
    expect(typo.json.errors[0].field).toBe("settings.delivery_dely");
    const rename = await api("PATCH", queuePath("strict"), { queue_name: "other-name" });
    expect(rename.status).toBe(400);
    expect(rename.json.errors[0].field).toBe("queue_name");
    expect((await api("GET", queuePath("strict"))).json.result.settings.delivery_delay).toBe(0);
  });

  it("deletes a queue: its name, its maps in KV and its messages go; a new queue of that name is new", async () => {
    const q = await createQueue("doomed");
    await api("POST", `${queuePath("doomed")}/messages`, { body: "bye" });
    const del = await api("DELETE", queuePath("doomed"));
    expect(del.status).toBe(200);
    expect((await api("GET", queuePath("doomed"))).status).toBe(404);
    expect((await api("GET", queuePath(q.queue_id))).status).toBe(404);
    expect(await env.SHARD_MAPS.get(shardMapKeyById("local", q.queue_id))).toBeNull();
    expect(await env.SHARD_MAPS.get(shardMapKeyByName("local", "doomed"))).toBeNull();
    expect((await api("POST", `${queuePath("doomed")}/messages`, { body: "late" })).status).toBe(404);
    expect((await api("DELETE", queuePath("doomed"))).status).toBe(404);
    const again = await createQueue("doomed");
    expect(again.queue_id).not.toBe(q.queue_id);
    expect((await api("GET", `${queuePath("doomed")}/metrics`)).json.result.backlog_count).toBe(0);
  });

  it("refuses to delete a queue that is a consumer's dead-letter queue (409 naming the consumer and its queue), by name or id, until the consumer lets it go", async () => {
    const dlq = await createQueue("held-dlq");
    await createQueue("held-source");
    const consumer = await api("POST", `${queuePath("held-source")}/consumers`, {
      type: "http_pull",
      dead_letter_queue: "held-dlq",
    });
    expect(consumer.status).toBe(201);
    await api("POST", `${queuePath("held-dlq")}/messages`, { body: "dead letter" });
    for (const ref of ["held-dlq", dlq.queue_id]) {
      const refused = await api("DELETE", queuePath(ref));
      expect(refused.status).toBe(409);
      expect(refused.json.errors[0].field).toBe("queue");
      expect(refused.json.errors[0].message).toContain(consumer.json.result.consumer_id);
      expect(refused.json.errors[0].message).toContain('"held-source"');
    }
    expect((await api("GET", `${queuePath("held-dlq")}/metrics`)).json.result.backlog_count).toBe(1);
    // Named by id, it is held all the same.
    await api("PATCH", `${queuePath("held-source")}/consumers/${consumer.json.result.consumer_id}`, {
      dead_letter_queue: dlq.queue_id,
    });
    expect((await api("DELETE", queuePath("held-dlq"))).status).toBe(409);
    await api("PATCH", `${queuePath("held-source")}/consumers/${consumer.json.result.consumer_id}`, {
      dead_letter_queue: null,
    });
    expect((await api("DELETE", queuePath("held-dlq"))).status).toBe(200);
    expect((await api("GET", queuePath("held-dlq"))).status).toBe(404);
  });

  it("answers 404 for an unknown queue and 405 for a known path with the wrong method", async () => {
    const missing = await api("GET", queuePath("no-such-queue"));
    expect(missing.status).toBe(404);
    expect(missing.json.errors[0].field).toBe("queue");
    expect((await api("GET", queuePath("0123456789abcdef0123456789abcdef"))).status).toBe(404);
    expect((await api("PUT", queuesPath())).status).toBe(405);
    expect((await api("GET", "/nowhere")).status).toBe(404);
  });
});
