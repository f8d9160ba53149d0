/**
 * The outbox probe's objects (test/fixtures/outbox-probe), as the outbox and inbox tests reach
 * them: bound in the Worker under test by vitest.config.ts, declared in the probe's Worker.
 */
import { env } from "cloudflare:test";
import type { InboxConsumer, OutboxProducer, ProducerConfig } from "../fixtures/outbox-probe/index";

const bindings = env as unknown as {
  OUTBOX_PRODUCER: DurableObjectNamespace<OutboxProducer>;
  INBOX_CONSUMER: DurableObjectNamespace<InboxConsumer>;
};

/**
 * An object's methods as a test calls them. RPC's own handle types turn results typed `unknown`
 * (a message's body) into `never`; what comes back is what the method returned, structured-cloned.
 */
export type Remote<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<Awaited<R>> : never;
};

/** A producer object of its own for one test, set up with `config`. */
export async function producerObject(name: string, config: ProducerConfig) {
  const handle = producerHandle(name);
  await handle.setup(name, config);
  return handle;
}

/** A fresh handle on the producer `name`: a handle is broken for good once its object was reset. */
export function producerHandle(name: string): Remote<OutboxProducer> {
  return bindings.OUTBOX_PRODUCER.get(bindings.OUTBOX_PRODUCER.idFromName(name)) as unknown as Remote<OutboxProducer>;
}

export function consumerObject(name: string): Remote<InboxConsumer> {
  return bindings.INBOX_CONSUMER.get(bindings.INBOX_CONSUMER.idFromName(name)) as unknown as Remote<InboxConsumer>;
}
