import { describe, expect, it } from "vitest";
import { OTHER_TOKEN, api, createQueue, queuePath } from "./helpers";

const consumers = (q: string) => `${queuePath(q)}/consumers`;
const worker = { type: "worker", script_name: "shardq-example-consumer" };

describe("consumer management over HTTP", () => {
  it("adds a worker consumer with Cloudflare's defaults, one per queue", async () => {
    await createQueue("cons-defaults");
    const res = await api("POST", consumers("cons-defaults"), worker);
    expect(res.status).toBe(201);
    expect(res.json.result).toMatchObject({
      type: "worker",
      script_name: "shardq-example-consumer",
      queue_name: "cons-defaults",
      dead_letter_queue: null,
      settings: { batch_size: 10, max_wait_time_ms: 5000, max_retries: 3, retry_delay: 0, max_concurrency: null, visibility_timeout_ms: 30000, transport: "queue" },
    });
    expect(res.json.result.consumer_id).toMatch(/^[0-9a-f]{32}$/);
    const second = await api("POST", consumers("cons-defaults"), { type: "http_pull" });
    expect(second.status).toBe(409);
    const info = await api("GET", queuePath("cons-defaults"));
    expect(info.json.result.consumers_total_count).toBe(1);
    expect(info.json.result.consumers[0]).toMatchObject({ type: "worker", script: "shardq-example-consumer" });
  });

  it.each([
    [{ type: "worker" }, "script_name", "required"],
    [{ type: "worker", script_name: "nobody-bound-this" }, "script_name", "CONSUMER_NOBODY_BOUND_THIS"],
    // CONSUMER_SHARD was once shardq's own consumer-shard namespace binding (issue 13).
    [{ type: "worker", script_name: "shard" }, "script_name", "CONSUMER_SHARD"],
    [{ type: "http_pull", script_name: "x" }, "script_name", "worker consumers only"],
    [{ type: "smtp" }, "type", '"worker" or "http_pull"'],
    [{ ...worker, settings: { batch_size: 0 } }, "settings.batch_size", "at least 1"],
    [{ ...worker, settings: { batch_size: 101 } }, "settings.batch_size", "at most 100"],
    [{ ...worker, settings: { max_wait_time_ms: 60_001 } }, "settings.max_wait_time_ms", "at most 60000"],
    [{ ...worker, settings: { max_retries: 101 } }, "settings.max_retries", "at most 100"],
    [{ ...worker, settings: { retry_delay: -1 } }, "settings.retry_delay", "at least 0"],
    [{ ...worker, settings: { max_concurrency: 251 } }, "settings.max_concurrency", "at most 250"],
    [{ ...worker, settings: { visibility_timeout_ms: 43_200_001 } }, "settings.visibility_timeout_ms", "at most 43200000"],
    [{ ...worker, settings: { transport: "smtp" } }, "settings.transport", '"queue" or "rpc"'],
    [{ ...worker, settings: { batch_sise: 5 } }, "settings.batch_sise", "not a known field"],
    [{ ...worker, dead_letter_queue: "no-such-queue" }, "dead_letter_queue", "does not exist"],
    [{ ...worker, dead_letter_queue: "Bad Name" }, "dead_letter_queue", "lowercase"],
  ])("refuses %j with a 400 naming %s", async (body, field, text) => {
    const name = `cons-bad-${Math.random().toString(16).slice(2, 10)}`;
    await createQueue(name);
    const res = await api("POST", consumers(name), body);
    expect(res.status).toBe(400);
    expect(res.json.errors[0].field).toBe(field);
    expect(res.json.errors[0].message).toContain(text);
    expect((await api("GET", consumers(name))).json.result).toEqual([]);
  });

  it.each([
    ["name", (q: { queue_id: string; queue_name: string }) => q.queue_name],
    ["id", (q: { queue_id: string; queue_name: string }) => q.queue_id],
  ])("refuses a queue as its own dead-letter queue, given by %s, on create and on update", async (form, ref) => {
    const queue = await createQueue(`cons-self-${form}`);
    const other = await createQueue(`cons-self-${form}-dlq`);
    const res = await api("POST", consumers(queue.queue_name), { ...worker, dead_letter_queue: ref(queue) });
    expect(res.status).toBe(400);
    expect(res.json.errors[0].field).toBe("dead_letter_queue");
    expect((await api("GET", consumers(queue.queue_name))).json.result).toEqual([]);

    // Another queue, in the same form, is accepted and stored as given.
    const created = await api("POST", consumers(queue.queue_name), { ...worker, dead_letter_queue: ref(other) });
    expect(created.status).toBe(201);
    expect(created.json.result.dead_letter_queue).toBe(ref(other));
    const path = `${consumers(queue.queue_name)}/${created.json.result.consumer_id}`;
    const patched = await api("PATCH", path, { dead_letter_queue: ref(queue) });
    expect(patched.status).toBe(400);
    expect(patched.json.errors[0].field).toBe("dead_letter_queue");
    expect((await api("GET", path)).json.result.dead_letter_queue).toBe(ref(other));
  });

  it("lists, reads, updates and removes a consumer", async () => {
    await createQueue("cons-crud");
    await createQueue("cons-crud-dlq");
    const created = (await api("POST", consumers("cons-crud"), { type: "http_pull", dead_letter_queue: "cons-crud-dlq" })).json.result;
    expect((await api("GET", consumers("cons-crud"))).json.result).toEqual([created]);
    expect((await api("GET", `${consumers("cons-crud")}/${created.consumer_id}`)).json.result).toEqual(created);

    const patched = await api("PATCH", `${consumers("cons-crud")}/${created.consumer_id}`, { settings: { batch_size: 50, max_retries: 0 }, dead_letter_queue: null });
    expect(patched.status).toBe(200);
    expect(patched.json.result.settings).toMatchObject({ batch_size: 50, max_retries: 0, max_wait_time_ms: 5000 });
    expect(patched.json.result.dead_letter_queue).toBeNull();

    const retype = await api("PATCH", `${consumers("cons-crud")}/${created.consumer_id}`, { type: "worker" });
    expect(retype.status).toBe(400);
    expect(retype.json.errors[0].field).toBe("type");
    const bad = await api("PATCH", `${consumers("cons-crud")}/${created.consumer_id}`, { settings: { batch_size: 500 } });
    expect(bad.status).toBe(400);

    expect((await api("DELETE", `${consumers("cons-crud")}/${created.consumer_id}`)).status).toBe(200);
    expect((await api("GET", `${consumers("cons-crud")}/${created.consumer_id}`)).status).toBe(404);
    expect((await api("DELETE", `${consumers("cons-crud")}/${created.consumer_id}`)).status).toBe(404);
    expect((await api("GET", consumers("cons-crud"))).json.result).toEqual([]);
  });

  it("hides one account's consumers from another", async () => {
    await createQueue("cons-private");
    await api("POST", consumers("cons-private"), { type: "http_pull" });
    const res = await api("GET", consumers("cons-private").replace("/local/", "/other/"), undefined, { token: OTHER_TOKEN });
    expect(res.status).toBe(404);
    expect((await api("POST", consumers("cons-private"), worker, { token: OTHER_TOKEN })).status).toBe(404);
  });
});
