/**
 * One outcome rule for both transports. The probe consumer (test/fixtures/outcome-probe)
 * runs a script of MessageBatch calls; the "queue" transport lets the Workers runtime record
 * them (Fetcher.queue()), the "rpc" transport lets shardq's createBatch() record them
 * (the ShardqConsumer entrypoint). Every script of up to 3 calls over two messages, with and
 * without a throw after it, must come back as the same DispatchOutcome through both.
 */
import { env } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { transportFor } from "../../consumer-shard/transports";
import { createBatch, type DispatchMessage } from "../../src/consumer/entrypoint";
import type { ProbeCall } from "../fixtures/outcome-probe/index";
import type { DispatchOutcome } from "../../src/kernel/protocol";

const viaRuntime = transportFor(env.OUTCOME_PROBE_QUEUE, "queue");
const viaRpc = transportFor(env.OUTCOME_PROBE_RPC, "rpc");
const metadata: MessageBatchMetadata = { metrics: { backlogCount: 0, backlogBytes: 0 } };

/** Two messages, m0 and m1; the first carries the script. */
const batchFor = (script: ProbeCall[]): DispatchMessage[] => [
  { id: "m0", timestamp: new Date(0), body: script, attempts: 1 },
  { id: "m1", timestamp: new Date(0), body: null, attempts: 1 },
];

/** Lists in a fixed order, and no `delaySeconds: undefined` (JSON drops it). */
const normalize = (o: DispatchOutcome): DispatchOutcome =>
  JSON.parse(
    JSON.stringify({
      ...o,
      explicitAcks: [...o.explicitAcks].sort(),
      retryMessages: [...o.retryMessages].sort((a, b) => a.msgId.localeCompare(b.msgId)),
    }),
  ) as DispatchOutcome;

const both = async (script: ProbeCall[]) => {
  const [runtime, rpc] = await Promise.all([
    viaRuntime("q", batchFor(script), metadata),
    viaRpc("q", batchFor(script), metadata),
  ]);
  return { runtime: normalize(runtime), rpc: normalize(rpc) };
};

const CALLS: ProbeCall[] = [
  ["ack", 0],
  ["ack", 1],
  ["retry", 0],
  ["retry", 0, 5],
  ["retry", 1, 9],
  ["ackAll"],
  ["retryAll"],
  ["retryAll", 7],
];

/** Every script of exactly `length` calls from CALLS, each also followed by a throw. */
function scriptsOf(length: number): ProbeCall[][] {
  let scripts: ProbeCall[][] = [[]];
  for (let i = 0; i < length; i++) scripts = scripts.flatMap((s) => CALLS.map((c) => [...s, c]));
  return scripts.flatMap((s) => [s, [...s, ["throw"]]]);
}

const show = (script: ProbeCall[]) =>
  script.map(([name, ...args]) => `${name}(${args.join(", ")})`).join("; ") || "(nothing)";

describe("the rpc transport records exactly what the Workers runtime records", () => {
  // 1 + 8 + 64 + 512 scripts, each with and without a throw: 1170 scripts, 2340 deliveries.
  for (const length of [0, 1, 2, 3]) {
    it(`every script of ${length} call(s), with and without a throw afterwards`, async () => {
      const scripts = scriptsOf(length);
      const mismatches: Array<{ script: string; runtime: DispatchOutcome; rpc: DispatchOutcome }> = [];
      for (let i = 0; i < scripts.length; i += 64) {
        await Promise.all(
          scripts.slice(i, i + 64).map(async (script) => {
            const { runtime, rpc } = await both(script);
            if (JSON.stringify(runtime) !== JSON.stringify(rpc))
              mismatches.push({ script: show(script), runtime, rpc });
          }),
        );
      }
      expect(mismatches, `${mismatches.length} of ${scripts.length} scripts differ`).toEqual([]);
    });
  }
});

