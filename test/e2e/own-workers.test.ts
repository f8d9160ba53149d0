// Your own Workers, unchanged: the producer and consumer of test/fixtures/own-workers (configs with
// nothing but [[queues.producers]] / [[queues.consumers]]) run under `shardq dev` as a user
// runs it: from a project directory outside shardq, with shardq "installed" in it
// (node_modules/shardq, a symlink to this checkout, as `npm install <dir>` makes), on free
// loopback ports, stopped by PID. Then `shardq deploy-config` on the same configs, every
// file it writes bundled by `wrangler deploy --dry-run`, and the configs it must refuse.
import { spawn, type ChildProcess } from "node:child_process";
import {
  appendFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, freePort } from "../../cli/wrangler/dev-server.mjs";
import { dryRunDeployConfig } from "../../scripts/deploy-dry-run-own-workers.mjs";
import { sleep } from "../../src/kernel/sleep.ts";
import { groupAlive, HEADERS as headers, listTree, waitFor } from "./helpers.ts";

const RUNNING = "shardq dev is running";

interface Received {
  deliveries: number;
  distinct_ids: number;
  largest_batch: number;
  queues: string[];
  bodies: Array<{ order?: number; retry?: boolean }>;
  retried: number;
}

/** A CLI run to its end. */
interface Run {
  code: number | null;
  out: string;
}

