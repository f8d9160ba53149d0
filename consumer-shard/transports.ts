/**
 * How a consumer shard hands a batch to a Worker consumer. Both report the same
 * outcome shape, so the delivery loop does not care which one it used.
 *
 * - "queue": the consumer Worker's own queue() handler, through the service binding's
 *   queue() method. Needs the experimental compatibility flag
 *   service_binding_extra_handlers: fine in local dev, refused by `wrangler deploy`.
 * - "rpc": the ShardqConsumer entrypoint (src/consumer/entrypoint.ts) the consumer
 *   Worker exports next to its handler; an ordinary RPC call, which deploys.
 */
import type { ConsumerTransport } from "../src/kernel/consumer-settings";
import type { DispatchMessage } from "../src/consumer/entrypoint";
import type { DispatchOutcome } from "../src/kernel/protocol";

export type Dispatch = (
  queueName: string,
  messages: DispatchMessage[],
  metadata: MessageBatchMetadata,
) => Promise<DispatchOutcome>;

interface QueueFetcher {
  queue(queueName: string, messages: DispatchMessage[], metadata?: MessageBatchMetadata): Promise<DispatchOutcome>;
}
interface ConsumerEntrypoint {
  deliver(queueName: string, messages: DispatchMessage[], metadata?: MessageBatchMetadata): Promise<DispatchOutcome>;
}

export function transportFor(binding: unknown, transport: ConsumerTransport): Dispatch {
  if (transport === "queue") {
    const fetcher = binding as QueueFetcher;
    if (typeof fetcher.queue !== "function") {
      throw new Error(
        'this service binding has no queue() method: enable the service_binding_extra_handlers flag, or use transport "rpc"',
      );
    }
    return async (queueName, messages, metadata) => {
      const r = await fetcher.queue(queueName, messages, metadata);
      // Copy out of the RPC result into plain data.
      return {
        outcome: r.outcome,
        ackAll: r.ackAll,
        retryBatch: { ...r.retryBatch },
        explicitAcks: [...r.explicitAcks],
        retryMessages: r.retryMessages.map((m) => ({ ...m })),
      };
    };
  }
  const entrypoint = binding as ConsumerEntrypoint;
  return (queueName, messages, metadata) => entrypoint.deliver(queueName, messages, metadata);
}
