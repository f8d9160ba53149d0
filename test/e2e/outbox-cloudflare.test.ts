// The outbox and inbox workload of the fault run (test/faults/outbox-workload.mjs) on
// Cloudflare's own local queues, with no shardq at all: the fixture Worker's config as a
// Cloudflare Queues user writes it ([[queues.producers]], [[queues.consumers]]), run by
// `wrangler dev`, its producer objects sending through the simulator's binding in envelopes.
// Its own faults play (sends refused, answers lost after the queue stored the batch, producer
// objects reset right after a commit, the consumer throwing before and after applying, effects
// that throw), and every committed increment must be applied exactly once. Without the inbox
// (the control) the same faults apply effects twice, and the check says so. The simulator keeps
// its queue in memory, so this run does not kill wrangler dev: a kill would lose messages the
// simulator had accepted, which no library in the producer can help (the fault run kills shardq,
// which persists them).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "../../cli/wrangler/dev-server.mjs";
import { History, readHistory } from "../faults/history.mjs";
import { checkOutbox } from "../faults/outbox-checker.mjs";
import { cloudflareConfig, OutboxWorker, runOutboxProducers, settleOutbox } from "../faults/outbox-workload.mjs";

const PRODUCERS = 4;
const LOAD_MS = 30_000;
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function runOnCloudflare(seed: number, inbox: boolean) {
  const dir = mkdtempSync(join(tmpdir(), "shardq-outbox-cloudflare-"));
  dirs.push(dir);
  const logs: string[] = [];
  const worker = new OutboxWorker({
    config: cloudflareConfig(dir, { seed, inbox }),
    port: await freePort(),
    stateDir: join(dir, "state"),
    log: (line) => logs.push(line),
  });
  const history = new History(join(dir, "history.jsonl"));
  history.note("harness", "outbox-plan", { producers: PRODUCERS, kills: 0, binding: "cloudflare" });
  const tally = { increments: 0, messages: 0, unknown: 0 };
  await worker.start();
  try {
    const until = Date.now() + LOAD_MS;
    await runOutboxProducers({
      history,
      worker,
      producers: PRODUCERS,
      seed,
      pauseMs: [20, 80],
      until: () => Date.now() > until,
      tally,
    });
    await settleOutbox({ history, worker, producers: PRODUCERS, timeoutMs: 60_000 });
  } finally {
    await worker.stop();
    await history.close();
  }
  return { result: checkOutbox(await readHistory(history.file)), tally, logs };
}

describe("the outbox and the inbox on Cloudflare's local queues", () => {
  it("apply every committed increment exactly once under the workload's faults", async () => {
    const { result, logs } = await runOnCloudflare(20261128, true);
    expect(result.failures, logs.slice(-40).join("\n")).toEqual([]);
    const f = result.figures as Record<string, number>;
    console.log(`outbox on Cloudflare's local queues: ${JSON.stringify(f)}`);
    expect(f.committed).toBeGreaterThan(200);
    expect(f.applied).toBe(f.committed);
    // The faults were real: the inbox dropped repeats, the objects were reset, the binding failed.
    expect(f.duplicates).toBeGreaterThan(0);
    expect(f.resets).toBeGreaterThan(0);
    expect(f.refused! + f.answers_lost!).toBeGreaterThan(0);
  }, 180_000);

  it("apply effects twice without the inbox, and the check sees it", async () => {
    const { result } = await runOnCloudflare(20261129, false);
    console.log(`without the inbox on Cloudflare's local queues: ${result.failures.join("; ")}`);
    expect(result.failures.some((f) => / effects applied twice$/.test(f))).toBe(true);
  }, 180_000);
});
