// The load tester against the service as `npm start` runs it: each transport sends
// everything it was asked to, the consumer receives all of it once, and the summary's
// figures (throughput, send and end-to-end latency) are filled in and written as JSON.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { load } from "../../bench/load.mjs";
import { applyConfig } from "../../cli/workers/apply-config.mjs";
import { writeDevConfig } from "../../cli/wrangler/dev-config.mjs";
import { freePort, startWrangler } from "../../cli/wrangler/dev-server.mjs";
import { TOKEN } from "./helpers.ts";

describe("npm run bench -- load", () => {
  const stateDir = mkdtempSync(join(tmpdir(), "shardq-e2e-load-"));
  const registry = mkdtempSync(join(tmpdir(), "shardq-e2e-registry-"));
  const servers: Array<Awaited<ReturnType<typeof startWrangler>>> = [];
  let url = "";
  let producerUrl = "";

  beforeAll(async () => {
    const port = await freePort();
    const producerPort = await freePort();
    url = `http://127.0.0.1:${port}`;
    producerUrl = `http://127.0.0.1:${producerPort}`;
    const env = { WRANGLER_REGISTRY_PATH: registry };
    servers.push(
      await startWrangler({
        args: [
          "-c",
          writeDevConfig(),
          "-c",
          "examples/consumer/wrangler.toml",
          "--port",
          String(port),
          "--ip",
          "127.0.0.1",
          "--persist-to",
          stateDir,
          "--inspector-port",
          "0",
        ],
        readyUrl: `${url}/`,
        env,
      }),
    );
    servers.push(
      await startWrangler({
        args: [
          "-c",
          "examples/producer/wrangler.toml",
          "--port",
          String(producerPort),
          "--ip",
          "127.0.0.1",
          "--persist-to",
          join(stateDir, "p"),
          "--inspector-port",
          "0",
        ],
        readyUrl: `${producerUrl}/`,
        env,
      }),
    );
    await applyConfig(url, TOKEN);
  });

  afterAll(async () => {
    for (const s of servers.reverse()) await s.stop();
    rmSync(stateDir, { recursive: true, force: true });
    rmSync(registry, { recursive: true, force: true });
  });

  it.each([
    ["http", ["--count", "300", "--concurrency", "16"]],
    ["http batches", ["--count", "500", "--batch", "50", "--concurrency", "4"]],
    ["the producer binding", ["--transport", "binding", "--count", "300", "--concurrency", "16"]],
    ["a fixed rate", ["--count", "200", "--rate", "200", "--concurrency", "8"]],
  ])("sends, waits and reports over %s", async (_name, args) => {
    const out = join(stateDir, `load-${Math.random().toString(16).slice(2)}.json`);
    const count = Number(args[args.indexOf("--count") + 1]);
    const figures = await load([
      "--url",
      url,
      "--producer-url",
      producerUrl,
      "--wait",
      "--seconds",
      "60",
      "--json",
      out,
      ...args,
    ]);
    expect(figures).toMatchObject({ sent: count, errors: {}, delivered: count, duplicates: 0 });
    expect(figures.throughput_msgs_per_s).toBeGreaterThan(0);
    expect(figures.send_latency_ms.p50).toBeGreaterThan(0);
    expect(figures.end_to_end_latency_ms?.p99).toBeGreaterThanOrEqual(figures.end_to_end_latency_ms?.p50 ?? Infinity);
    expect(JSON.parse(readFileSync(out, "utf8"))).toEqual(JSON.parse(JSON.stringify(figures)));
  });

  it("refuses bad options with a clear message", async () => {
    await expect(load(["--count", "0"])).rejects.toThrow("--count must be an integer from 1 to 10000000");
    await expect(load(["--transport", "smtp"])).rejects.toThrow('--transport must be "http" or "binding"');
  });
});
