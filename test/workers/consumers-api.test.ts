import { createExecutionContext, env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ConsumerShard } from "../../consumer-shard/consumer-shard";
import { router } from "../../broker/http/router";
import { consumerShardFor, coordinatorFor } from "../../src/kernel/addressing";
import { defaultConsumerSettings } from "../../src/kernel/consumer-settings";
import type { Env } from "../../src/kernel/env";
import { BASE, OTHER_TOKEN, TOKEN, api, createQueue, queuePath, queuesPath } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

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
      settings: {
        batch_size: 10,
        max_wait_time_ms: 5000,
        max_retries: 3,
        retry_delay: 0,
        max_concurrency: null,
        visibility_timeout_ms: 30000,
        transport: "queue",
      },
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
    // CONSUMER_SHARD was once shardq's own consumer-shard namespace binding.
    [{ type: "worker", script_name: "shard" }, "script_name", "CONSUMER_SHARD"],
    [{ type: "http_pull", script_name: "x" }, "script_name", "worker consumers only"],
    [{ type: "smtp" }, "type", '"worker" or "http_pull"'],
    [{ ...worker, settings: { batch_size: 0 } }, "settings.batch_size", "at least 1"],
    [{ ...worker, settings: { batch_size: 101 } }, "settings.batch_size", "at most 100"],
    [{ ...worker, settings: { max_wait_time_ms: 60_001 } }, "settings.max_wait_time_ms", "at most 60000"],
    [{ ...worker, settings: { max_retries: 101 } }, "settings.max_retries", "at most 100"],
    [{ ...worker, settings: { retry_delay: -1 } }, "settings.retry_delay", "at least 0"],
    [{ ...worker, settings: { max_concurrency: 251 } }, "settings.max_concurrency", "at most 250"],
    [
      { ...worker, settings: { visibility_timeout_ms: 43_200_001 } },
      "settings.visibility_timeout_ms",
      "at most 43200000",
    ],
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
    const created = (
      await api("POST", consumers("cons-crud"), { type: "http_pull", dead_letter_queue: "cons-crud-dlq" })
    ).json.result;
    expect((await api("GET", consumers("cons-crud"))).json.result).toEqual([created]);
    expect((await api("GET", `${consumers("cons-crud")}/${created.consumer_id}`)).json.result).toEqual(created);

    const patched = await api("PATCH", `${consumers("cons-crud")}/${created.consumer_id}`, {
      settings: { batch_size: 50, max_retries: 0 },
      dead_letter_queue: null,
    });
    expect(patched.status).toBe(200);
    expect(patched.json.result.settings).toMatchObject({ batch_size: 50, max_retries: 0, max_wait_time_ms: 5000 });
    expect(patched.json.result.dead_letter_queue).toBeNull();

    const retype = await api("PATCH", `${consumers("cons-crud")}/${created.consumer_id}`, { type: "worker" });
    expect(retype.status).toBe(400);
    expect(retype.json.errors[0].field).toBe("type");
    const bad = await api("PATCH", `${consumers("cons-crud")}/${created.consumer_id}`, {
      settings: { batch_size: 500 },
    });
    expect(bad.status).toBe(400);

    expect((await api("DELETE", `${consumers("cons-crud")}/${created.consumer_id}`)).status).toBe(200);
    expect((await api("GET", `${consumers("cons-crud")}/${created.consumer_id}`)).status).toBe(404);
    expect((await api("DELETE", `${consumers("cons-crud")}/${created.consumer_id}`)).status).toBe(404);
    expect((await api("GET", consumers("cons-crud"))).json.result).toEqual([]);
  });

  it("hides one account's consumers from another", async () => {
    await createQueue("cons-private");
    await api("POST", consumers("cons-private"), { type: "http_pull" });
    const res = await api("GET", consumers("cons-private").replace("/local/", "/other/"), undefined, {
      token: OTHER_TOKEN,
    });
    expect(res.status).toBe(404);
    expect((await api("POST", consumers("cons-private"), worker, { token: OTHER_TOKEN })).status).toBe(404);
  });

  describe("a consumer Worker belongs to the accounts its binding is configured for", () => {
    const other = (path: string) => path.replace("/local/", "/other/");
    const stats = async (queue: string) =>
      (
        (await (await env.EXAMPLE_CONSUMER.fetch(`http://consumer/stats?queue=${queue}`)).json()) as {
          received: number;
        }
      ).received;
    /** The answer to an unknown name, with the name and its binding taken out: what is left must not depend on who is bound. */
    const shape = (message: string, name: string) =>
      message.replaceAll(name, "<name>").replaceAll(name.toUpperCase().replace(/[^A-Z0-9]/g, "_"), "<NAME>");

    async function call(e: Env, token: string, method: string, path: string, body?: unknown) {
      const request = new Request(`${BASE}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const res = await router.fetch(request, e, createExecutionContext());
      return { status: res.status, json: (await res.json()) as any };
    }

    it("answers another account naming the local account's Worker, or a name that folds onto its binding, as it answers a name nobody bound", async () => {
      expect(
        (await api("POST", queuesPath("other"), { queue_name: "acct-b-probe" }, { token: OTHER_TOKEN })).status,
      ).toBe(201);
      const unknown = await api(
        "POST",
        other(consumers("acct-b-probe")),
        { type: "worker", script_name: "nobody-bound-this" },
        { token: OTHER_TOKEN },
      );
      expect(unknown.status).toBe(400);
      for (const name of ["shardq-example-consumer", "shardq_example_consumer"]) {
        const res = await api(
          "POST",
          other(consumers("acct-b-probe")),
          { type: "worker", script_name: name },
          { token: OTHER_TOKEN },
        );
        expect(res.status, name).toBe(400);
        expect(res.json.errors[0].field).toBe("script_name");
        expect(shape(res.json.errors[0].message, name)).toBe(
          shape(unknown.json.errors[0].message, "nobody-bound-this"),
        );
      }
      expect(
        (await api("GET", other(consumers("acct-b-probe")), undefined, { token: OTHER_TOKEN })).json.result,
      ).toEqual([]);
    });

    it("pushes nothing of another account's queue into a Worker bound for the local account, even through a consumer stored before the rule", async () => {
      const queue = (await api("POST", queuesPath("other"), { queue_name: "acct-b-pushed" }, { token: OTHER_TOKEN }))
        .json.result;
      await coordinatorFor(env, queue.queue_id).addConsumer({
        type: "worker",
        script_name: "shardq-example-consumer",
        settings: { ...defaultConsumerSettings("queue"), max_wait_time_ms: 0 },
        dead_letter_queue: null,
      });
      for (let i = 0; i < 3; i++)
        expect(
          (await api("POST", `${other(queuePath("acct-b-pushed"))}/messages`, { body: i }, { token: OTHER_TOKEN }))
            .status,
        ).toBe(200);
      await runInDurableObject(consumerShardFor(env, queue.queue_id, 0), (obj: ConsumerShard) =>
        obj.deliverRound(queue.queue_id),
      );
      await sleep(500);
      expect(await stats("acct-b-pushed")).toBe(0);
      expect(
        (await api("GET", `${other(queuePath("acct-b-pushed"))}/metrics`, undefined, { token: OTHER_TOKEN })).json
          .result.backlog_count,
      ).toBe(3);
    });

    it("lets the accounts WORKER_CONSUMER_ACCOUNTS names use a Worker by its exact name, and no other account or spelling", async () => {
      const configured = {
        ...env,
        WORKER_CONSUMER_ACCOUNTS: JSON.stringify({ "shardq-example-consumer": ["other"] }),
      } as Env;
      expect(
        (await call(configured, OTHER_TOKEN, "POST", queuesPath("other"), { queue_name: "acct-b-named" })).status,
      ).toBe(201);
      const added = await call(configured, OTHER_TOKEN, "POST", other(consumers("acct-b-named")), worker);
      expect(added.status).toBe(201);
      expect(added.json.result.script_name).toBe("shardq-example-consumer");
      await createQueue("acct-local-named");
      // The local account is not named there any more, and the folded spelling is nobody's.
      for (const [token, path, name] of [
        [TOKEN, consumers("acct-local-named"), "shardq-example-consumer"],
        [TOKEN, consumers("acct-local-named"), "shardq_example_consumer"],
        [OTHER_TOKEN, other(consumers("acct-b-named")), "shardq_example_consumer"],
      ] as const) {
        const res = await call(configured, token, "POST", path, { type: "worker", script_name: name });
        expect(res.status, `${path} ${name}`).toBe(400);
        expect(res.json.errors[0].field).toBe("script_name");
      }
    });
  });
});
