// wrangler's own `queues` commands pointed at shardq, as a user of Cloudflare Queues would
// point them (CLOUDFLARE_API_BASE_URL, a token, an account id). wrangler resolves every
// queue name through `GET /accounts/:account/queues?name=<name>` and takes the first queue
// listed, so a list that ignored `name` sent an operator's command to another queue
// (issue 28, finding 3). Each command here names a queue that does not exist, or one that
// does but is not listed first, and the queue listed first must come out untouched.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { wranglerBin } from "../../scripts/dev-server.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";

const TOKEN = "shardq-local-dev-token";

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

  function wrangler(...args: string[]): Promise<Run> {
    const env: Record<string, string | undefined> = {
      ...process.env,
      CLOUDFLARE_API_BASE_URL: base,
      CLOUDFLARE_API_TOKEN: TOKEN,
      CLOUDFLARE_ACCOUNT_ID: "local",
      WRANGLER_SEND_METRICS: "false",
    };
    delete env.CLOUDFLARE_API_KEY;
    delete env.CLOUDFLARE_EMAIL;
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [wranglerBin(), "queues", ...args], { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
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
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: await res.json() };
  }

  it("answers a name no queue has with 'does not exist' for info, delete and consumer remove, and leaves the queue listed first alone", async () => {
    // Paused, so that its message stays to be counted: the consumer would take it otherwise.
    const victim = (await api("POST", "", { queue_name: "aaa-victim", settings: { delivery_paused: true } })).json.result;
    expect((await api("POST", "", { queue_name: "zzz-other" })).status).toBe(201);
    const consumer = await api("POST", "/aaa-victim/consumers", { type: "worker", script_name: "shardq-example-consumer" });
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
    expect(after.json.result.consumers.map((c: { consumer_id: string }) => c.consumer_id)).toEqual([consumer.json.result.consumer_id]);
    expect((await api("GET", "/aaa-victim/metrics")).json.result.backlog_count).toBe(1);

    // The pull consumer's remove resolves the name the same way.
    await api("DELETE", `/aaa-victim/consumers/${consumer.json.result.consumer_id}`);
    const pull = await api("POST", "/aaa-victim/consumers", { type: "http_pull" });
    expect(pull.status).toBe(201);
    const httpRemoved = await wrangler("consumer", "http", "remove", "wq-6189");
    expect(httpRemoved.code, httpRemoved.out).not.toBe(0);
    expect(httpRemoved.out).toContain('Queue "wq-6189" does not exist');
    expect((await api("GET", "/aaa-victim/consumers")).json.result.map((c: { consumer_id: string }) => c.consumer_id)).toEqual([pull.json.result.consumer_id]);

    // And a name that exists is served: the delete reaches that queue and no other.
    const del = await wrangler("delete", "zzz-other");
    expect(del.code, del.out).toBe(0);
    expect((await api("GET", "/zzz-other")).status).toBe(404);
    expect((await api("GET", "/aaa-victim")).status).toBe(200);
  }, 120_000);
});
