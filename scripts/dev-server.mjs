// Starting and stopping `wrangler dev` from Node: used by `npm start` and by the end-to-end tests.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** A TCP port nothing listens on right now. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = /** @type {import("node:net").AddressInfo} */ (srv.address());
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Starts `wrangler dev` with the given arguments, in its own process group so that
 * stopping it also stops the workerd it runs. Resolves once `readyUrl` answers.
 * @param {{ args: string[], readyUrl: string, log?: (line: string) => void, timeoutMs?: number, env?: Record<string, string> }} opts
 */
export async function startWrangler({ args, readyUrl, log, timeoutMs = 90_000, env = {} }) {
  const child = spawn(process.execPath, [wranglerBin(), "dev", ...args], {
    cwd: ROOT,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    // wrangler's local trace collector records every invocation (every RPC, alarm and queue()
    // call) and took a quarter of workerd's CPU in the benchmark's profile (bench/README.md);
    // X_LOCAL_OBSERVABILITY=true in the environment keeps it.
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", X_LOCAL_OBSERVABILITY: process.env.X_LOCAL_OBSERVABILITY ?? "false", ...env },
  });
  let output = "";
  const onData = (chunk) => {
    const text = chunk.toString();
    output = (output + text).slice(-20_000);
    if (log) for (const line of text.split("\n")) if (line.trim()) log(line);
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  let exited = null;
  child.on("exit", (code, signal) => (exited = { code, signal }));

  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`wrangler dev exited (${JSON.stringify(exited)}) before it was ready:\n${output}`);
    if (Date.now() > deadline) {
      stop(child);
      throw new Error(`wrangler dev was not ready within ${timeoutMs} ms:\n${output}`);
    }
    try {
      await fetch(readyUrl, { signal: AbortSignal.timeout(2000) });
      break;
    } catch {
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return {
    pid: child.pid,
    output: () => output,
    /** Stops wrangler and workerd by process group; `signal` SIGKILL makes it a hard kill. */
    stop: (signal = "SIGTERM") => stop(child, signal),
  };
}

async function stop(child, signal = "SIGTERM") {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const done = new Promise((r) => child.once("exit", r));
  try {
    process.kill(-child.pid, signal);
  } catch {
    return;
  }
  const timer = setTimeout(() => {
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {}
  }, 10_000);
  await done;
  clearTimeout(timer);
}

function wranglerBin() {
  return fileURLToPath(new URL("../node_modules/wrangler/bin/wrangler.js", import.meta.url));
}
