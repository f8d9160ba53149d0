/**
 * The one settlement rule, for push consumers (src/delivery/outcome.ts turns a queue()
 * handler's calls into verdicts) and pull consumers (broker/http/ack-api.ts turns an
 * ack request's acks and retries into verdicts) alike: whether a message the consumer
 * wants retried gets another delivery, after what delay, or is out of retries. Written
 * once so the two transports cannot drift apart on it.
 */
import type { LeaseRef } from "../kernel/protocol";

/** What the consumer asked for one leased message. */
export interface Verdict {
  ref: LeaseRef;
  /** Deliveries so far, the one being settled included (LeasedMessage.attempts). */
  attempts: number;
  /** false: acked. true: to be delivered again, if retries are left. */
  retry: boolean;
  /** The consumer's own delay for this retry; without one the consumer's retry_delay. */
  delaySeconds?: number | undefined;
}

export interface RetrySettings {
  max_retries: number;
  retry_delay: number;
}

/** What becomes of each message, by lease ref; carried out by src/delivery/settle.ts. */
export interface Disposition {
  acks: LeaseRef[];
  retries: Array<{ ref: LeaseRef; delayMs: number }>;
  /** Failed their last allowed delivery: to the dead-letter queue if the consumer has one, else dropped. */
  outOfRetries: LeaseRef[];
}

/**
 * A message that has failed max_retries + 1 deliveries is out of retries; any other
 * retry waits its own delay, else the consumer's retry_delay. Each list keeps the
 * verdicts' order, and holds the verdicts' own ref objects.
 */
export function decide(verdicts: readonly Verdict[], settings: RetrySettings): Disposition {
  const out: Disposition = { acks: [], retries: [], outOfRetries: [] };
  for (const v of verdicts) {
    if (!v.retry) out.acks.push(v.ref);
    else if (v.attempts > settings.max_retries) out.outOfRetries.push(v.ref);
    else out.retries.push({ ref: v.ref, delayMs: (v.delaySeconds ?? settings.retry_delay) * 1000 });
  }
  return out;
}

/** One disposition from several, lists in the order given (a batch's parts settled in one call). */
export function joinDispositions(...parts: Disposition[]): Disposition {
  return {
    acks: parts.flatMap((p) => p.acks),
    retries: parts.flatMap((p) => p.retries),
    outOfRetries: parts.flatMap((p) => p.outOfRetries),
  };
}
