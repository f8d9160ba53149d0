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

/** The longest wait before a message whose dispatch never came back is tried again. */
export const UNREACHED_BACKOFF_MAX_SECONDS = 60;

/**
 * A dispatch that never came back (the consumer Worker unreachable, or its process gone during
 * the call): every message is retried, as after a thrown handler, and the try counts, but the
 * retry waits at least a backoff that doubles with the message's attempts, 1 s after its first
 * delivery up to UNREACHED_BACKOFF_MAX_SECONDS. With a retry_delay of 0 a tight loop would spend a
 * message's every retry in the seconds a Worker takes to restart (a reload under `shardq dev`, a
 * deploy) and drop it; with the backoff a restart costs a few tries, and a consumer gone for good
 * still runs its messages out of retries, at most a minute apart.
 */
export function unreachedDispatch(messages: readonly LeasedMessage[], settings: RetrySettings): DispatchOutcome {
  return {
    ...FAILED_DISPATCH,
    retryMessages: messages.map((m) => ({
      msgId: m.id,
      delaySeconds: Math.max(
        settings.retry_delay,
        Math.min(UNREACHED_BACKOFF_MAX_SECONDS, 2 ** Math.min(Math.max(0, m.attempts - 1), 6)),
      ),
    })),
  };
}
