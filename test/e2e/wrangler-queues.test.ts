// wrangler's own `queues` commands pointed at shardq, as a user of Cloudflare Queues would
// point them: CLOUDFLARE_API_BASE_URL of Cloudflare's form (`http://host:port/client/v4`), a
// token, the account id `local`. wrangler resolves every
// queue name through `GET /accounts/:account/queues?name=<name>` and takes the first queue
// listed, so a list that ignored `name` sent an operator's command to another queue
//. Each command here names a queue that does not exist, or one that
// does but is not listed first, and the queue listed first must come out untouched.
// Then every verb of `wrangler queues`: each works as against Cloudflare, wrangler's
// JSON bodies sent as text/plain included, but event subscriptions, which shardq cannot serve
// and refuses saying so.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wranglerBin } from "../../cli/wrangler/dev-server.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";
import { HEADERS, TOKEN } from "./helpers.ts";

interface Run {
  code: number | null;
  out: string;
}

describe("wrangler queues commands against shardq", () => {
  let service: DevService | undefined;
  let base = "";
  // wrangler runs outside shardq's checkout, so that it reads no wrangler.toml of ours.
  const cwd = mkdtempSync(join(tmpdir(), "shardq-e2e-wrangler-queues-"));

  beforeAll(async () => {
    service = await startDevService("wrangler-queues");
    base = service.base;
  });

  afterAll(async () => {
    await service?.stop();
    rmSync(cwd, { recursive: true, force: true });
  });

  /** wrangler's `queues` command with these arguments, against shardq's /client/v4 (or `apiBase`). */
  function wrangler(...args: string[]): Promise<Run> {
    return wranglerAt(`${base}/client/v4`, ...args);
  }

  function wranglerAt(apiBase: string, ...args: string[]): Promise<Run> {
    const env: Record<string, string | undefined> = {
      ...process.env,
      CLOUDFLARE_API_BASE_URL: apiBase,
      CLOUDFLARE_API_TOKEN: TOKEN,
      CLOUDFLARE_ACCOUNT_ID: "local",
      WRANGLER_SEND_METRICS: "false",
    };
    delete env.CLOUDFLARE_API_KEY;
    delete env.CLOUDFLARE_EMAIL;
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [wranglerBin(), "queues", ...args], {
        cwd,
        env,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout.on("data", (c: Buffer) => (out += c.toString()));
      child.stderr.on("data", (c: Buffer) => (out += c.toString()));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, out }));
    });
  }

  async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
    const res = await fetch(`${base}/accounts/local/queues${path}`, {
      method,
      headers: HEADERS,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: await res.json() };
  }

  it("answers a name no queue has with 'does not exist' for info, delete and consumer remove, and leaves the queue listed first alone", async () => {
    // Paused, so that its message stays to be counted: the consumer would take it otherwise.
    const victim = (await api("POST", "", { queue_name: "aaa-victim", settings: { delivery_paused: true } })).json
      .result;
    expect((await api("POST", "", { queue_name: "zzz-other" })).status).toBe(201);
    const consumer = await api("POST", "/aaa-victim/consumers", {
      type: "worker",
      script_name: "shardq-example-consumer",
    });
    expect(consumer.status).toBe(201);
    await api("POST", "/aaa-victim/messages", { body: "keep me" });

    const info = await wrangler("info", "wq-6189");
    expect(info.code, info.out).not.toBe(0);
    expect(info.out).toContain('Queue "wq-6189" does not exist');
    expect(info.out).not.toContain("aaa-victim");

    const removed = await wrangler("consumer", "remove", "wq-6189", "shardq-example-consumer");
    expect(removed.code, removed.out).not.toBe(0);
    expect(removed.out).toContain('Queue "wq-6189" does not exist');

    const deleted = await wrangler("delete", "no-such-queue");
    expect(deleted.code, deleted.out).not.toBe(0);
    expect(deleted.out).toContain('Queue "no-such-queue" does not exist');
    expect(deleted.out).not.toContain("Deleted queue");

    // A queue that exists but is listed second is the one a command reaches.
    const other = await wrangler("info", "zzz-other");
    expect(other.code, other.out).toBe(0);
    expect(other.out).toContain("Queue Name: zzz-other");

    const after = await api("GET", "/aaa-victim");
    expect(after.status).toBe(200);
    expect(after.json.result.queue_id).toBe(victim.queue_id);
    expect(after.json.result.consumers.map((c: { consumer_id: string }) => c.consumer_id)).toEqual([
      consumer.json.result.consumer_id,
    ]);
    expect((await api("GET", "/aaa-victim/metrics")).json.result.backlog_count).toBe(1);

    // The pull consumer's remove resolves the name the same way.
    await api("DELETE", `/aaa-victim/consumers/${consumer.json.result.consumer_id}`);
    const pull = await api("POST", "/aaa-victim/consumers", { type: "http_pull" });
    expect(pull.status).toBe(201);
    const httpRemoved = await wrangler("consumer", "http", "remove", "wq-6189");
    expect(httpRemoved.code, httpRemoved.out).not.toBe(0);
    expect(httpRemoved.out).toContain('Queue "wq-6189" does not exist');
    expect(
      (await api("GET", "/aaa-victim/consumers")).json.result.map((c: { consumer_id: string }) => c.consumer_id),
    ).toEqual([pull.json.result.consumer_id]);

    // And a name that exists is served: the delete reaches that queue and no other.
    const del = await wrangler("delete", "zzz-other");
    expect(del.code, del.out).toBe(0);
    expect((await api("GET", "/zzz-other")).status).toBe(404);
    expect((await api("GET", "/aaa-victim")).status).toBe(200);
    await api("DELETE", "/aaa-victim");
  }, 120_000);

  /** Runs a wrangler command that must succeed, and returns its output. */
  async function ok(...args: string[]): Promise<string> {
    const run = await wrangler(...args);
    expect(run.code, `wrangler queues ${args.join(" ")}\n${run.out}`).toBe(0);
    return run.out;
  }

  /** Runs a wrangler command that must fail, and returns its output. */
  async function refused(...args: string[]): Promise<string> {
    const run = await wrangler(...args);
    expect(run.code, `wrangler queues ${args.join(" ")}\n${run.out}`).not.toBe(0);
    return run.out;
  }

  const settingsOf = async (queue: string) => (await api("GET", `/${queue}`)).json.result.settings;
  const consumersOf = async (queue: string) =>
    (await api("GET", `/${queue}/consumers`)).json.result as Array<Record<string, any>>;

  it("serves every verb: create, list, info, update, pause and resume delivery, worker and pull consumers, purge, delete", async () => {
    // create, with settings; list; info.
    expect(
      await ok("create", "wq-life", "--delivery-delay-secs", "5", "--message-retention-period-secs", "7200"),
    ).toContain("Created queue 'wq-life'");
    expect(await settingsOf("wq-life")).toEqual({
      delivery_delay: 5,
      delivery_paused: false,
      message_retention_period: 7200,
    });
    await ok("create", "wq-life-dlq");
    const list = await ok("list");
    expect(list).toContain("wq-life");
    expect(list).toContain("wq-life-dlq");
    const info = await ok("info", "wq-life");
    expect(info).toContain("Queue Name: wq-life");
    expect(info).toContain("Number of Consumers: 0");

    // update: what it names changes, the rest stays.
    await ok("update", "wq-life", "--delivery-delay-secs", "10");
    expect(await settingsOf("wq-life")).toEqual({
      delivery_delay: 10,
      delivery_paused: false,
      message_retention_period: 7200,
    });
    expect(await ok("pause-delivery", "wq-life")).toContain("Paused message delivery for queue wq-life");
    expect((await settingsOf("wq-life")).delivery_paused).toBe(true);
    expect(await ok("resume-delivery", "wq-life")).toContain("Resumed message delivery for queue wq-life");
    expect(await settingsOf("wq-life")).toEqual({
      delivery_delay: 10,
      delivery_paused: false,
      message_retention_period: 7200,
    });

    // A Worker consumer, with every setting wrangler takes; listed, shown, removed.
    expect(
      await ok(
        "consumer",
        "add",
        "wq-life",
        "shardq-example-consumer",
        "--batch-size",
        "7",
        "--batch-timeout",
        "2",
        "--message-retries",
        "2",
        "--dead-letter-queue",
        "wq-life-dlq",
        "--max-concurrency",
        "3",
        "--retry-delay-secs",
        "4",
      ),
    ).toContain("Added consumer to queue wq-life");
    const [worker] = await consumersOf("wq-life");
    expect(worker).toMatchObject({
      type: "worker",
      script_name: "shardq-example-consumer",
      dead_letter_queue: "wq-life-dlq",
      settings: { batch_size: 7, max_wait_time_ms: 2000, max_retries: 2, max_concurrency: 3, retry_delay: 4 },
    });
    for (const listing of [
      await ok("consumer", "list", "wq-life"),
      await ok("consumer", "worker", "list", "wq-life"),
    ]) {
      expect(listing).toContain(worker!.consumer_id);
      expect(listing).toContain("shardq-example-consumer");
      expect(listing).toContain("wq-life-dlq");
    }
    const workerJson = JSON.parse(await ok("consumer", "worker", "list", "wq-life", "--json"));
    expect(workerJson).toEqual([
      expect.objectContaining({ consumer_id: worker!.consumer_id, script: "shardq-example-consumer" }),
    ]);
    expect(await ok("consumer", "http", "list", "wq-life")).toContain(
      'No HTTP pull consumers found for queue "wq-life"',
    );
    expect(await ok("info", "wq-life")).toContain("Consumers: worker:shardq-example-consumer");
    expect(await ok("consumer", "remove", "wq-life", "shardq-example-consumer")).toContain(
      "Removed consumer from queue wq-life",
    );
    expect(await consumersOf("wq-life")).toEqual([]);
    expect(await ok("consumer", "list", "wq-life")).toContain('No consumers found for queue "wq-life"');

    // The same through `consumer worker add/remove`.
    await ok("consumer", "worker", "add", "wq-life", "shardq-example-consumer", "--batch-size", "9");
    expect((await consumersOf("wq-life"))[0]).toMatchObject({ type: "worker", settings: { batch_size: 9 } });
    await ok("consumer", "worker", "remove", "wq-life", "shardq-example-consumer");
    expect(await consumersOf("wq-life")).toEqual([]);

    // A pull consumer, with every setting wrangler takes.
    await ok(
      "consumer",
      "http",
      "add",
      "wq-life",
      "--batch-size",
      "3",
      "--message-retries",
      "1",
      "--dead-letter-queue",
      "wq-life-dlq",
      "--visibility-timeout-secs",
      "20",
      "--retry-delay-secs",
      "2",
    );
    const [pull] = await consumersOf("wq-life");
    expect(pull).toMatchObject({
      type: "http_pull",
      dead_letter_queue: "wq-life-dlq",
      settings: { batch_size: 3, max_retries: 1, visibility_timeout_ms: 20_000, retry_delay: 2 },
    });
    const httpList = await ok("consumer", "http", "list", "wq-life");
    expect(httpList).toContain(pull!.consumer_id);
    expect(httpList).toContain("20000");
    expect(await ok("info", "wq-life")).toContain("HTTP Pull Consumer");

    // purge: every message gone, and the purge status says so.
    for (let i = 0; i < 3; i++) expect((await api("POST", "/wq-life/messages", { body: i })).status).toBe(200);
    expect(await ok("purge", "wq-life", "--force")).toContain("Purged Queue 'wq-life'");
    expect((await api("GET", "/wq-life/metrics")).json.result.backlog_count).toBe(0);
    expect((await api("GET", "/wq-life/purge")).json.result.completed).toBe("true");

    expect(await ok("consumer", "http", "remove", "wq-life")).toContain("Removed consumer from queue wq-life");
    expect(await consumersOf("wq-life")).toEqual([]);

    // delete.
    expect(await ok("delete", "wq-life")).toContain("Deleted queue wq-life");
    expect((await api("GET", "/wq-life")).status).toBe(404);
    await ok("delete", "wq-life-dlq");
  }, 600_000);

  it("refuses what shardq cannot serve, saying why: event subscriptions, a service environment; creates a queue in a jurisdiction", async () => {
    await ok("create", "wq-subs");
    const unsupported = "shardq does not serve event subscriptions";
    expect(await refused("subscription", "create", "wq-subs", "--source", "r2", "--events", "object-create")).toContain(
      unsupported,
    );
    expect(await refused("subscription", "list", "wq-subs")).toContain(unsupported);
    const id = "0123456789abcdef0123456789abcdef";
    expect(await refused("subscription", "get", "wq-subs", "--id", id)).toContain(unsupported);
    expect(await refused("subscription", "update", "wq-subs", "--id", id, "--enabled", "false")).toContain(unsupported);
    expect(await refused("subscription", "delete", "wq-subs", "--id", id, "--force")).toContain(unsupported);

    await ok("create", "wq-eu", "--jurisdiction", "eu");
    expect((await api("GET", "/wq-eu")).json.result.jurisdiction).toBe("eu");
    expect(await ok("info", "wq-eu")).toContain("Jurisdiction: eu");
    await ok("delete", "wq-eu");
    // --env sends a service environment, which a consumer of shardq has no use for.
    expect(await refused("consumer", "add", "wq-subs", "shardq-example-consumer", "--env", "staging")).toContain(
      "without service environments",
    );
    expect(await consumersOf("wq-subs")).toEqual([]);
    await ok("delete", "wq-subs");
  }, 300_000);

  it("still answers a base URL without /client/v4", async () => {
    await api("POST", "", { queue_name: "wq-root" });
    const run = await wranglerAt(base, "info", "wq-root");
    expect(run.code, run.out).toBe(0);
    expect(run.out).toContain("Queue Name: wq-root");
    await api("DELETE", "/wq-root");
  }, 60_000);
});
