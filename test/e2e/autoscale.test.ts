// The control plane under wrangler dev: with a low per-shard capacity
// (SHARD_CAPACITY_PER_SECOND) a load of several times one shard's capacity makes the
// queue grow its storage shards within seconds, every send still succeeds, the map in
// KV shows the growth, and after the load the queue shrinks back; no message is lost.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { applyConfig } from "../../cli/workers/apply-config.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";
import { sleep } from "../../src/kernel/sleep.ts";
import { HEADERS as headers, TOKEN } from "./helpers.ts";

const LOAD_SECONDS = 10;

interface ShardsView {
  version: number;
  published: { version: number; shards: Array<{ state: string }> } | null;
  shards: Array<{ name: string; state: string; heartbeat: { totals: Record<string, number> } | null }>;
  consumer_shards: { running: number };
  decisions: Array<{ kind: string; reason: string }>;
}

describe("autoscaling under wrangler dev", () => {
  let service: DevService | undefined;
  let base = "";

  beforeAll(async () => {
    service = await startDevService("autoscale", [
      // One shard takes 50 msg/s; the autoscaler aims at 40 per shard (under 0.85 of 50) and looks every second.
      "--var",
      "SHARD_CAPACITY_PER_SECOND:50",
      "--var",
      "TARGET_MESSAGES_PER_SHARD:40",
      "--var",
      "MAX_SHARDS_PER_REGION:16",
      "--var",
      "HEARTBEAT_INTERVAL_MS:1000",
      "--var",
      "SCALE_IN_AFTER_MS:3000",
    ]);
    base = service.base;
    await applyConfig(base, TOKEN);
  });

  afterAll(async () => {
    await service?.stop();
  });

  const shards = async (): Promise<ShardsView> =>
    (
      (await (await fetch(`${base}/accounts/local/queues/example/shards`, { headers })).json()) as {
        result: ShardsView;
      }
    ).result;
  const active = (v: { shards: Array<{ state: string }> } | null) =>
    v?.shards.filter((s) => s.state === "active").length ?? 0;

  it("grows its shards under load above capacity, loses no send, and shrinks back afterwards", async () => {
    // A queue starts with one storage shard (docs/cost.md, "Start small").
    const start = await shards();
    expect(active(start)).toBe(1);

    // A fixed rate over loopback, 8 x one shard's capacity: 16 senders, each 10 messages every 400 ms.
    const ids: string[] = [];
    let failures = 0;
    let firstFailure = "";
    let maxActive = 0;
    let maxPublished = 0;
    let maxConsumers = 0;
    const until = Date.now() + LOAD_SECONDS * 1000;
    const senders = Array.from({ length: 16 }, async (_, n) => {
      for (let next = Date.now() + n * 25; next < until; next += 400) {
        await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
        const sentAt = Date.now();
        const res = await fetch(`${base}/accounts/local/queues/example/messages/batch`, {
          method: "POST",
          headers,
          // Each message costs the consumer 10 ms: the backlog grows, and so do the consumer shards.
          body: JSON.stringify({ messages: Array.from({ length: 10 }, (_, i) => ({ body: { i, work_ms: 10 } })) }),
        });
        const json = (await res.json()) as { result: { message_ids: string[] } };
        if (res.status === 200) ids.push(...json.result.message_ids);
        else {
          failures++;
          // When and how long: a send held past the broker's patience, or answered at once.
          firstFailure ||= `${res.status} after ${Date.now() - sentAt} ms, ${((sentAt - (until - LOAD_SECONDS * 1000)) / 1000).toFixed(1)} s into the load (storage shards so far: up to ${maxActive}): ${JSON.stringify(json)}`;
        }
      }
    });
    const watcher = (async () => {
      while (Date.now() < until + 2000) {
        const v = await shards();
        maxActive = Math.max(maxActive, active(v));
        maxPublished = Math.max(maxPublished, active(v.published));
        maxConsumers = Math.max(maxConsumers, v.consumer_shards.running);
        await sleep(250);
      }
    })();
    await Promise.all([...senders, watcher]);
    const rate = Math.round(ids.length / LOAD_SECONDS);
    console.log(
      `load: ${ids.length} messages in ${LOAD_SECONDS} s (${rate} msg/s against 1 x 50 msg/s), ${failures} failed sends; storage shards 1 -> ${maxActive} (KV map: ${maxPublished}); consumer shards up to ${maxConsumers}`,
    );
    expect(failures, firstFailure).toBe(0);
    expect(rate).toBeGreaterThan(2 * 50);
    expect(maxActive).toBeGreaterThan(2);
    // Never past 1.5x what the offered rate needs: 400 msg/s at 50 a shard is 8.
    expect(maxActive).toBeLessThanOrEqual(12);
    expect(maxPublished).toBeGreaterThan(2);
    expect(maxConsumers).toBeGreaterThan(1);

    // Load gone: back down to the minimum, drained shards retired.
    const deadline = Date.now() + 90_000;
    let view = await shards();
    while (active(view) > 1 && Date.now() < deadline) {
      await sleep(1000);
      view = await shards();
    }
    expect(active(view)).toBe(1);
    const kinds = new Set(view.decisions.map((d) => d.kind));
    expect(kinds.has("add_shards")).toBe(true);
    expect(kinds.has("drain_shard")).toBe(true);
    expect(kinds.has("add_consumers")).toBe(true);
    console.log(
      `after the load: ${active(view)} active shards; decisions: ${view.decisions.length} (${[...kinds].join(", ")})`,
    );

    // Every acknowledged message was delivered and acked by the consumer, once: the shards' own counts.
    const totals = async () => {
      const v = await shards();
      const sum = { acked: 0, lost: 0 };
      for (const s of v.shards) {
        const t = s.heartbeat?.totals;
        if (!t) continue;
        sum.acked += t.acked ?? 0;
        sum.lost += (t.dropped ?? 0) + (t.expired ?? 0) + (t.deadLettered ?? 0);
      }
      return sum;
    };
    const ackDeadline = Date.now() + 120_000;
    let sum = await totals();
    while (sum.acked < ids.length && Date.now() < ackDeadline) {
      await sleep(1000);
      sum = await totals();
    }
    expect(sum).toEqual({ acked: ids.length, lost: 0 });
  });
});
