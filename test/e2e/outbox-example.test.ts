// examples/outbox-inbox runs as its header says, its code and config unchanged: on Cloudflare's
// local queues under `wrangler dev`, and on shardq under `shardq dev` from a user's project (the
// example copied into a project of its own, with shardq installed as `npm install <dir>` makes
// it). Each way: two withdrawals answered with their transfer ids, one refused with 409 and
// nothing recorded for it, and the ledger entering exactly the two transfers, once each.
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { RUNNING_LINE } from "../../cli/commands/dev.mjs";
import { freePort, ROOT, startWranglerOnFreePort } from "../../cli/wrangler/dev-server.mjs";
import { sleep } from "../../src/kernel/sleep.ts";
import { groupAlive, waitFor } from "./helpers.ts";

const EXAMPLE = join(ROOT, "examples", "outbox-inbox");
const work = mkdtempSync(join(tmpdir(), "shardq-e2e-outbox-example-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Ledger {
  entries: Array<{ transfer: string; account: string; amount: number }>;
  totals: Array<{ account: string; total: number }>;
}

/** The example's walk-through against the Worker at `base`. */
async function withdrawAndRecord(base: string) {
  const withdraw = (amount: number) =>
    fetch(`${base}/accounts/alice/withdraw?amount=${amount}`, { method: "POST" }).then(async (r) => ({
      status: r.status,
      body: (await r.json()) as { balance?: number; transfer?: string; error?: string },
    }));
  const first = await withdraw(5);
  const second = await withdraw(7);
  expect(first).toMatchObject({ status: 200, body: { balance: 95 } });
  expect(second).toMatchObject({ status: 200, body: { balance: 88 } });
  // More than the balance: the update and its transfer roll back together.
  expect(await withdraw(200)).toEqual({ status: 409, body: { error: "alice has 88, less than 200" } });
  const ledger = await waitFor(
    async () => (await (await fetch(`${base}/ledger`)).json()) as Ledger,
    (l) => l.entries.length >= 2,
    60_000,
  );
  // A moment more: a third entry (a transfer sent twice and entered twice) would show now.
  await sleep(1500);
  const settled = (await (await fetch(`${base}/ledger`)).json()) as Ledger;
  expect(settled).toEqual(ledger);
  expect(ledger.entries.map((e) => e.transfer).toSorted()).toEqual(
    [first.body.transfer, second.body.transfer].toSorted(),
  );
  expect(ledger.totals).toEqual([{ account: "alice", total: 12 }]);
}

describe("examples/outbox-inbox", () => {
  it("runs on Cloudflare's local queues under wrangler dev", async () => {
    const server = await startWranglerOnFreePort((port) => ({
      args: ["-c", join(EXAMPLE, "wrangler.toml"), "--port", String(port), "--ip", "127.0.0.1"].concat([
        "--persist-to",
        join(work, "wrangler-state"),
        "--inspector-port",
        "0",
      ]),
      readyUrl: `http://127.0.0.1:${port}/`,
    }));
    try {
      await withdrawAndRecord(`http://127.0.0.1:${server.port}`);
    } finally {
      await server.stop();
    }
  }, 120_000);

  it("runs on shardq under shardq dev, unchanged", async () => {
    const project = join(work, "bank");
    cpSync(EXAMPLE, project, { recursive: true, filter: (src) => !src.includes(".wrangler") });
    mkdirSync(join(project, "node_modules"));
    symlinkSync(ROOT, join(project, "node_modules", "shardq"), "dir");
    const [shardqPort, workerPort] = [await freePort(), await freePort()];
    appendFileSync(join(project, "wrangler.toml"), `\n[dev]\nport = ${workerPort}\n`);
    const child: ChildProcess = spawn(
      process.execPath,
      [join(project, "node_modules", "shardq", "bin", "shardq.mjs"), "dev", "-c", "wrangler.toml"].concat([
        "--port",
        String(shardqPort),
        "--state",
        join(work, "shardq-state"),
      ]),
      { cwd: project, stdio: ["ignore", "pipe", "pipe"] },
    );
    let output = "";
    child.stdout!.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (output += c.toString()));
    try {
      const deadline = Date.now() + 120_000;
      while (!output.includes(RUNNING_LINE)) {
        if (child.exitCode !== null)
          throw new Error(`shardq dev exited with ${child.exitCode}:\n${output.slice(-4000)}`);
        if (Date.now() > deadline) throw new Error(`shardq dev was not running within 120 s:\n${output.slice(-4000)}`);
        await sleep(200);
      }
      await withdrawAndRecord(`http://127.0.0.1:${workerPort}`);
    } finally {
      await sleep(100);
      const pids = [...output.matchAll(/\(pid (\d+)\)/g)].map((m) => Number(m[1]));
      const exited = new Promise((done) => (child.exitCode !== null ? done(null) : child.once("exit", done)));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited;
      clearTimeout(timer);
      const alive = pids.filter(groupAlive);
      for (const pid of alive) process.kill(-pid, "SIGKILL");
      expect(alive, output.slice(-3000)).toEqual([]);
    }
  }, 240_000);
});
