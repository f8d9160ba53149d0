import { describe, expect, it } from "vitest";
import { env } from "cloudflare:test";
import { coalesceStats, sendCoalesced } from "../../src/routing/coalesce";
import { fromSend } from "../../src/routing/pending-messages";
import { PROBE_EVERY, STEADY_GAP_MS } from "../../src/routing/linger-policy";
import { ACCOUNT, api, createQueue, producer, queuePath, storedMessages } from "./helpers";
import { sleep } from "../../src/kernel/sleep";

describe("coalescing concurrent single sends", () => {
  it("stores many concurrent sends in far fewer writes, each message once, each sender its own id", async () => {
    await createQueue("coalesce");
    const before = { ...coalesceStats };
    const q = producer("coalesce");
    const results = await Promise.all([
      ...Array.from({ length: 300 }, (_, i) => q.send({ i }).then((r) => r.messageId)),
      ...Array.from({ length: 100 }, (_, i) =>
        api("POST", `${queuePath("coalesce")}/messages`, { body: { http: i } }).then(
          (r) => r.json.result.message_id as string,
        ),
      ),
    ]);
    const sends = coalesceStats.sends - before.sends;
    const writes = coalesceStats.writes - before.writes;
    expect(sends).toBe(400);
    expect(writes).toBeLessThan(100);
    expect(new Set(results).size).toBe(400);
    const { messages } = await storedMessages("coalesce");
    expect(messages.map((m) => m.id).sort()).toEqual([...results].sort());
    // Every sender's id names its own message.
    const body = new Map(messages.map((m) => [m.id, new TextDecoder().decode(m.body)]));
    expect(body.get(results[7]!)).toBe('{"i":7}');
    expect(body.get(results[307]!)).toBe('{"http":7}');
  });

  it("sends a lone message at once, in a write of its own", async () => {
    await createQueue("coalesce-idle");
    const before = { ...coalesceStats };
    for (let i = 0; i < 5; i++) {
      await producer("coalesce-idle").send(i);
      await sleep(5); // apart: not a steady stream
    }
    expect(coalesceStats.writes - before.writes).toBe(5);
  });

  it("lets a batch opened in a steady stream wait a moment for the sends right behind it", async () => {
    await createQueue("coalesce-steady");
    // The coalescer itself, called in this isolate: the sends start at one instant, in order,
    // where sends through the binding arrive as separate requests whose gaps the machine's load sets.
    const target = { accountId: ACCOUNT, queueRef: "coalesce-steady", region: undefined };
    const send = (i: number) => sendCoalesced(env, target, fromSend(i, undefined));
    // Many producers at once: most sends arrive while another is being written.
    await Promise.all(Array.from({ length: 20 }, (_, i) => send(i)));
    await sleep(STEADY_GAP_MS + 10);
    const before = { ...coalesceStats };
    // The first opens a batch longer than STEADY_GAP_MS after the last one and goes alone; the
    // second opens one 0 ms after it and lingers, so the third joins it.
    const ids = (await Promise.all([send(1), send(2), send(3)])).map((r) => r.id);
    expect(new Set(ids).size).toBe(3);
    expect(coalesceStats.writes - before.writes).toBe(2);
    expect(coalesceStats.lingers - before.lingers).toBe(1);
    const { messages } = await storedMessages("coalesce-steady");
    expect(messages.map((m) => m.id)).toEqual(expect.arrayContaining(ids));
  });

  it("makes a producer that awaits each send wait for company only on the rare probe", async () => {
    await createQueue("coalesce-sequential");
    const q = producer("coalesce-sequential");
    const before = { ...coalesceStats };
    for (let i = 0; i < 64; i++) await q.send(i);
    expect(coalesceStats.writes - before.writes).toBe(64);
    expect(coalesceStats.lingers - before.lingers).toBeLessThanOrEqual(64 / PROBE_EVERY);
  });

  it("fails every sender of a batch that could not be stored, and stores none of it", async () => {
    await createQueue("coalesce-gone");
    await api("DELETE", queuePath("coalesce-gone"));
    const outcomes = await Promise.allSettled(Array.from({ length: 50 }, (_, i) => producer("coalesce-gone").send(i)));
    expect(
      outcomes.every((o) => o.status === "rejected" && /not found/.test(String((o as PromiseRejectedResult).reason))),
    ).toBe(true);
  });
});
