// End to end against `wrangler dev`: the service and the example producer as a user
// runs them, traffic over loopback only, state on disk across restarts and a hard kill.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, startWrangler } from "../../cli/wrangler/dev-server.mjs";
import { sleep } from "../../src/kernel/sleep.ts";
import { HEADERS as headers } from "./helpers.ts";

type Server = Awaited<ReturnType<typeof startWrangler>>;

describe("shardq under wrangler dev", () => {
  const stateDir = mkdtempSync(join(tmpdir(), "shardq-e2e-state-"));
  // A private dev registry, so the producer binds to this test's service and no other.
  const registry = mkdtempSync(join(tmpdir(), "shardq-e2e-registry-"));
  let servicePort = 0;
  let producerPort = 0;
  let service: Server | undefined;
  let producer: Server | undefined;
  const base = () => `http://127.0.0.1:${servicePort}/accounts/local/queues`;

  const startService = async () => {
    service = await startWrangler({
      // Four shards pinned: the messages must be spread over several, and found on each after restarts.
      args: [
        "-c",
        "wrangler.toml",
        "--port",
        String(servicePort),
        "--ip",
        "127.0.0.1",
        "--persist-to",
        stateDir,
        "--inspector-port",
        "0",
        "--var",
        "SHARDS_PER_REGION:4",
      ],
      readyUrl: `http://127.0.0.1:${servicePort}/`,
      env: { WRANGLER_REGISTRY_PATH: registry },
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
      env: { WRANGLER_REGISTRY_PATH: registry },
    });
  };

  beforeAll(async () => {
    servicePort = await freePort();
    producerPort = await freePort();
    await startService();
    await startProducer();
  });

  afterAll(async () => {
    await producer?.stop();
    await service?.stop();
    rmSync(stateDir, { recursive: true, force: true });
    rmSync(registry, { recursive: true, force: true });
  });

  const metrics = async () => {
    const res = await fetch(`${base()}/example/metrics`, { headers });
    expect(res.status).toBe(200);
    return (
      (await res.json()) as {
        result: { backlog_count: number; shards: Array<{ name: string; backlog_count: number }> };
      }
    ).result;
  };

  /** Metrics once every shard has sent the report it sends before it sleeps. */
  const lastReports = async () => {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const m = await metrics();
      const asleep = m.shards.every(
        (s) => (s as typeof s & { heartbeat?: { sleeping?: boolean } | null }).heartbeat?.sleeping === true,
      );
      if (asleep || Date.now() > deadline) return m;
      await sleep(500);
    }
  };

  /** Metrics without what depends on when they are read (a heartbeat's age). */
  const stored = (m: Awaited<ReturnType<typeof metrics>>) => ({
    ...m,
    shards: m.shards.map((s) => {
      const { heartbeat, ...rest } = s as typeof s & { heartbeat?: Record<string, unknown> | null };
      if (!heartbeat) return { ...rest, heartbeat };
      const { sleeping: _sleeping, healthy: _healthy, ...kept } = heartbeat;
      return { ...rest, heartbeat: kept };
    }),
  });

  /** Sends `n` single messages over HTTP, `concurrency` at a time, as curl would; returns the ids. */
  const sendOverHttp = async (n: number, concurrency = 16, keyed = 0) => {
    const ids: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < n) {
          const i = next++;
          const res = await fetch(`${base()}/example/messages`, {
            method: "POST",
            headers,
            body: JSON.stringify({ body: { i }, ...(i < keyed ? { ordering_key: `k${i}` } : {}) }),
          });
          expect(res.status).toBe(200);
          ids.push(((await res.json()) as { result: { message_id: string } }).result.message_id);
        }
      }),
    );
    return ids;
  };

  const sendThroughProducer = async (count: number, batch: number) => {
    const res = await fetch(`http://127.0.0.1:${producerPort}/send?count=${count}&batch=${batch}`, { method: "POST" });
    expect(res.status).toBe(200);
    return ((await res.json()) as { ids: string[] }).ids;
  };

  it("stores 1,000 messages from HTTP and 1,000 from the example producer exactly once, over every shard, across restarts", async () => {
    const created = await fetch(base(), { method: "POST", headers, body: JSON.stringify({ queue_name: "example" }) });
    expect(created.status).toBe(201);

    // Keyless sends stay on one shard while they come slower than the broker spreads them
    // (src/routing/sticky-placement.ts), as on a slow machine: 200 ordering keys, each on the
    // shard that owns it, put messages on every shard whatever the machine's speed.
    const ids = [
      ...(await sendOverHttp(1000, 16, 200)),
      ...(await sendThroughProducer(500, 1)),
      ...(await sendThroughProducer(500, 100)),
    ];
    expect(ids).toHaveLength(2000);
    expect(new Set(ids).size).toBe(2000);

    // Each shard's last report (sent once it has been quiet a while) is stored with the rest;
    // read before it comes, the metrics would differ from the restarted service's only by it.
    const before = await lastReports();
    expect(before.backlog_count).toBe(2000);
    expect(before.shards).toHaveLength(4);
    for (const s of before.shards) expect(s.backlog_count).toBeGreaterThan(0);

    // A clean stop and start on the same state: the same messages on the same shards. A
    // heartbeat's `sleeping` and `healthy` say how long ago it came, so they follow the clock
    // (a slow restart turns a recent report into a sleeping shard's): everything else is stored.
    await service!.stop();
    await startService();
    expect(stored(await metrics())).toEqual(stored(before));

    // A hard kill right after the sends were acknowledged loses none of them.
    const more = await sendOverHttp(100);
    expect(more).toHaveLength(100);
    await service!.stop("SIGKILL");
    // A killed wrangler leaves its dev-registry entry behind, and a new one does not
    // replace it; clear it as `npm start` does (scripts/start.mjs).
    rmSync(join(registry, "shardq"), { force: true });
    await startService();
    expect((await metrics()).backlog_count).toBe(2100);

    // A producer in another `wrangler dev` keeps a dead connection to a restarted
    // service (the dev registry does not reconnect it), so it restarts too, as
    // `npm start` restarts both. Its binding then reads the same backlog.
    await producer!.stop();
    await startProducer();
    const viaBinding = await fetch(`http://127.0.0.1:${producerPort}/metrics`);
    const text = await viaBinding.text();
    expect(viaBinding.status, text.slice(0, 3000)).toBe(200);
    expect((JSON.parse(text) as { backlogCount: number }).backlogCount).toBe(2100);
  });
});
