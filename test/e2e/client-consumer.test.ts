// The client library against `wrangler dev`: the consumer loop as a Node service runs it.
// Concurrency, per-key order, leases kept alive past their timeout, retries with a delay,
// a stop that lets running handlers finish, and a hard kill of the service while the loop
// runs: the loop carries on once the service is back, and every message is handled.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { applyConfig } from "../../cli/workers/apply-config.mjs";
import { freePort, ROOT, startWrangler } from "../../cli/wrangler/dev-server.mjs";
import { AbortedError, NetworkError, type ConsumeSummary, type ConsumedMessage, type QueueClient } from "shardq/client";
import { sleep } from "../../src/kernel/sleep.ts";
import { clientOf, TOKEN } from "./helpers.ts";

type Server = Awaited<ReturnType<typeof startWrangler>>;

describe("the client's consumer loop under wrangler dev", () => {
  const stateDir = mkdtempSync(join(tmpdir(), "shardq-e2e-client-"));
  const registry = mkdtempSync(join(tmpdir(), "shardq-e2e-registry-"));
  let port = 0;
  let service: Server | undefined;
  const start = async () => {
    service = await startWrangler({
      args: [
        "-c",
        "wrangler.toml",
        "--port",
        String(port),
        "--ip",
        "127.0.0.1",
        "--persist-to",
        stateDir,
        "--inspector-port",
        "0",
      ],
      readyUrl: `http://127.0.0.1:${port}/healthz`,
      env: { WRANGLER_REGISTRY_PATH: registry },
    });
  };
  const client = () =>
    clientOf(`http://127.0.0.1:${port}`, { retry: { attempts: 5, baseDelayMs: 50, maxDelayMs: 500 } });

  /** A new queue with an HTTP pull consumer. */
  const newQueue = async (name: string): Promise<QueueClient<{ i: number; key?: string }>> => {
    const c = client();
    await c.request("POST", "/queues", { body: { queue_name: name } });
    await c.request("POST", `/queues/${name}/consumers`, { body: { type: "http_pull", settings: { max_retries: 5 } } });
    return c.queue(name);
  };
  const backlog = async (name: string) =>
    (await client().request<{ backlog_count: number }>("GET", `/queues/${name}/metrics`)).backlog_count;

  /** Runs the loop until `done` says so (or `ms` pass), then stops it; answers its summary. */
  const consumeUntil = async (
    q: QueueClient<{ i: number; key?: string }>,
    handler: (m: ConsumedMessage<{ i: number; key?: string }>) => unknown,
    done: () => boolean,
    options: Parameters<QueueClient["consume"]>[1] = {},
    ms = 60_000,
  ): Promise<ConsumeSummary> => {
    const stop = new AbortController();
    const loop = q.consume(handler, { waitTimeMs: 1000, ...options, signal: stop.signal });
    const deadline = Date.now() + ms;
    while (!done() && Date.now() < deadline) await sleep(50);
    stop.abort();
    return loop;
  };

  beforeAll(async () => {
    port = await freePort();
    await start();
  });

  afterAll(async () => {
    await service?.stop();
    rmSync(stateDir, { recursive: true, force: true });
    rmSync(registry, { recursive: true, force: true });
  });

  it("handles every message once, never more handlers at once than its concurrency, each key's messages in order", async () => {
    const q = await newQueue("client-order");
    const keys = ["a", "b", "c", "d", "e"];
    const batch = Array.from({ length: 400 }, (_, i) =>
      i < 300 ? { body: { i, key: keys[i % 5]! }, orderingKey: keys[i % 5]! } : { body: { i } },
    );
    const sent = await q.sendBatch(batch);
    expect(sent.requests).toBe(4);

    const handled: number[] = [];
    const byKey = new Map<string, number[]>();
    let running = 0;
    let most = 0;
    const summary = await consumeUntil(
      q,
      async (m) => {
        running++;
        most = Math.max(most, running);
        // Uneven work, so that handlers started together do not end in the order they started.
        await sleep(Math.random() * 6);
        handled.push(m.body.i);
        if (m.body.key) byKey.set(m.body.key, [...(byKey.get(m.body.key) ?? []), m.body.i]);
        running--;
      },
      () => handled.length >= 400,
      { concurrency: 8 },
    );
    expect(handled.sort((a, b) => a - b)).toEqual(Array.from({ length: 400 }, (_, i) => i));
    expect(most).toBeLessThanOrEqual(8);
    expect(most).toBeGreaterThan(1);
    for (const [key, seen] of byKey) expect(seen, key).toEqual([...seen].sort((a, b) => a - b));
    expect(summary).toMatchObject({ handled: 400, failed: 0, acked: 400, retried: 0 });
    expect(await backlog("client-order")).toBe(0);
  });

  it("keeps a lease alive while its handler runs past the visibility timeout", async () => {
    const q = await newQueue("client-extend");
    await q.sendBatch([{ body: { i: 1 } }, { body: { i: 2 } }]);
    const seen: Array<{ i: number; attempts: number }> = [];
    const summary = await consumeUntil(
      q,
      async (m) => {
        await sleep(3_000);
        seen.push({ i: m.body.i, attempts: m.attempts });
      },
      () => seen.length >= 2,
      { visibilityTimeoutMs: 1_000, concurrency: 2 },
    );
    // Leased for 1 s, handled for 3 s: delivered once, never a second time while it ran.
    expect(seen.sort((a, b) => a.i - b.i)).toEqual([
      { i: 1, attempts: 1 },
      { i: 2, attempts: 1 },
    ]);
    expect(summary.acked).toBe(2);
    expect(await backlog("client-extend")).toBe(0);
  });

  it("retries a message whose handler threw, after the delay it asks for", async () => {
    const q = await newQueue("client-retry");
    await q.send({ i: 7 });
    const attempts: Array<{ attempts: number; at: number }> = [];
    const summary = await consumeUntil(
      q,
      (m) => {
        attempts.push({ attempts: m.attempts, at: Date.now() });
        if (m.attempts === 1) throw new Error("first time fails");
      },
      () => attempts.length >= 2,
      { retryDelaySeconds: 2, onError: () => {} },
    );
    expect(attempts.map((a) => a.attempts)).toEqual([1, 2]);
    expect(attempts[1]!.at - attempts[0]!.at).toBeGreaterThanOrEqual(1_900);
    expect(summary).toMatchObject({ handled: 1, failed: 1, acked: 1, retried: 1 });
  });

  it("on stop, pulls no more, lets running handlers finish and settles them; what it never took stays ready for the next consumer", async () => {
    const q = await newQueue("client-stop");
    await q.sendBatch(Array.from({ length: 50 }, (_, i) => ({ body: { i } })));
    let started = 0;
    let finished = 0;
    const stop = new AbortController();
    const loop = q.consume(
      async () => {
        started++;
        if (started === 3) stop.abort();
        await sleep(500);
        finished++;
      },
      { concurrency: 3, batchSize: 3, signal: stop.signal },
    );
    const summary = await loop;
    expect(started).toBe(3);
    expect(finished).toBe(3);
    expect(summary).toMatchObject({ handled: 3, acked: 3 });
    // Nothing is left leased: the other 47 are ready at once.
    const rest = await q.pull({ batchSize: 100, visibilityTimeoutMs: 60_000 });
    expect(rest.messages).toHaveLength(47);
    await q.ack({ acks: rest.messages.map((m) => m.leaseId) });
  });

  it("a long poll whose client went away takes nothing: the next message goes to a pull someone reads", async () => {
    const q = await newQueue("client-abandon");
    for (let round = 0; round < 3; round++) {
      const gone = new AbortController();
      const abandoned = q.pull({ waitTimeMs: 20_000, signal: gone.signal }).catch((e: unknown) => e);
      await sleep(300);
      gone.abort();
      expect(await abandoned).toBeInstanceOf(AbortedError);
      await sleep(100);
      await q.send({ i: round });
      // Were the abandoned pull still waiting at the Coordinator, the send would wake it and
      // it would lease the message for nobody, for its whole visibility timeout.
      const { messages } = await q.pull({ batchSize: 10, waitTimeMs: 2_000 });
      expect(messages.map((m) => m.body)).toEqual([{ i: round }]);
      await q.ack({ acks: messages.map((m) => m.leaseId) });
    }
  });

  it("rides out a hard kill of the service: the loop resumes when it is back, and every message is handled", async () => {
    const q = await newQueue("client-kill");
    const total = 300;
    await q.sendBatch(Array.from({ length: total }, (_, i) => ({ body: { i } })));
    const handled = new Set<number>();
    const errors: unknown[] = [];
    const stop = new AbortController();
    const loop = q.consume(
      async (m) => {
        await sleep(20);
        handled.add(m.body.i);
      },
      {
        concurrency: 4,
        batchSize: 10,
        waitTimeMs: 1000,
        visibilityTimeoutMs: 3_000,
        signal: stop.signal,
        onError: (err) => errors.push(err),
      },
    );
    while (handled.size < 40) await sleep(20);
    await service!.stop("SIGKILL");
    const handledAtKill = handled.size;
    // A killed wrangler leaves its dev-registry entry behind; clear it as `npm start` does.
    rmSync(join(registry, "shardq"), { force: true });
    await start();
    // Messages whose acks the kill cut off come back when their leases end, and the loop
    // handles them again: it runs until every message was handled and the queue is empty.
    const deadline = Date.now() + 90_000;
    while ((handled.size < total || (await backlog("client-kill")) > 0) && Date.now() < deadline) await sleep(200);
    stop.abort();
    await loop;
    expect(handledAtKill).toBeLessThan(total);
    expect(errors.some((e) => e instanceof NetworkError)).toBe(true);
    expect(handled.size).toBe(total);
    expect(await backlog("client-kill")).toBe(0);
  });

  /** The example producer sends 150 messages, the example consumer handles them and stops on SIGINT. */
  const runExamples = async (runtime: string[]) => {
    const version = spawnSync(runtime[0]!, ["--version"], { encoding: "utf8" }).stdout.trim().split("\n")[0];
    const env = { ...process.env, SHARDQ_URL: `http://127.0.0.1:${port}`, NO_COLOR: "1" };
    const produced = spawnSync(runtime[0]!, [...runtime.slice(1), "examples/node-consumer/producer.mjs", "150"], {
      cwd: ROOT,
      env,
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(produced.status, `${version}: ${produced.stderr}`).toBe(0);
    expect(produced.stdout).toContain("sent 150 messages to example-pull in 2 request(s)");

    const consumer = spawn(runtime[0]!, [...runtime.slice(1), "examples/node-consumer/consumer.mjs"], {
      cwd: ROOT,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    consumer.stdout.on("data", (d) => (out += d));
    consumer.stderr.on("data", (d) => (err += d));
    const exited = new Promise<number | null>((resolve) => consumer.on("exit", (code) => resolve(code)));
    const handled = () => new Set([...out.matchAll(/"id":"([0-9a-f]{32})"/g)].map((m) => m[1])).size;
    const deadline = Date.now() + 60_000;
    while (handled() < 150 && Date.now() < deadline) await sleep(100);
    consumer.kill("SIGINT");
    expect(await exited, `${version}\n${out.slice(-2000)}\n${err.slice(-2000)}`).toBe(0);
    expect(handled()).toBe(150);
    expect(out).toMatch(/stopped: 150 handled, 0 failed, 150 acked, 0 retried/);
    expect(await backlog("example-pull")).toBe(0);
    return version;
  };

  it("runs the example consumer and producer (examples/node-consumer) through the built shardq/client: on npm's Node (Node 20 here), then on Deno", async () => {
    // shardq.config.json's pull queue and its dead-letter queue, as `npm start` makes them.
    const config = JSON.parse(readFileSync(join(ROOT, "shardq.config.json"), "utf8")) as {
      account: string;
      queues: Array<{ queue_name: string }>;
    };
    await applyConfig(`http://127.0.0.1:${port}`, TOKEN, {
      ...config,
      queues: config.queues.filter((q) => q.queue_name === "example-pull" || q.queue_name === "example-dlq"),
    });
    // npm's own Node when the test runs under npm; the package's Node otherwise.
    expect(await runExamples([process.env.npm_node_execpath ?? process.execPath])).toMatch(/^v\d+\./);
    // Deno, from the devDependency; it reads `shardq/client` through package.json's exports as Node does.
    expect(
      await runExamples([
        join(ROOT, "node_modules", ".bin", "deno"),
        "run",
        "--allow-net",
        "--allow-env",
        "--allow-read",
      ]),
    ).toMatch(/^deno 2\./);
  });

  it("builds shardq/client as one module that imports nothing, so it runs wherever fetch does", () => {
    const bundle = readFileSync(join(ROOT, "lib", "client", "index.js"), "utf8");
    expect(bundle).not.toMatch(/^\s*import\s/m);
    expect(bundle).not.toMatch(/\brequire\(/);
    expect(bundle).toMatch(/export\s*\{[^}]*createClient/);
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
      exports: Record<string, { types: string; default: string }>;
    };
    expect(pkg.exports["./client"]).toEqual({
      types: "./lib/types/client/index.d.ts",
      default: "./lib/client/index.js",
    });
    expect(readFileSync(join(ROOT, "lib", "types", "client", "index.d.ts"), "utf8")).toMatch(/from "\.\/client\.js"/);
  });
});