describe("the rule, as the runtime applies it (and createBatch now does)", () => {
  const outcome = (o: Partial<DispatchOutcome>): DispatchOutcome => ({
    outcome: "ok",
    ackAll: false,
    retryBatch: { retry: false },
    explicitAcks: [],
    retryMessages: [],
    ...o,
  });
  const cases: Array<[rule: string, script: ProbeCall[], expected: DispatchOutcome]> = [
    ["retry() after ackAll() has no effect", [["ackAll"], ["retry", 0, 5]], outcome({ ackAll: true })],
    ["retryAll() after ackAll() has no effect", [["ackAll"], ["retryAll", 7]], outcome({ ackAll: true })],
    [
      "ackAll() after retryAll() has no effect",
      [["retryAll", 7], ["ackAll"]],
      outcome({ retryBatch: { retry: true, delaySeconds: 7 } }),
    ],
    ["ack() after retryAll() has no effect", [["retryAll"], ["ack", 0]], outcome({ retryBatch: { retry: true } })],
    [
      "ack() after ackAll() has no effect either (silently: the message is acked anyway)",
      [["ackAll"], ["ack", 0]],
      outcome({ ackAll: true }),
    ],
    [
      "ack() after retry() of the same message has no effect",
      [
        ["retry", 0, 5],
        ["ack", 0],
      ],
      outcome({ retryMessages: [{ msgId: "m0", delaySeconds: 5 }] }),
    ],
    [
      "retry() after ack() of the same message has no effect",
      [
        ["ack", 0],
        ["retry", 0, 5],
      ],
      outcome({ explicitAcks: ["m0"] }),
    ],
    [
      "calls on different messages do not interfere",
      [
        ["ack", 0],
        ["retry", 1, 9],
      ],
      outcome({ explicitAcks: ["m0"], retryMessages: [{ msgId: "m1", delaySeconds: 9 }] }),
    ],
    [
      "retry() twice: the last call wins, delay and all",
      [
        ["retry", 0, 5],
        ["retry", 0],
      ],
      outcome({ retryMessages: [{ msgId: "m0" }] }),
    ],
    [
      "retryAll() twice: a later delay replaces the earlier one…",
      [["retryAll"], ["retryAll", 7]],
      outcome({ retryBatch: { retry: true, delaySeconds: 7 } }),
    ],
    [
      "…but a later retryAll() without a delay keeps it",
      [["retryAll", 7], ["retryAll"]],
      outcome({ retryBatch: { retry: true, delaySeconds: 7 } }),
    ],
    [
      "a message's call before a batch call stands (retry() then ackAll())",
      [["retry", 0, 5], ["ackAll"]],
      outcome({ ackAll: true, retryMessages: [{ msgId: "m0", delaySeconds: 5 }] }),
    ],
    [
      "a message's call before a batch call stands (ack() then retryAll())",
      [
        ["ack", 1],
        ["retryAll", 7],
      ],
      outcome({ explicitAcks: ["m1"], retryBatch: { retry: true, delaySeconds: 7 } }),
    ],
    [
      "retry() after retryAll() stands, with the message's own delay",
      [
        ["retryAll", 7],
        ["retry", 0, 5],
      ],
      outcome({ retryBatch: { retry: true, delaySeconds: 7 }, retryMessages: [{ msgId: "m0", delaySeconds: 5 }] }),
    ],
    [
      "calls made before a throw stand",
      [["ack", 0], ["retryAll", 7], ["throw"]],
      outcome({ outcome: "exception", explicitAcks: ["m0"], retryBatch: { retry: true, delaySeconds: 7 } }),
    ],
  ];
  it.each(cases)("%s", async (_rule, script, expected) => {
    const { runtime, rpc } = await both(script);
    expect(runtime).toEqual(expected);
    expect(rpc).toEqual(expected);
  });
});

describe("createBatch's warnings", () => {
  afterEach(() => vi.restoreAllMocks());

  it("logs a call that has no effect in the runtime's words, and nothing for one that counts", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => {});
    const { batch } = createBatch("q", batchFor([]));
    batch.messages[0]!.ack();
    batch.ackAll();
    expect(warn).not.toHaveBeenCalled();
    batch.messages[0]!.retry();
    batch.retryAll();
    expect(warn.mock.calls.map((c) => c[0])).toEqual([
      "Received a call to retry() on message m0 after ackAll() was already called. Calling retry() on a message after calling ackAll() has no effect.",
      "Received a call to retryAll() after ackAll() was already called. Calling retryAll() after calling ackAll() has no effect.",
    ]);
  });
});
