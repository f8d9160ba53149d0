/**
 * The ceiling microbenchmark's driver (bench/ceiling.mjs): one storage shard, activated
 * under a queue nothing else uses, takes appends as fast as it can for a given time, with
 * nothing else running in this `wrangler dev` but shardq itself, idle.
 *
 * POST /run?seconds&batch&inflight&bytes activates a fresh shard, then keeps `inflight`
 * append() calls of `batch` messages (`bytes` random bytes each, checksummed as the broker
 * does) in flight for `seconds`, and answers what was appended and the shard's own cost
 * figures (stats()) before and after.
 */
import { crc32 } from "../../../../src/kernel/checksum";
import type { ShardStats } from "../../../../src/kernel/figures";
import type { AppendRequest, AppendResult, EncodedMessage } from "../../../../src/kernel/protocol";
import type { ShardIdentity } from "../../../../src/kernel/shard-map";

/** The StorageShard methods this driver calls, typed here: the binding reaches another script's class. */
interface ShardStub {
  activate(identity: ShardIdentity): Promise<void>;
  append(req: AppendRequest): Promise<AppendResult>;
  stats(): Promise<ShardStats>;
}

interface Env {
  STORAGE_SHARD: DurableObjectNamespace;
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));
const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => HEX[b]).join("");

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/ready") return Response.json({ ready: true });
    if (url.pathname !== "/run" || request.method !== "POST")
      return Response.json({ error: "POST /run?seconds&batch&inflight&bytes" }, { status: 404 });
    const seconds = Number(url.searchParams.get("seconds") ?? 10);
    const batch = Number(url.searchParams.get("batch") ?? 100);
    const inflight = Number(url.searchParams.get("inflight") ?? 8);
    const bytes = Number(url.searchParams.get("bytes") ?? 128);
    const queueId = hex(crypto.getRandomValues(new Uint8Array(16)));
    const name = `ceiling-${queueId.slice(0, 8)}`;
    const shard = env.STORAGE_SHARD.get(env.STORAGE_SHARD.idFromName(name)) as unknown as ShardStub;
    await shard.activate({ name, queueId, accountId: "bench", region: "local" });

    // The bodies are made once (their content is irrelevant to the shard); the messages
    // carry no id, as a broker's fresh send: the shard draws ids that say where they live.
    const bodies = Array.from({ length: batch }, () => {
      const body = crypto.getRandomValues(new Uint8Array(bytes));
      return { body, checksum: crc32(body) };
    });
    const messages = (): EncodedMessage[] =>
      bodies.map(({ body, checksum }) => ({ body, checksum, contentType: "bytes", delayMs: 0 }));

    const before = await shard.stats();
    const latencies: number[] = [];
    let appended = 0;
    let calls = 0;
    let refused: string | undefined;
    const started = performance.now();
    const deadline = Date.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: inflight }, async () => {
        while (Date.now() < deadline && !refused) {
          const t0 = performance.now();
          const r = await shard.append({ queueId, messages: messages() });
          latencies.push(performance.now() - t0);
          calls++;
          if (!r.ok) refused = r.refused;
          else appended += r.stored;
        }
      }),
    );
    const elapsed = (performance.now() - started) / 1000;
    const after = await shard.stats();
    latencies.sort((a, b) => a - b);
    const pct = (p: number) =>
      latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? null;
    return Response.json({
      shard: name,
      seconds: elapsed,
      batch,
      inflight,
      bytes,
      calls,
      appended,
      ...(refused ? { refused } : {}),
      append_ms: { p50: pct(50), p99: pct(99) },
      before: before.cost,
      after: after.cost,
      backlog: after.backlogCount,
    });
  },
} satisfies ExportedHandler<Env>;
