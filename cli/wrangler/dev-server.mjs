// Starting and stopping `wrangler dev` from Node: used by `npm start` and by the end-to-end tests.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

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

/** Whether nothing listens on `port` of `host` right now. @param {number} port @param {string} host @returns {Promise<boolean>} */
export function portIsFree(port, host) {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => resolve(false));
    srv.listen(port, host, () => srv.close(() => resolve(true)));
  });
}

/**
 * Starts `wrangler dev` with the given arguments, in its own process group so that
 * stopping it also stops the workerd it runs. Resolves once `readyUrl` answers, or, with
 * `readyLine`, once wrangler prints a line matching it (for a user's Worker, whose fetch
 * handler a probe must not call). `cwd` is where wrangler runs (default: shardq's root);
 * `signal` gives up the wait and stops it.
 * @param {{ args: string[], readyUrl: string, readyLine?: RegExp, log?: (line: string) => void, timeoutMs?: number, env?: Record<string, string>, cwd?: string, signal?: AbortSignal }} opts
 */
export async function startWrangler({
  args,
  readyUrl,
  readyLine,
  log,
  timeoutMs = 90_000,
  env = {},
  cwd = ROOT,
  signal,
}) {
  const child = spawn(process.execPath, [wranglerBin(), "dev", ...args], {
    cwd,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    // wrangler's local trace collector records every invocation (every RPC, alarm and queue()
    // call) and took a quarter of workerd's CPU in the benchmark's profile (bench/README.md);
    // X_LOCAL_OBSERVABILITY=true in the environment keeps it.
    env: {
      ...process.env,
      WRANGLER_SEND_METRICS: "false",
      X_LOCAL_OBSERVABILITY: process.env.X_LOCAL_OBSERVABILITY ?? "false",
      ...env,
    },
  });
  let output = "";
  let announced = false;
  const onData = (chunk) => {
    const text = chunk.toString();
    output = (output + text).slice(-20_000);
    announced ||= listensOn(output, readyUrl);
    if (log) for (const line of text.split("\n")) if (line.trim()) log(line);
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  /** @type {{ code: number | null, signal: NodeJS.Signals | null } | null} */
  let exited = null;
  /** @type {Promise<{ code: number | null, signal: NodeJS.Signals | null }>} */
  const exitedPromise = new Promise((resolve) =>
    child.on("exit", (code, sig) => {
      exited = { code, signal: sig };
      resolve(exited);
    }),
  );

  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) {
      const error = new Error(`wrangler dev exited (${JSON.stringify(exited)}) before it was ready:\n${output}`);
      throw /ERROR.*Address already in use/.test(output) ? Object.assign(error, { code: "EADDRINUSE" }) : error;
    }
    if (signal?.aborted) {
      await stop(child);
      throw new Error("wrangler dev was stopped before it was ready");
    }
    if (Date.now() > deadline) {
      stop(child);
      throw new Error(`wrangler dev was not ready within ${timeoutMs} ms:\n${output}`);
    }
    if (readyLine) {
      if (readyLine.test(output)) break;
      await new Promise((r) => setTimeout(r, 250));
      continue;
    }
    // Probed only once wrangler says it listens on readyUrl's port: between freePort() and
    // wrangler's bind another process can take the port (a pool's workerd, an inspector), and
    // its answer, a 403 from an inspector say, would pass for ours.
    if (!announced) {
      await new Promise((r) => setTimeout(r, 250));
      continue;
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
    /** Resolves when wrangler exits, for whatever reason. */
    exited: exitedPromise,
    /** Stops wrangler and workerd by process group; `signal` SIGKILL makes it a hard kill. */
    stop: (signal = "SIGTERM") => stop(child, signal),
  };
}

/**
 * startWrangler on a port freePort() found, which `opts` builds the arguments from; when another
 * process took the port before wrangler bound it, again on another, up to `attempts` times.
 * @param {(port: number) => Parameters<typeof startWrangler>[0]} opts
 * @returns {Promise<Awaited<ReturnType<typeof startWrangler>> & { port: number }>}
 */
export async function startWranglerOnFreePort(opts, attempts = 3) {
  for (let i = 1; ; i++) {
    const port = /** @type {number} */ (await freePort());
    try {
      return { ...(await startWrangler(opts(port))), port };
    } catch (e) {
      if (/** @type {{ code?: string }} */ (e).code !== "EADDRINUSE" || i >= attempts) throw e;
    }
  }
}

/** Whether wrangler's output says it is ready on `url`'s port. @param {string} output @param {string} url */
function listensOn(output, url) {
  const port = new URL(url).port;
  // eslint-disable-next-line no-control-regex
  const plain = output.replace(/\x1b\[[0-9;]*m/g, "");
  for (const m of plain.matchAll(/Ready on https?:\/\/[^\s/]*:(\d+)/g)) if (m[1] === port) return true;
  return false;
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
  // wrangler exits first; the workerd it ran, in the same group, can hold the port and the
  // state files for a second or two more. Stopped means the whole group is gone (bounded:
  // an unreaped zombie would stay "alive" for ever).
  const deadline = Date.now() + 15_000;
  while (groupAlive(child.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  clearTimeout(timer);
}

/** @param {number | undefined} pid  a process group's leader */
function groupAlive(pid) {
  if (pid === undefined) return false;
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Resolved from shardq's own location, not the caller's cwd: `npx shardq dev` runs from a user's project. */
export function wranglerBin() {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve("wrangler/package.json")), "bin", "wrangler.js");
}