describe("shardq dev and deploy-config with the user's own Workers", () => {
  const work = mkdtempSync(join(tmpdir(), "shardq-e2e-own-workers-"));
  const project = join(work, "shop");
  const state = join(work, "state");
  const cli = join(project, "node_modules", "shardq", "bin", "shardq.mjs");
  let shardqPort = 0;
  let producerPort = 0;
  let consumerPort = 0;
  let before = new Map<string, string>();
  let dev: { child: ChildProcess; output: () => string; pids: number[] } | undefined;

  const api = (path: string) => `http://127.0.0.1:${shardqPort}/accounts/local/queues${path}`;
  const producer = (path: string) => `http://127.0.0.1:${producerPort}${path}`;
  const consumer = (path: string) => `http://127.0.0.1:${consumerPort}${path}`;

  beforeAll(async () => {
    // The user's project: the two Workers as they are, plus the [dev] ports a user might set
    // (free ones here), and shardq installed.
    cpSync(join(ROOT, "test", "fixtures", "own-workers"), project, { recursive: true });
    const ports = new Set<number>();
    while (ports.size < 3) ports.add(await freePort());
    [shardqPort, producerPort, consumerPort] = [...ports] as [number, number, number];
    appendFileSync(join(project, "producer", "wrangler.toml"), `\n[dev]\nport = ${producerPort}\n`);
    appendFileSync(join(project, "consumer", "wrangler.toml"), `\n[dev]\nport = ${consumerPort}\n`);
    mkdirSync(join(project, "node_modules"));
    symlinkSync(ROOT, join(project, "node_modules", "shardq"), "dir");
    before = listTree(project);
  });

  afterAll(async () => {
    await stopDev();
    rmSync(work, { recursive: true, force: true });
  });

  /** Starts `shardq dev` from the project; resolves once it says everything runs. */
  async function startDev() {
    const child = spawn(
      process.execPath,
      [
        cli,
        "dev",
        "-c",
        "producer/wrangler.toml",
        "-c",
        "consumer/wrangler.toml",
        "--port",
        String(shardqPort),
        "--state",
        state,
      ],
      {
        cwd: project,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let output = "";
    child.stdout!.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (output += c.toString()));
    const deadline = Date.now() + 120_000;
    while (!output.includes(RUNNING)) {
      if (child.exitCode !== null) throw new Error(`shardq dev exited with ${child.exitCode}:\n${output.slice(-5000)}`);
      if (Date.now() > deadline) {
        child.kill("SIGTERM");
        throw new Error(`shardq dev was not running within 120 s:\n${output.slice(-5000)}`);
      }
      await sleep(200);
    }
    // It prints the pid of each wrangler dev it started, so that nothing can outlive the test.
    await sleep(100);
    const pids = [...output.slice(output.indexOf(RUNNING)).matchAll(/\(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(pids).toHaveLength(3);
    dev = { child, output: () => output, pids };
    return dev;
  }

  /** SIGTERM by PID, as Ctrl-C would; returns its exit code. Every process it started must be gone. */
  async function stopDev() {
    const d = dev;
    dev = undefined;
    if (!d) return null;
    const exited = new Promise<number | null>((resolve) =>
      d.child.exitCode !== null ? resolve(d.child.exitCode) : d.child.once("exit", (code) => resolve(code)),
    );
    d.child.kill("SIGTERM");
    const timer = setTimeout(() => d.child.kill("SIGKILL"), 30_000);
    const code = await exited;
    clearTimeout(timer);
    // By the time it exits, every wrangler and workerd it started has exited too.
    const alive = d.pids.filter(groupAlive);
    for (const pid of alive) process.kill(-pid, "SIGKILL");
    expect(alive, `process groups left running by shardq dev:\n${d.output().slice(-3000)}`).toEqual([]);
    return code;
  }

  async function received(): Promise<Received> {
    const res = await fetch(consumer("/received"));
    expect(res.status).toBe(200);
    return (await res.json()) as Received;
  }

  async function backlog(queue: string): Promise<number> {
    const res = await fetch(api(`/${queue}/metrics`), { headers });
    expect(res.status).toBe(200);
    return ((await res.json()) as { result: { backlog_count: number } }).result.backlog_count;
  }

  async function consumers(queue: string) {
    const res = await fetch(api(`/${queue}/consumers`), { headers });
    expect(res.status).toBe(200);
    return (
      (await res.json()) as {
        result: Array<{
          consumer_id: string;
          type: string;
          script_name: string;
          dead_letter_queue: string | null;
          settings: Record<string, unknown>;
        }>;
      }
    ).result;
  }

  it("delivers every message the user's producer sends to the user's consumer, with the consumer settings of its wrangler.toml", async () => {
    await startDev();
    expect(dev!.output()).toMatch(new RegExp(`own-workers-producer  http://127\\.0\\.0\\.1:${producerPort}`));
    expect(dev!.output()).toMatch(new RegExp(`own-workers-consumer  http://127\\.0\\.0\\.1:${consumerPort}`));

    // send() one at a time, sendBatch() 20 at a time, and one message the consumer retries until it is dead-lettered.
    for (const [query, sent] of [
      ["count=60&batch=1", 60],
      ["count=140&batch=20&from=60", 140],
    ] as const) {
      const res = await fetch(producer(`/send?${query}`), { method: "POST" });
      expect(res.status, await res.clone().text()).toBe(200);
      expect(await res.json()).toEqual({ sent });
    }
    expect(
      (await fetch(producer("/send-json"), { method: "POST", body: JSON.stringify({ retry: true }) })).status,
    ).toBe(200);

    const orders = Array.from({ length: 200 }, (_, i) => i);
    const got = await waitFor(
      received,
      (r) => r.bodies.filter((b) => b.retry).length >= 3 && orders.every((o) => r.bodies.some((b) => b.order === o)),
      60_000,
    );
    expect(got.queues).toEqual(["own-orders"]);
    expect(got.largest_batch).toBeLessThanOrEqual(5); // max_batch_size
    // max_retries = 2: the retried message is delivered 3 times, then moved to the dead-letter queue.
    expect(got.bodies.filter((b) => b.retry)).toHaveLength(3);
    expect(
      await waitFor(
        () => backlog("own-orders-dlq"),
        (n) => n === 1,
        20_000,
      ),
    ).toBe(1);

    const [c, ...others] = await consumers("own-orders");
    expect(others).toEqual([]);
    expect(c).toMatchObject({
      type: "worker",
      script_name: "own-workers-consumer",
      dead_letter_queue: "own-orders-dlq",
      settings: {
        batch_size: 5,
        max_wait_time_ms: 1000,
        max_retries: 2,
        retry_delay: 1,
        max_concurrency: 2,
        transport: "rpc",
      },
    });
  });

  it("keeps the queues, the consumer, the backlog and the Workers' own state across a restart", async () => {
    const consumerId = (await consumers("own-orders"))[0]?.consumer_id;
    const deliveredBefore = (await received()).deliveries;
    expect(await stopDev()).toBe(0);

    await startDev();
    const list = await fetch(api(""), { headers });
    const names = ((await list.json()) as { result: Array<{ queue_name: string }> }).result
      .map((q) => q.queue_name)
      .sort();
    expect(names).toEqual(["own-orders", "own-orders-dlq"]);
    expect((await consumers("own-orders"))[0]?.consumer_id).toBe(consumerId);
    expect(await backlog("own-orders-dlq")).toBe(1);
    expect((await received()).deliveries).toBe(deliveredBefore);

    expect((await fetch(producer("/send?count=10&batch=5&from=1000"), { method: "POST" })).status).toBe(200);
    // Usually under a second; now and then ~20 s after a restart: a batch waits, without an
    // error, until the consumer shard's last "running" report is three heartbeats old.
    const after = await waitFor(received, (r) => r.bodies.filter((b) => (b.order ?? 0) >= 1000).length >= 10, 40_000);
    expect(
      after.bodies
        .filter((b) => (b.order ?? 0) >= 1000)
        .map((b) => b.order)
        .sort(),
    ).toEqual(Array.from({ length: 10 }, (_, i) => 1000 + i));
    expect(await stopDev()).toBe(0);
  });

  it("wrote nothing into the user's project: everything it generated is in the state directory", () => {
    expect(listTree(project)).toEqual(before);
    expect(readdirSync(state).sort()).toEqual(["configs.json", "persist", "registry", "shardq", "workers"]);
  });

  it("writes deploy configs that `wrangler deploy --dry-run` bundles, with no experimental flag", async () => {
    // Where a user would keep them: in the project, next to the Workers.
    const out = join(project, "shardq-deploy");
    const run = await runCli(
      [
        "deploy-config",
        "-c",
        "producer/wrangler.toml",
        "-c",
        "consumer/wrangler.toml",
        "--out",
        "shardq-deploy",
        "--account",
        "acme",
        "--json",
      ],
      project,
    );
    expect(run.code, run.out).toBe(0);
    const result = JSON.parse(run.out) as import("../../cli/workers/deploy-config.mjs").DeployConfig;

    const producerConfig = readFileSync(join(out, "own-workers-producer", "wrangler.toml"), "utf8");
    expect(producerConfig).not.toMatch(/^\[+queues/m);
    expect(producerConfig).toMatch(/binding = "ORDERS"\nservice = "shardq"\nentrypoint = "QueueProducer"/);
    expect(producerConfig).toMatch(/account = "acme"\nqueue = "own-orders"/);
    const consumerConfig = readFileSync(join(out, "own-workers-consumer", "wrangler.toml"), "utf8");
    expect(consumerConfig).toMatch(/^main = "\.\/shardq-consumer-entry\.mjs"$/m);
    // Installed as a package, the entry finds shardq by name: it survives a fresh install.
    expect(readFileSync(join(out, "own-workers-consumer", "shardq-consumer-entry.mjs"), "utf8")).toMatch(
      /from "shardq\/consumer"/,
    );
    expect(readFileSync(result.services, "utf8")).toMatch(
      /\[\[services\]\]\nbinding = "CONSUMER_OWN_WORKERS_CONSUMER"\nservice = "own-workers-consumer"\nentrypoint = "ShardqConsumer"/,
    );
    expect(JSON.parse(readFileSync(result.queues, "utf8"))).toMatchObject({
      account: "acme",
      queues: [
        {
          queue_name: "own-orders",
          consumer: {
            type: "worker",
            script_name: "own-workers-consumer",
            dead_letter_queue: "own-orders-dlq",
            settings: { batch_size: 5, max_wait_time_ms: 1000, transport: "rpc" },
          },
        },
        { queue_name: "own-orders-dlq" },
      ],
    });

    const dryRuns = dryRunDeployConfig(result, join(work, "bundles"));
    expect(dryRuns.map((r) => r.name)).toEqual(["own-workers-producer", "own-workers-consumer", "shardq"]);
    for (const r of dryRuns) expect(r.ok, `${r.name}:\n${r.output}`).toBe(true);
  });

  it("refuses a config it cannot use with exit status 2 and a message naming the problem", async () => {
    const bad = join(work, "bad");
    const write = (file: string, text: string) => {
      mkdirSync(join(bad, file, ".."), { recursive: true });
      writeFileSync(join(bad, file), text);
    };
    write("noname/wrangler.toml", 'main = "src/index.js"\n');
    write("noqueue/wrangler.json", '{ "name": "w", "queues": { "producers": [{ "binding": "Q" }] } }');
    write("two/a.toml", 'name = "a"\n[[queues.consumers]]\nqueue = "jobs"\n');
    write("two/b.toml", 'name = "b"\n[[queues.consumers]]\nqueue = "jobs"\n');
    write(
      "fetch-only/wrangler.toml",
      'name = "fetch-only"\nmain = "src/index.js"\ncompatibility_date = "2026-11-01"\n[[queues.consumers]]\nqueue = "jobs"\n',
    );
    write("fetch-only/src/index.js", 'export default { async fetch() { return new Response("hi"); } };\n');
    const devIn = (...args: string[]) =>
      runCli(["dev", ...args, "--state", join(bad, "state"), "--port", String(shardqPort)], bad);

    const cases: Array<[string[], RegExp]> = [
      [["-c", "missing/wrangler.toml"], /cannot read missing\/wrangler\.toml: no such file/],
      [["-c", "noname/wrangler.toml"], /noname\/wrangler\.toml has no name/],
      [["-c", "noqueue/wrangler.json"], /\[\[queues\.producers\]\] #1 names no queue/],
      [["-c", "two/a.toml", "-c", "two/b.toml"], /queue "jobs" has a consumer in two\/a\.toml and in two\/b\.toml/],
      [
        ["-c", "fetch-only"],
        /Worker "fetch-only" consumes a queue, but the default export of .*fetch-only\/src\/index\.js has no queue\(\) handler/,
      ],
    ];
    for (const [args, message] of cases) {
      const r = await devIn(...args);
      expect(r.out, args.join(" ")).toMatch(message);
      expect(r.code, `${args.join(" ")}\n${r.out}`).toBe(2);
    }
  });

  /** Runs the installed CLI to its end (bounded). */
  function runCli(args: string[], cwd: string): Promise<Run> {
    return new Promise((resolve, reject) => {
      const child = spawn(process.execPath, [cli, ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] });
      let out = "";
      child.stdout.on("data", (c: Buffer) => (out += c.toString()));
      child.stderr.on("data", (c: Buffer) => (out += c.toString()));
      const timer = setTimeout(() => child.kill("SIGTERM"), 90_000);
      child.on("error", reject);
      child.on("close", (code) => {
        clearTimeout(timer);
        resolve({ code, out });
      });
    });
  }
});
