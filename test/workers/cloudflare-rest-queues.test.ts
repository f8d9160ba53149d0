/**
 * Queues and consumers as Cloudflare's REST API replaces and describes them: PUT of a queue
 * replacing its settings, PUT of a consumer replacing or adding it, and a queue's description
 * listing its consumers whole; a jurisdiction changed and a service environment refused in words
 * a user can act on.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { catalogFor } from "../../src/kernel/addressing";
import { ACCOUNT, api, createQueue, queuePath, queuesPath } from "./helpers";

describe("PUT .../queues/:queue: Cloudflare's update replaces the settings", () => {
  it("sets what it gives and puts back the defaults of what it leaves out; queue_name must not change", async () => {
    await createQueue("cf-put", { delivery_delay: 30, delivery_paused: true, message_retention_period: 3600 });
    const put = await api("PUT", queuePath("cf-put"), { queue_name: "cf-put", settings: { delivery_delay: 5 } });
    expect(put.status).toBe(200);
    const created = await api("POST", queuesPath(), { queue_name: "cf-put-fresh" });
    expect(put.json.result.settings).toEqual({ ...created.json.result.settings, delivery_delay: 5 });
    const empty = await api("PUT", queuePath("cf-put"), {});
    expect(empty.json.result.settings).toEqual(created.json.result.settings);
    // The listing shows it at once.
    expect((await api("GET", `${queuesPath()}?name=cf-put`)).json.result[0].settings).toEqual(
      created.json.result.settings,
    );
    const renamed = await api("PUT", queuePath("cf-put"), { queue_name: "cf-put-other", settings: {} });
    expect(renamed.status).toBe(400);
    expect(renamed.json.errors[0].field).toBe("queue_name");
  });

  it("takes a jurisdiction on create, and refuses a change of it on PUT and PATCH alike, saying why", async () => {
    await createQueue("cf-jurisdiction");
    expect((await api("POST", queuesPath(), { queue_name: "cf-jurisdiction-eu", jurisdiction: "eu" })).status).toBe(
      201,
    );
    for (const [method, path, body] of [
      ["PUT", queuePath("cf-jurisdiction"), { jurisdiction: "eu" }],
      ["PATCH", queuePath("cf-jurisdiction"), { jurisdiction: "fedramp" }],
      ["PUT", queuePath("cf-jurisdiction-eu"), { jurisdiction: "us" }],
    ] as const) {
      const res = await api(method, path, body);
      expect(res.status, `${method} ${path}`).toBe(400);
      expect(res.json.errors[0].field).toBe("jurisdiction");
      expect(res.json.errors[0].message).toContain("chosen when a queue is created");
    }
    expect((await api("PUT", queuePath("cf-jurisdiction-eu"), { jurisdiction: "eu" })).status).toBe(200);
    expect((await api("GET", queuePath("cf-jurisdiction-eu"))).json.result.jurisdiction).toBe("eu");
  });
});

describe("PUT .../consumers/:consumer_id: Cloudflare's update replaces the consumer, or adds it", () => {
  it("replaces settings over the defaults, clears a dead-letter queue left out, and keeps type, Worker and transport", async () => {
    await createQueue("cf-putc");
    await createQueue("cf-putc-dlq");
    const created = await api("POST", `${queuePath("cf-putc")}/consumers`, {
      type: "worker",
      script_name: "shardq-example-consumer",
      settings: { batch_size: 50, max_retries: 9, transport: "rpc" },
      dead_letter_queue: "cf-putc-dlq",
    });
    const id = created.json.result.consumer_id as string;
    const one = `${queuePath("cf-putc")}/consumers/${id}`;
    const put = await api("PUT", one, {
      type: "worker",
      script_name: "shardq-example-consumer",
      settings: { max_wait_time_ms: 100 },
    });
    expect(put.status).toBe(200);
    expect(put.json.result).toMatchObject({
      consumer_id: id,
      dead_letter_queue: null,
      settings: { batch_size: 10, max_retries: 3, max_wait_time_ms: 100, max_concurrency: null, transport: "rpc" },
    });
    // The queue (and its listing) shows the consumer as it is now.
    expect((await api("GET", queuePath("cf-putc"))).json.result.consumers[0].settings.max_wait_time_ms).toBe(100);
    expect(
      (await api("GET", `${queuesPath()}?name=cf-putc`)).json.result[0].consumers[0].settings.max_wait_time_ms,
    ).toBe(100);
    const retyped = await api("PUT", one, { type: "http_pull" });
    expect(retyped.status).toBe(400);
    expect(retyped.json.errors[0].field).toBe("type");
    const noType = await api("PUT", one, { script_name: "shardq-example-consumer" });
    expect(noType.status).toBe(400);
    expect(noType.json.errors[0]).toMatchObject({ field: "type", message: "type: is required" });
  });

  it("adds the consumer a queue lacks under the path's id, once: the same PUT again replaces it; another id is a 409", async () => {
    await createQueue("cf-putc-new");
    const id = "abcdefabcdefabcdefabcdefabcdef12";
    const path = `${queuePath("cf-putc-new")}/consumers/${id}`;
    const first = await api("PUT", path, { type: "http_pull", settings: { batch_size: 4 } });
    expect(first.status).toBe(201);
    expect(first.json.result).toMatchObject({ consumer_id: id, type: "http_pull", settings: { batch_size: 4 } });
    const again = await api("PUT", path, { type: "http_pull", settings: { batch_size: 4 } });
    expect(again.status).toBe(200);
    expect(again.json.result.consumer_id).toBe(id);
    expect((await api("GET", `${queuePath("cf-putc-new")}/consumers`)).json.result).toHaveLength(1);
    const other = await api("PUT", `${queuePath("cf-putc-new")}/consumers/${"1".repeat(32)}`, { type: "http_pull" });
    expect(other.status).toBe(409);
    expect(other.json.errors[0].message).toContain(id);
    const badId = await api("PUT", `${queuePath("cf-putc-new")}/consumers/not-an-id`, { type: "http_pull" });
    expect(badId.status).toBe(400);
    expect(badId.json.errors[0].field).toBe("consumer_id");
    // Added as a create adds: a worker needs a Worker shardq is bound to.
    await createQueue("cf-putc-worker");
    const unbound = await api("PUT", `${queuePath("cf-putc-worker")}/consumers/${id}`, {
      type: "worker",
      script_name: "nobody-bound-this",
    });
    expect(unbound.status).toBe(400);
    expect(unbound.json.errors[0].field).toBe("script_name");
  });

  it("takes wrangler's empty environment_name on a create, and refuses another, saying why", async () => {
    await createQueue("cf-env");
    const named = await api("POST", `${queuePath("cf-env")}/consumers`, {
      type: "worker",
      script_name: "shardq-example-consumer",
      environment_name: "staging",
    });
    expect(named.status).toBe(400);
    expect(named.json.errors[0].field).toBe("environment_name");
    expect(named.json.errors[0].message).toContain("without service environments");
    const plain = await api("POST", `${queuePath("cf-env")}/consumers`, {
      type: "worker",
      script_name: "shardq-example-consumer",
      environment_name: "",
    });
    expect(plain.status).toBe(201);
  });
});

describe("a queue's description lists its consumers whole, as Cloudflare's does", () => {
  it("gives each consumer's settings and dead-letter queue, and `script` for a Worker, in GET and in the listing", async () => {
    await createQueue("cf-whole");
    const consumer = await api("POST", `${queuePath("cf-whole")}/consumers`, {
      type: "worker",
      script_name: "shardq-example-consumer",
      settings: { batch_size: 7 },
    });
    const got = (await api("GET", queuePath("cf-whole"))).json.result.consumers[0];
    expect(got).toEqual({ ...consumer.json.result, script: "shardq-example-consumer" });
    expect((await api("GET", `${queuesPath()}?name=cf-whole`)).json.result[0].consumers[0]).toEqual(got);
    // A PATCH of the consumer shows in the listing too.
    await api("PATCH", `${queuePath("cf-whole")}/consumers/${consumer.json.result.consumer_id}`, {
      settings: { batch_size: 8 },
    });
    expect((await api("GET", `${queuesPath()}?name=cf-whole`)).json.result[0].consumers[0].settings.batch_size).toBe(8);
  });

  it("takes a description the catalog kept before consumers were listed whole from the Coordinator again, once", async () => {
    const q = await createQueue("cf-whole-old");
    const consumer = await api("POST", `${queuePath("cf-whole-old")}/consumers`, { type: "http_pull" });
    const catalog = catalogFor(env, ACCOUNT);
    await runInDurableObject(catalog, (_obj, state) => {
      const row = state.storage.sql
        .exec<{ info: string }>("SELECT info FROM queues WHERE queue_id = ?", q.queue_id)
        .one();
      const info = JSON.parse(row.info);
      info.consumers = [{ type: "http_pull", consumer_id: consumer.json.result.consumer_id }];
      state.storage.sql.exec("UPDATE queues SET info = ? WHERE queue_id = ?", JSON.stringify(info), q.queue_id);
    });
    const listed = (await api("GET", `${queuesPath()}?name=cf-whole-old`)).json.result[0];
    expect(listed.consumers[0]).toMatchObject({
      consumer_id: consumer.json.result.consumer_id,
      settings: { batch_size: 10 },
    });
    const kept = await runInDurableObject(
      catalog,
      (_obj, state) =>
        state.storage.sql.exec<{ info: string }>("SELECT info FROM queues WHERE queue_id = ?", q.queue_id).one().info,
    );
    expect(JSON.parse(kept).consumers[0].settings).toBeDefined();
  });
});
