// The package test's commands and its user's project (package.test.ts): npm, npx and node run
// as in a user's shell, outside this checkout's npm environment, and the producer and consumer
// Workers that project holds, written for Cloudflare Queues on shardq's helpers.
import { spawn } from "node:child_process";
import { delimiter, dirname } from "node:path";

export interface Run {
  code: number | null;
  out: string;
  err: string;
}

/**
 * The environment of every npm, npx and node this test starts: this process's, without what
 * `npm test` puts in it (npm_config_*, npm_package_*, INIT_CWD: they would point npm in the
 * user's project back at this checkout), and with this process's Node first on the PATH
 * (wrangler needs 22.12 or newer; under `npm test` that is the `node` devDependency).
 */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k) && k !== "INIT_CWD") env[k] = v;
  env.PATH = [dirname(process.execPath), process.env.PATH ?? ""].join(delimiter);
  return { ...env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1", ...extra };
}

/** A command to its end, or killed (with its process group) after `timeoutMs`. */
export function run(
  command: string,
  args: string[],
  opts: { cwd: string; timeoutMs: number; env?: Record<string, string> },
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: opts.cwd,
      env: cleanEnv(opts.env),
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let out = "";
    let err = "";
    child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {}
      reject(
        new Error(
          `${command} ${args.join(" ")} did not finish within ${opts.timeoutMs} ms:\n${out.slice(-3000)}\n${err.slice(-3000)}`,
        ),
      );
    }, opts.timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

export const PRODUCER_CONFIG = (port: number) => `name = "shop-producer"
main = "src/index.ts"
compatibility_date = "2026-11-01"

[[queues.producers]]
binding = "ORDERS"
queue = "orders"

[dev]
port = ${port}
`;

/** A producer Worker that batches its sends with shardq/producer. */
export const PRODUCER_SOURCE = `import { batchingQueue, type BatchingQueue } from "shardq/producer";

interface Env {
  ORDERS: Queue<{ from: string; n: number }>;
}

let orders: BatchingQueue<{ from: string; n: number }> | undefined;

export default {
  async fetch(request, env): Promise<Response> {
    const url = new URL(request.url);
    if (request.method !== "POST" || url.pathname !== "/send") return new Response("POST /send?count=N", { status: 404 });
    orders ??= batchingQueue(env.ORDERS, { lingerMs: 5 });
    const count = Number(url.searchParams.get("count") ?? "1");
    const results = await Promise.all(Array.from({ length: count }, (_, n) => orders!.send({ from: "producer", n })));
    return Response.json({ sent: count, ids: new Set(results.map((r) => (r as { messageId?: string } | undefined)?.messageId)).size });
  },
} satisfies ExportedHandler<Env>;
`;

export const CONSUMER_CONFIG = (port: number) => `name = "shop-consumer"
main = "src/index.ts"
compatibility_date = "2026-11-01"

[[queues.consumers]]
queue = "orders"
max_batch_size = 10
max_batch_timeout = 1

[dev]
port = ${port}
`;

/**
 * A consumer Worker with its queue() handler and, for a deploy by hand, the ShardqConsumer
 * entrypoint from shardq/consumer (README, "Deploy to Cloudflare"). It keeps what it received
 * in memory (one isolate under wrangler dev) and shows it at GET /received.
 */
export const CONSUMER_SOURCE = `import { consumerEntrypoint } from "shardq/consumer";

const received: unknown[] = [];

const handler = {
  async queue(batch: MessageBatch): Promise<void> {
    for (const message of batch.messages) {
      received.push(message.body);
      message.ack();
    }
  },
  async fetch(request: Request): Promise<Response> {
    if (new URL(request.url).pathname === "/received") return Response.json({ received });
    return new Response("GET /received", { status: 404 });
  },
} satisfies ExportedHandler;

export default handler;
export const ShardqConsumer = consumerEntrypoint(handler);
`;
