// `npm run bench -- many` (bench/many-queues.mjs) end to end, small: six queues (three push,
// three pull), one message each, a five-second quiet window. Its figures have the shape
// bench/README.md ("Many queues") describes and every message was delivered once. What the
// quiet window counts is not asserted: it is the figure the benchmark exists to report.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ROOT } from "../../cli/wrangler/dev-server.mjs";

const dir = mkdtempSync(join(tmpdir(), "shardq-e2e-many-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function bench(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["bench/cli.mjs", "many", ...args], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("npm run bench -- many", () => {
  it(
    "creates queues with push and pull consumers, delivers each one message once, then measures a quiet window",
    { timeout: 240_000 },
    async () => {
      const json = join(dir, "many.json");
      const run = await bench(["--queues", "6", "--quiet-seconds", "5", "--settle-seconds", "0", "--json", json]);
      expect(run.stderr).not.toMatch(/bench: /);
      expect(run.code).toBe(0);
      const r = JSON.parse(readFileSync(json, "utf8"));
      expect(r).toMatchObject({ queues: 6, push: 3, pull: 3, quiet_seconds: 5 });
      expect(r.error).toBeUndefined();
      for (const name of ["create", "consumers", "send", "receive_pull", "receive_push", "verify"])
        expect(r.phases[name], name).toMatchObject({ failed: 0 });
      expect(r.phases.create.ok).toBe(6);
      expect(r.delivery).toMatchObject({
        sent: 6,
        every_message_once: true,
        push: { sent: 3, received: 3, distinct: 3, duplicates: 0, missing: [] },
        pull: { pulled: 3, acked: 3, duplicates: 0, wrong_ids: 0 },
        backlog_left: { queues: 0, messages: 0 },
      });
      const q = r.quiet;
      expect(q.seconds).toBeGreaterThanOrEqual(5);
      expect(Number.isInteger(q.do_requests) && q.do_requests >= 0).toBe(true);
      expect(q.workerd.processes).toBeGreaterThanOrEqual(1);
      expect(q.workerd.each.map((p: { role: string }) => p.role)).toContain("runtime");
      expect(q.workerd.rss_bytes_end).toBeGreaterThan(10 * 1024 * 1024);
      expect(q.workerd.cpu_percent_of_core).toBeGreaterThanOrEqual(0);
      expect(run.stdout).toMatch(/delivered once: yes/);
      expect(run.stdout).toMatch(/quiet \d+(\.\d)? s \(after 0 s settling\): \d+ Durable Object requests/);
      expect(run.stdout).toMatch(/workerd: [\d.]+ % of a core .*RSS \d+ -> \d+ MB/);
    },
  );

  it("refuses a bad option with a clear message", async () => {
    const run = await bench(["--queues", "20000"]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("bench: --queues must be an integer from 2 to 10000");
  });
});
