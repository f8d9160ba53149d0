// `npx shardq` against `wrangler dev`: the CLI run as a child process, as a user runs it,
// through a whole session (queues, sends, a pull consumer, look-ups, pause, the
// dead-letter queue and its redrive, purge, Worker consumers, delete), with --json
// output parsed, and its failures: usage errors exit 2, API and connection errors exit 1,
// each saying what was wrong.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, freePort } from "../../cli/wrangler/dev-server.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";

const CLI = join(ROOT, "bin", "shardq.mjs");
const HEX32 = /^[0-9a-f]{32}$/;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

interface Pulled {
  message_backlog_count: number;
  messages: Array<{ id: string; body: string; attempts: number; lease_id: string; metadata: Record<string, string> }>;
}

describe("the shardq CLI against wrangler dev", () => {
  let service: DevService | undefined;
  let base = "";

  beforeAll(async () => {
    service = await startDevService("cli");
    base = service.base;
  });

  afterAll(async () => {
    await service?.stop();
  });

  /** Runs `shardq ...args` with SHARDQ_URL pointing at the test's service and nothing else set. */
  function shardq(args: string[], opts: { env?: Record<string, string>; input?: string } = {}): Promise<Run> {
    const env: Record<string, string | undefined> = { ...process.env, SHARDQ_URL: base, ...opts.env };
    if (!opts.env?.SHARDQ_TOKEN) delete env.SHARDQ_TOKEN;
    if (!opts.env?.SHARDQ_ACCOUNT) delete env.SHARDQ_ACCOUNT;
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, env, stdio: ["pipe", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
      child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code, stdout, stderr }));
      child.stdin.end(opts.input ?? "");
    });
  }

  /** Runs a command that must succeed and returns its stdout. */
  async function ok(...args: string[]): Promise<string> {
    const r = await shardq(args);
    expect(r.code, `shardq ${args.join(" ")}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`).toBe(0);
    return r.stdout;
  }

  /** Runs a command with --json that must succeed and returns its parsed output. */
  async function json<T = any>(...args: string[]): Promise<T> {
    return JSON.parse(await ok(...args, "--json")) as T;
  }

  const decode = (m: Pulled["messages"][number]) =>
    m.metadata["CF-Content-Type"] === "text" ? m.body : Buffer.from(m.body, "base64").toString("utf8");

  it("runs a whole session: queues, send, pull, look-up, pause, dead-letter and redrive, purge, consumers, delete", async () => {
    // Queues.
    expect(await ok("queues", "create", "cli-orders", "--message-retention-period-secs", "3600")).toMatch(
      /^Created queue cli-orders \(id [0-9a-f]{32}\)\./,
    );
    const dlq = await json("queues", "create", "cli-orders-dlq");
    expect(dlq.queue_name).toBe("cli-orders-dlq");
    expect(dlq.queue_id).toMatch(HEX32);

    const listed = await ok("queues", "list");
    expect(listed.split("\n")[0]).toMatch(/^NAME\s+ID\s+CREATED\s+PRODUCERS\s+CONSUMERS\s+DELIVERY$/);
    expect(listed).toMatch(/^cli-orders\s+[0-9a-f]{32}\s/m);
    expect(listed).toMatch(/^cli-orders-dlq\s+[0-9a-f]{32}\s/m);
    expect((await json<Array<{ queue_name: string }>>("queues", "list")).map((q) => q.queue_name)).toEqual([
      "cli-orders",
      "cli-orders-dlq",
    ]);

    const info = await ok("queues", "info", "cli-orders");
    expect(info).toMatch(/^name:\s+cli-orders$/m);
    expect(info).toMatch(/^retention:\s+3600 s \(1h\)$/m);
    expect(info).toMatch(/^delivery:\s+active$/m);
    expect(info).toMatch(/^consumer:\s+none$/m);
    expect(info).toMatch(/^backlog:\s+0 messages, 0 B$/m);

    // (The dead-letter queue's delay: a send right after an update may still see the old
    // settings through the broker's shard-map cache, and the sends below must not be delayed.
    // Dead-letter moves and redrives name their own delay of 0.)
    expect(await ok("queues", "update", "cli-orders-dlq", "--delivery-delay-secs", "5")).toMatch(
      /^Updated queue cli-orders-dlq\.\n[\s\S]*^delivery delay:\s+5 s$/m,
    );
    const updated = await json("queues", "info", "cli-orders-dlq");
    expect(updated.settings).toEqual({ delivery_delay: 5, delivery_paused: false, message_retention_period: 345600 });
    expect(updated.metrics.backlog_count).toBe(0);

    // Sends: one JSON body, then a batch of two text bodies.
    const sent = await ok("send", "cli-orders", '{"order": 42}');
    const orderId = /^Sent message ([0-9a-f]{32}) to queue cli-orders\.$/m.exec(sent)?.[1];
    expect(orderId, sent).toBeDefined();
    const batch = await json<{ message_ids: string[] }>("send", "cli-orders", "hello", "world");
    expect(batch.message_ids).toHaveLength(2);
    const [helloId, worldId] = batch.message_ids as [string, string];

    const found = await ok("message", "cli-orders", orderId!);
    expect(found).toMatch(new RegExp(`^id:\\s+${orderId}$`, "m"));
    expect(found).toMatch(/^state:\s+ready$/m);
    expect(found).toMatch(/^attempts:\s+0$/m);
    expect(found).toMatch(/^content type:\s+json$/m);
    expect((await json("queues", "info", "cli-orders")).metrics.backlog_count).toBe(3);

    // A pull consumer that dead-letters at the first retry.
    const pullWithout = await shardq(["pull", "cli-orders"]);
    expect(pullWithout.code).toBe(1);
    expect(pullWithout.stderr).toContain("shardq consumer http add cli-orders");
    expect(
      await ok(
        "consumer",
        "http",
        "add",
        "cli-orders",
        "--batch-size",
        "5",
        "--message-retries",
        "0",
        "--dead-letter-queue",
        "cli-orders-dlq",
      ),
    ).toMatch(/^Added an HTTP pull consumer to queue cli-orders\.\n[\s\S]*^dead-letter queue:\s+cli-orders-dlq$/m);

    const pulled = await json<Pulled>("pull", "cli-orders", "--batch-size", "10", "--visibility-timeout-ms", "120000");
    expect(pulled.messages.map(decode).sort()).toEqual(['{"order":42}', "hello", "world"].sort());
    expect(pulled.messages.every((m) => m.attempts === 1)).toBe(true);
    const lease = (id: string) => pulled.messages.find((m) => m.id === id)!.lease_id;
    expect(await ok("message", "cli-orders", orderId!)).toMatch(/^state:\s+leased$/m);

    expect(await ok("ack", "cli-orders", lease(helloId))).toMatch(/^Acked 1, retried 0/);
    expect(await ok("ack", "cli-orders", lease(worldId), "--retry")).toMatch(/^Acked 0, retried 1/);
    const dead = await json("message", "cli-orders", worldId);
    expect(dead).toMatchObject({ id: worldId, state: "dead_lettered", dead_letter_queue: "cli-orders-dlq" });
    expect(await ok("message", "cli-orders", worldId)).toMatch(
      /^queue:\s+cli-orders-dlq \(dead-letter queue of cli-orders\)$/m,
    );
    const gone = await shardq(["message", "cli-orders", helloId]);
    expect(gone.code).toBe(1);
    expect(gone.stderr).toContain(`message "${helloId}" not found`);

    expect(await ok("redrive", "cli-orders-dlq")).toMatch(/^Moved 1 message from cli-orders-dlq to cli-orders\.$/m);

    // Paused, a pull is refused; resumed, the redriven message comes back (the first one is still leased).
    expect(await ok("pause-delivery", "cli-orders")).toBe("Paused message delivery for queue cli-orders.\n");
    expect(await ok("queues", "info", "cli-orders")).toMatch(/^delivery:\s+paused$/m);
    const pausedPull = await shardq(["pull", "cli-orders"]);
    expect(pausedPull.code).toBe(1);
    expect(pausedPull.stderr).toMatch(/paused/);
    expect(pausedPull.stderr).toContain("shardq resume-delivery cli-orders");
    expect(await ok("queues", "resume-delivery", "cli-orders")).toBe(
      "Resumed message delivery for queue cli-orders.\n",
    );
    const again = await ok("pull", "cli-orders", "--ack");
    expect(again.split("\n")[0]).toMatch(/^ID\s+ATTEMPTS\s+SENT\s+TYPE\s+BODY$/);
    expect(again).toMatch(new RegExp(`^${worldId}\\s+1\\s+.*\\s+text\\s+world$`, "m"));
    expect(again).toMatch(/Pulled 1 message from queue cli-orders \(backlog \d+\)\. Acked 1 of them\./);

    // Purge: refused without --force off a terminal, then everything goes (the leased message too).
    await ok("send", "cli-orders", "a", "b");
    const stdinSend = await shardq(["send", "cli-orders", "-", "--json"], { input: '{"from": "stdin"}\n' });
    expect(stdinSend.code, stdinSend.stderr).toBe(0);
    const fromStdin = JSON.parse(stdinSend.stdout).message_id;
    expect(await json("message", "cli-orders", fromStdin)).toMatchObject({
      state: "ready",
      content_type: "json",
      size: '{"from":"stdin"}'.length,
    });
    const refused = await shardq(["purge", "cli-orders"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("--force");
    expect((await json("queues", "info", "cli-orders")).metrics.backlog_count).toBe(4);
    expect(await ok("purge", "cli-orders", "--force")).toBe("Purged 4 messages from queue cli-orders.\n");
    expect((await json("queues", "info", "cli-orders")).metrics.backlog_count).toBe(0);
    expect((await shardq(["message", "cli-orders", orderId!])).code).toBe(1);

    // Worker consumers, under both spellings.
    expect(await ok("consumer", "http", "remove", "cli-orders")).toBe(
      "Removed the HTTP pull consumer from queue cli-orders.\n",
    );
    const added = await ok(
      "queues",
      "consumer",
      "add",
      "cli-orders",
      "shardq-example-consumer",
      "--batch-size",
      "20",
      "--batch-timeout",
      "2.5",
      "--message-retries",
      "5",
      "--max-concurrency",
      "3",
      "--retry-delay-secs",
      "1",
      "--dead-letter-queue",
      "cli-orders-dlq",
    );
    expect(added).toMatch(/^Added consumer shardq-example-consumer to queue cli-orders\./);
    expect(added).toMatch(/^batch timeout:\s+2\.5s$/m);
    const [consumer] = await json<
      Array<{
        consumer_id: string;
        script_name: string;
        settings: Record<string, unknown>;
        dead_letter_queue: string | null;
      }>
    >("consumer", "list", "cli-orders");
    expect(consumer).toMatchObject({ script_name: "shardq-example-consumer", dead_letter_queue: "cli-orders-dlq" });
    expect(consumer!.settings).toMatchObject({
      batch_size: 20,
      max_wait_time_ms: 2500,
      max_retries: 5,
      max_concurrency: 3,
      retry_delay: 1,
    });
    expect(await ok("queues", "info", "cli-orders")).toMatch(
      /^consumer:\s+worker shardq-example-consumer \(batch 20, timeout 2\.5s, concurrency 3, 5 retries/m,
    );

    const changed = await json(
      "consumer",
      "update",
      "cli-orders",
      "--batch-size",
      "50",
      "--max-concurrency",
      "auto",
      "--no-dead-letter-queue",
    );
    expect(changed).toMatchObject({ consumer_id: consumer!.consumer_id, dead_letter_queue: null });
    expect(changed.settings).toMatchObject({ batch_size: 50, max_concurrency: null, max_retries: 5 });
    const wrongScript = await shardq(["consumer", "remove", "cli-orders", "no-such-script"]);
    expect(wrongScript.code).toBe(1);
    expect(wrongScript.stderr).toContain(
      "queue cli-orders has no consumer no-such-script (its consumer is worker shardq-example-consumer)",
    );
    expect(await ok("consumer", "remove", "cli-orders", "shardq-example-consumer")).toBe(
      "Removed consumer shardq-example-consumer from queue cli-orders.\n",
    );
    expect(await json("consumer", "list", "cli-orders")).toEqual([]);

    // Delete.
    expect(await ok("queues", "delete", "cli-orders")).toBe("Deleted queue cli-orders.\n");
    await ok("queues", "delete", "cli-orders-dlq");
    expect(await json("queues", "list")).toEqual([]);
  });

  it("exits 2 on usage errors, naming the command, flag or argument", async () => {
    const unknown = await shardq(["frobnicate"]);
    expect(unknown).toMatchObject({ code: 2, stdout: "" });
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
    const sub = await shardq(["queues", "frob"]);
    expect(sub.code).toBe(2);
    expect(sub.stderr).toContain('unknown command "queues frob"');
    expect(sub.stderr).toContain("shardq queues create <name>");

    const missing = await shardq(["queues", "create"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("shardq queues create: missing argument <name>");
    const missingId = await shardq(["message", "q"]);
    expect(missingId.code).toBe(2);
    expect(missingId.stderr).toContain("missing argument <id>");
    const extra = await shardq(["queues", "delete", "a", "b"]);
    expect(extra.code).toBe(2);
    expect(extra.stderr).toContain('unexpected argument "b"');

    const flag = await shardq(["queues", "create", "x", "--batch-size", "3"]);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("unknown option --batch-size");
    const notNumber = await shardq(["consumer", "add", "q", "s", "--batch-size", "ten"]);
    expect(notNumber.code).toBe(2);
    expect(notNumber.stderr).toContain('--batch-size must be a whole number, not "ten"');
    const badType = await shardq(["send", "q", "{", "--content-type", "json"]);
    expect(badType.code).toBe(2);
    expect(badType.stderr).toContain("<body> is not valid JSON");

    const remoteWithoutToken = await shardq(["queues", "list", "--url", "https://shardq.example.com"]);
    expect(remoteWithoutToken.code).toBe(2);
    expect(remoteWithoutToken.stderr).toContain("--token (or SHARDQ_TOKEN) is required");

    const help = await shardq(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("queues create <name>");
    expect(help.stdout).toContain("SHARDQ_URL");
    const commandHelp = await shardq(["consumer", "add", "--help"]);
    expect(commandHelp.code).toBe(0);
    expect(commandHelp.stdout).toContain("Usage: shardq consumer add <queue> <script> [options]");
    expect(commandHelp.stdout).toContain("--dead-letter-queue <queue>");
  });

  it("exits 1 on API and connection errors with the API's message, field and a next step", async () => {
    const noQueue = await shardq(["queues", "info", "no-such-queue"]);
    expect(noQueue).toMatchObject({ code: 1, stdout: "" });
    expect(noQueue.stderr).toContain(
      'queue "no-such-queue" not found [HTTP 404, code 10003, field queue, set by <queue>]',
    );
    const noQueueJson = await shardq(["purge", "no-such-queue", "--force", "--json"]);
    expect(noQueueJson.code).toBe(1);
    expect(noQueueJson.stderr).toContain('queue "no-such-queue" not found');

    const invalid = await shardq(["queues", "create", "bad-retention", "--message-retention-period-secs", "5"]);
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toContain("settings.message_retention_period: must be at least 60");
    expect(invalid.stderr).toContain("set by --message-retention-period-secs");

    const badJurisdiction = await shardq(["queues", "create", "cli-in-mars", "--jurisdiction", "mars"]);
    expect(badJurisdiction.code).toBe(1);
    expect(badJurisdiction.stderr).toContain('jurisdiction: must be one of "eu", "us", "fedramp"');
    expect(badJurisdiction.stderr).toContain("set by --jurisdiction");

    const badToken = await shardq(["queues", "list", "--token", "not-the-token"]);
    expect(badToken.code).toBe(1);
    expect(badToken.stderr).toContain("invalid token [HTTP 401");
    expect(badToken.stderr).toContain("check --token (or SHARDQ_TOKEN)");
    const envToken = await shardq(["queues", "list"], { env: { SHARDQ_TOKEN: "not-the-token" } });
    expect(envToken.code).toBe(1);
    const otherAccount = await shardq(["queues", "list"], { env: { SHARDQ_ACCOUNT: "someone-else" } });
    expect(otherAccount.code).toBe(1);
    expect(otherAccount.stderr).toContain("account not found");

    const closed = `http://127.0.0.1:${await freePort()}`;
    const refused = await shardq(["queues", "list", "--url", closed]);
    expect(refused).toMatchObject({ code: 1, stdout: "" });
    expect(refused.stderr).toContain(`cannot reach ${closed}: connection refused`);
    expect(refused.stderr).toContain("npm start");
  });

  it("creates a queue in a jurisdiction and shows it in info", async () => {
    expect(await ok("queues", "create", "cli-in-eu", "--jurisdiction", "eu")).toMatch(/^Created queue cli-in-eu/);
    expect(await ok("queues", "info", "cli-in-eu")).toMatch(/^jurisdiction:\s+eu$/m);
    expect((await json("queues", "info", "cli-in-eu")).metrics.jurisdiction).toBe("eu");
    await ok("queues", "create", "cli-in-none");
    expect(await ok("queues", "info", "cli-in-none")).toMatch(/^jurisdiction:\s+none$/m);

    // shardq.config.json's jurisdiction: created there, and a file that would move a queue is refused.
    const dir = mkdtempSync(join(tmpdir(), "shardq-cli-apply-"));
    try {
      const file = join(dir, "queues.json");
      writeFileSync(
        file,
        JSON.stringify({ account: "local", queues: [{ queue_name: "cli-applied-us", jurisdiction: "us" }] }),
      );
      expect(await ok("apply", file)).toMatch(/^Applied 1 queue/);
      expect((await json("queues", "info", "cli-applied-us")).jurisdiction).toBe("us");
      writeFileSync(
        file,
        JSON.stringify({ account: "local", queues: [{ queue_name: "cli-in-eu", jurisdiction: "fedramp" }] }),
      );
      const moved = await shardq(["apply", file]);
      expect(moved.code).toBe(1);
      expect(moved.stderr).toContain('queue cli-in-eu exists in jurisdiction "eu" and the config asks for "fedramp"');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("lists queues a page at a time and by name prefix, saying which page it shows and the next", async () => {
    const paged = ["cli-page-a", "cli-page-b", "cli-page-c", "cli-page-d", "cli-page-e", "cli-page-f", "cli-page-g"];
    for (const name of [...paged, "cli-pager"]) await ok("queues", "create", name);
    const prefix = "cli-page-";
    const second = await ok("queues", "list", "--prefix", prefix, "--page", "2", "--per-page", "3");
    expect(
      second
        .split("\n")
        .filter((l) => /^cli-/.test(l))
        .map((l) => l.split(/\s+/)[0]),
    ).toEqual(["cli-page-d", "cli-page-e", "cli-page-f"]);
    expect(second).toContain(
      '(page 2 of 3: queues 4 to 6 of 7 starting with "cli-page-"; next: shardq queues list --page 3 --per-page 3 --prefix cli-page-)',
    );
    const last = await ok("queues", "list", "--prefix", prefix, "--page", "3", "--per-page", "3");
    expect(last).toContain('(page 3 of 3: queues 7 to 7 of 7 starting with "cli-page-")');
    // Without --page: every match, all pages fetched.
    expect(
      (await json<Array<{ queue_name: string }>>("queues", "list", "--prefix", prefix, "--per-page", "2")).map(
        (q) => q.queue_name,
      ),
    ).toEqual(paged);
    expect(await ok("queues", "list", "--prefix", prefix)).toContain('(7 queues starting with "cli-page-")');
    expect(await ok("queues", "list", "--prefix", prefix, "--page", "9", "--per-page", "3")).toBe(
      'No queues on page 9: 7 queues starting with "cli-page-" in all, 3 pages of 3.\n',
    );
    expect(await ok("queues", "list", "--prefix", "cli-nothing")).toBe('No queues starting with "cli-nothing".\n');
    const bad = await shardq(["queues", "list", "--prefix", "Cli"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("query.name_prefix: must be the start of a queue name");
    expect(bad.stderr).toContain("set by --prefix");
    const badPage = await shardq(["queues", "list", "--page", "0"]);
    expect(badPage.code).toBe(1);
    expect(badPage.stderr).toContain("set by --page");
    for (const name of [...paged, "cli-pager"]) await ok("queues", "delete", name);
  });
});
