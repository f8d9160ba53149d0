// What the end-to-end tests share: the local token and its headers, a client of a running
// service through the package's own client library (`shardq/client`, the built lib/ a user
// imports, so that the tests drive what ships), and the waits and looks at processes and
// directories the dev-session tests make.
import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { createClient, type ClientOptions, type ShardqClient } from "shardq/client";
import { LOCAL_TOKEN } from "../../cli/workers/dev-session.mjs";
import { sleep } from "../../src/kernel/sleep.ts";

/** The token every local service accepts (`.dev.vars`). */
export const TOKEN: string = LOCAL_TOKEN;
/** The token alone, for reads. */
export const AUTH = { authorization: `Bearer ${TOKEN}` };
/** The token and a JSON body. */
export const HEADERS = { ...AUTH, "content-type": "application/json" };

/** A client of the service at `base` under the local token; `opts` adds to or replaces its options (retry, account). */
export const clientOf = (base: string, opts: Partial<ClientOptions> = {}): ShardqClient =>
  createClient({ url: base, token: TOKEN, ...opts });

/** Reads until `done` holds of the value or `timeoutMs` has passed, every 250 ms; answers the last value either way. */
export async function waitFor<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await sleep(250);
  }
}

/** Whether any process of the group `pid` leads is still alive. */
export function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Every path under `dir` that `keep` keeps (hidden ones included, symlinks not followed), with its size and mtime. */
export function listTree(
  dir: string,
  keep: (path: string) => boolean = () => true,
  base = dir,
  out = new Map<string, string>(),
): Map<string, string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const rel = path.slice(base.length + 1);
    if (!keep(rel)) continue;
    const st = lstatSync(path);
    out.set(rel, st.isDirectory() ? "dir" : `${st.size} ${st.mtimeMs}`);
    if (st.isDirectory() && !st.isSymbolicLink()) listTree(path, keep, base, out);
  }
  return out;
}
