/**
 * A probe consumer for test/workers/transport-parity.test.ts: its queue() handler runs
 * the script of MessageBatch calls carried in the first message's body, e.g.
 *
 *   [["retry", 0, 5], ["ackAll"], ["ack", 1], ["retryAll", 7], ["throw"]]
 *
 * (message indexes into batch.messages; an optional delaySeconds), so that one script can
 * go through both transports: the Workers runtime's own queue() dispatch (Fetcher.queue(),
 * which records the calls itself) and shardq's ShardqConsumer entrypoint (createBatch()).
 * Built to JavaScript by scripts/build-examples.mjs and loaded by vitest.config.ts.
 */
import { consumerEntrypoint } from "../../src/consumer/entrypoint";

export type ProbeCall = ["ack", number] | ["retry", number, number?] | ["ackAll"] | ["retryAll", number?] | ["throw"];

const delay = (seconds: number | undefined) => (seconds === undefined ? undefined : { delaySeconds: seconds });

const handler = {
  async queue(batch: MessageBatch<unknown>): Promise<void> {
    const script = (batch.messages[0]?.body ?? []) as ProbeCall[];
    for (const call of script) {
      switch (call[0]) {
        case "ack":
          batch.messages[call[1]]!.ack();
          break;
        case "retry":
          batch.messages[call[1]]!.retry(delay(call[2]));
          break;
        case "ackAll":
          batch.ackAll();
          break;
        case "retryAll":
          batch.retryAll(delay(call[1]));
          break;
        case "throw":
          throw new Error("probe: scripted throw");
      }
    }
  },
};

export default handler;
export const ShardqConsumer = consumerEntrypoint(handler);
