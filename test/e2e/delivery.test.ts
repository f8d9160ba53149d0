// Messages flow end to end under `wrangler dev`, as `npm start` runs it: the example
// producer sends, the service stores and delivers, the example consumer's queue()
// handler receives; then the service is killed mid-stream and restarted on the same
// state, and every message the producer saw acknowledged still arrives.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { applyConfig } from "../../cli/workers/apply-config.mjs";
import { writeDevConfig } from "../../cli/wrangler/dev-config.mjs";
import { freePort, startWrangler } from "../../cli/wrangler/dev-server.mjs";
import { sleep } from "../../src/kernel/sleep.ts";
import { TOKEN } from "./helpers.ts";

type Server = Awaited<ReturnType<typeof startWrangler>>;
interface SendResult {
  sent: number;
  ids: string[];
  error?: string;
}
interface Stats {
  received: number;
  distinct: number;
  duplicates: number;
}

describe("delivery under wrangler dev", () => {
  const stateDir = mkdtempSync(join(tmpdir(), "shardq-e2e-delivery-"));
  const registry = mkdtempSync(join(tmpdir(), "shardq-e2e-registry-"));
  let port = 0;
  let producerPort = 0;
  let service: Server | undefined;
  let producer: Server | undefined;
  const env = { WRANGLER_REGISTRY_PATH: registry };

  const startService = async () => {
    service = await startWrangler({
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
      readyUrl: `http://127.0.0.1:${port}/`,
      env,
    });
  };
  const startProducer = async () => {
    producer = await startWrangler({
      args: [
        "-c",
        "examples/producer/wrangler.toml",
        "--port",
        String(producerPort),
        "--ip",
        "127.0.0.1",
        "--persist-to",
        join(stateDir, "producer"),
        "--inspector-port",
        "0",
      ],
      readyUrl: `http://127.0.0.1:${producerPort}/`,
      env,
    });
  };
  const send = async (count: number): Promise<SendResult> => {
    const res = await fetch(`http://127.0.0.1:${producerPort}/send?count=${count}&batch=100`, { method: "POST" });
    return (await res.json()) as SendResult;
  };
  const consumer = (path: string, init?: RequestInit) =>
    fetch(`http://127.0.0.1:${producerPort}/consumer${path}`, init);
  const missing = async (ids: string[]) =>
    (
      (await (
        await consumer("/missing", { method: "POST", body: JSON.stringify({ queue: "example", ids }) })
      ).json()) as { missing: string[] }
    ).missing;
  const until = async (check: () => Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`not done within ${timeoutMs} ms`);
      await sleep(500);
    }
  };

  beforeAll(async () => {
    port = await freePort();
    producerPort = await freePort();
    await startService();
    await startProducer();
    await applyConfig(`http://127.0.0.1:${port}`, TOKEN);
  });

  afterAll(async () => {
    await producer?.stop();
    await service?.stop();
    rmSync(stateDir, { recursive: true, force: true });
    rmSync(registry, { recursive: true, force: true });
  });

  it("delivers 10,000 messages from the example producer to the example consumer, none lost", async () => {
    const result = await send(10_000);
    expect(result.error).toBeUndefined();
    expect(new Set(result.ids).size).toBe(10_000);
    await until(async () => (await missing(result.ids)).length === 0, 120_000);
    const stats = (await (await consumer("/stats?queue=example")).json()) as Stats;
    console.log(`10,000 sent: ${stats.distinct} delivered, ${stats.duplicates} duplicate deliveries`);
    expect(stats.distinct).toBe(10_000);
  });

  it("loses no acknowledged message when the service is killed mid-stream and restarted", async () => {
    const sending = send(10_000);
    await sleep(2000);
    await service!.stop("SIGKILL");
    const partial = await sending;
    const acknowledged = partial.ids;
    // The kill interrupts the stream: some were acknowledged before it, none after.
    expect(acknowledged.length).toBeGreaterThan(0);

    rmSync(join(registry, "shardq"), { force: true });
    rmSync(join(registry, "shardq-example-consumer"), { force: true });
    await startService();
    await producer!.stop();
    await startProducer();
    await until(async () => (await missing(acknowledged)).length === 0, 120_000);
    const stats = (await (await consumer("/stats?queue=example")).json()) as Stats;
    console.log(
      `killed mid-stream: ${acknowledged.length} acknowledged before the kill, all delivered; ${stats.duplicates} duplicate deliveries over both runs`,
    );
  });
});
