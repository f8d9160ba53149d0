/**
 * Cloudflare Queues' consumer semantics, as pure functions: from what a queue()
 * handler did with a batch to what happens to each message.
 *
 * What the DispatchOutcome holds is one rule for both transports: the Workers runtime's
 * (it records the calls for "queue"; createBatch() in src/consumer/entrypoint.ts copies it
 * for "rpc"; test/workers/transport-parity.test.ts holds the two to it). A call that
 * contradicts an earlier one is not recorded: ackAll() and retryAll() exclude each other
 * (the second has no effect), ack() has no effect after retryAll(), ackAll() or the same
 * message's retry(), and retry() none after ackAll() or the same message's ack(). So a
 * message is never both acked and retried, and ackAll / retryBatch.retry are never both set.
 *
 * - A per-message ack() or retry() made before the batch's ackAll() / retryAll() wins over
 *   it (as does a retry() after retryAll(): its own delay), and all recorded calls stand
 *   even if the handler throws afterwards.
 * - A handler that returns normally acks every message it did not retry; a handler
 *   that throws retries every message not acked (explicitly or by ackAll()).
 * - A retry's delay is the message's own, else the batch's, else the consumer's retry_delay.
 * - A message that has failed max_retries + 1 deliveries is out of retries.
 * The last two rules are decide()'s (./disposition.ts), which pull consumers' acks share.
 */
import { leaseRefOf, type LeasedMessage, type DispatchOutcome } from "../kernel/protocol";
import { decide, type Disposition, type RetrySettings, type Verdict } from "./disposition";

/** The push side of the settlement rule: the handler's calls as verdicts, decided by decide(). */
export function dispositionOf(
  messages: readonly LeasedMessage[],
  result: DispatchOutcome,
  settings: RetrySettings,
): Disposition {
  return decide(verdictsOf(messages, result), settings);
}

/** What the handler's calls (or its throw) ask for each message of the batch. */
export function verdictsOf(messages: readonly LeasedMessage[], result: DispatchOutcome): Verdict[] {
  const acked = new Set(result.explicitAcks);
  const retried = new Map(result.retryMessages.map((r) => [r.msgId, r.delaySeconds]));
  const batchDelay = result.retryBatch.retry ? result.retryBatch.delaySeconds : undefined;
  const threw = result.outcome !== "ok";
  return messages.map((m) => {
    let retry: boolean;
    if (retried.has(m.id)) retry = true;
    else if (acked.has(m.id)) retry = false;
    else if (result.ackAll) retry = false;
    else if (result.retryBatch.retry) retry = true;
    else retry = threw;
    return { ref: leaseRefOf(m), attempts: m.attempts, retry, delaySeconds: retried.get(m.id) ?? batchDelay };
  });
}

/** A dispatch that never reached the handler (unreachable, crashed) counts as a thrown handler. */
export const FAILED_DISPATCH: DispatchOutcome = {
  outcome: "exception",
  ackAll: false,
  retryBatch: { retry: false },
  explicitAcks: [],
  retryMessages: [],
};
