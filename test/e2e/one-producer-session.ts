// `shardq dev` (cli/workers/dev-session.mjs, what the CLI runs) with one producer Worker written
// for Cloudflare Queues, as a user would have it: a wrangler.toml with [[queues.producers]] and
// nothing of shardq's. Each process runs in its own `wrangler dev`, the producer's binding
// reaching shardq across processes through the dev registry, as under `npx shardq dev`.
// Everything either prints (stdout and stderr) is kept, by process. The Worker answers
// POST / with { op: "send", body, options } or { op: "sendBatch", messages, options } by
// calling the named binding, and says what the call resolved to or rejected with.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../cli/wrangler/dev-server.mjs";
import { startDevSession } from "../../cli/workers/dev-session.mjs";
import { HEADERS as headers } from "./helpers.ts";

export const PRODUCER_SOURCE = `export default {
  async fetch(request, env) {
    const { binding = "JOBS", op, body, options, messages } = await request.json();
    try {
      const result = op === "send" ? await env[binding].send(body, options) : await env[binding].sendBatch(messages, options);
      return Response.json({ ok: true, result });
    } catch (err) {
      return Response.json({ ok: false, name: err.name, message: err.message });
    }
  },
};
`;

/** What the producer Worker says a binding call came to. */
export type CallOutcome =
  { ok: true; result: { messageId?: string; messageIds?: string[] } } | { ok: false; name: string; message: string };

export interface OneProducerSession {
  /** shardq's base URL. */
  shardq: string;
  /** Everything the processes printed so far, each line prefixed with its process's name. */
  log(): string;
  /** One binding call through the producer Worker. */
  call(request: {
    binding?: string;
    op: "send" | "sendBatch";
    body?: unknown;
    options?: unknown;
    messages?: unknown;
  }): Promise<CallOutcome>;
  /** shardq's HTTP API for the account "local": `path` after /accounts/local/queues. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }>;
  stop(): Promise<void>;
}

/**
 * @param name       the Worker's name, and the temporary directory's
 * @param producers  the [[queues.producers]] tables of its wrangler.toml, as TOML text
 */
export async function startOneProducer(name: string, producers: string): Promise<OneProducerSession> {
  const work = mkdtempSync(join(tmpdir(), `shardq-e2e-${name}-`));
  const dir = join(work, "producer");
  mkdirSync(join(dir, "src"), { recursive: true });
  writeFileSync(join(dir, "src", "index.js"), PRODUCER_SOURCE);
  // Ports of the machine's choosing, as a user may set them: `shardq dev` would otherwise take the
  // first free from 8787 (and 9229 for the inspector), which other wrangler processes reach for too.
  const [port, inspector, shardqPort] = await distinctFreePorts(3);
  writeFileSync(
    join(dir, "wrangler.toml"),
    `name = "${name}"\nmain = "src/index.js"\ncompatibility_date = "2026-11-01"\n\n${producers}\n\n[dev]\nport = ${port}\ninspector_port = ${inspector}\n`,
  );
  const lines: string[] = [];
  let session: Awaited<ReturnType<typeof startDevSession>>;
  try {
    session = await startDevSession({
      configs: [join(dir, "wrangler.toml")],
      port: shardqPort,
      stateDir: join(work, "state"),
      cwd: work,
      log: (source, line) => lines.push(`[${source}] ${line}`),
      warn: (text) => lines.push(`[shardq dev] warning: ${text}`),
    });
  } catch (err) {
    rmSync(work, { recursive: true, force: true });
    throw err;
  }
  const worker = session.workers[0]!.url;
  return {
    shardq: session.shardq.url,
    log: () => lines.join("\n"),
    call: async (request) => {
      const res = await fetch(`${worker}/`, { method: "POST", body: JSON.stringify(request) });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`the producer Worker answered ${res.status}: ${text.slice(0, 2000)}`);
      return JSON.parse(text) as CallOutcome;
    },
    api: async (method, path, body) => {
      const res = await fetch(`${session.shardq.url}/accounts/local/queues${path}`, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await res.text();
      return { status: res.status, json: text ? JSON.parse(text) : null };
    },
    stop: async () => {
      await session.stop();
      rmSync(work, { recursive: true, force: true });
    },
  };
}

async function distinctFreePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add((await freePort()) as number);
  return [...ports];
}
