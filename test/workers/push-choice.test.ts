/**
 * When a consumer shard asks storage shards to push it their batches, and when it leaves them
 * to its rounds, which gather several shards' partial batches into one (consumer-shard/push-choice.ts).
 */
import { describe, expect, it } from "vitest";
import { PushChoice, SPREAD_WINDOW_MS } from "../../consumer-shard/push-choice";

describe("a consumer shard's choice between pushed batches and its rounds", () => {
  it("wants pushes while batches come from one storage shard, however fast", () => {
    const c = new PushChoice();
    for (let t = 0; t < 5000; t += 100) c.delivered("a", 100, t);
    expect(c.wanted(5000, 100, 1000)).toBe(true);
  });

  it("wants pushes from several shards while together they would not fill a batch within max_wait_time_ms", () => {
    const c = new PushChoice();
    // A message a second, alternating between two shards: 5 a window, 1 a max_wait_time_ms.
    for (let t = 0; t < 5000; t += 1000) c.delivered(t % 2000 === 0 ? "a" : "b", 1, t);
    expect(c.wanted(4500, 100, 1000)).toBe(true);
    expect(c.wanted(4500, 10, 5000)).toBe(true);
  });

  it("leaves batches to its rounds while traffic over several shards fills them, and wants pushes again once it is on one", () => {
    const c = new PushChoice();
    // 1,000 messages a second over twelve shards (w7 on twelve): a pushed remainder waited out max_wait_time_ms.
    for (let t = 0; t < 5000; t += 100) c.delivered(`s${(t / 100) % 12}`, 100, t);
    expect(c.wanted(5000, 100, 1000)).toBe(false);
    // Then a stream kept on one shard: once the others' batches are older than the window.
    for (let t = 5000; t < 5000 + SPREAD_WINDOW_MS; t += 100) c.delivered("s0", 100, t);
    expect(c.wanted(5000 + SPREAD_WINDOW_MS, 100, 1000)).toBe(true);
  });
});
