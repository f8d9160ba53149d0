// A pull consumer as a Node service runs one: `node examples/node-consumer/consumer.mjs`
// against `npm start`, whose shardq.config.json makes the queue "example-pull" with an
// HTTP pull consumer. Runs on Node 20 or later, Deno and Bun: it needs only shardq/client.
// Ctrl-C stops pulling, lets the running handlers finish and acks them before exiting.
//
// Environment: SHARDQ_URL (default http://127.0.0.1:8787), SHARDQ_TOKEN (default the local
// dev token), SHARDQ_ACCOUNT (default local), SHARDQ_QUEUE (default example-pull),
// CONCURRENCY (default 8). A message whose body has {"fail": true} fails; the loop retries
// it after a delay, then the queue dead-letters it after its consumer's max_retries.
import { createClient } from "shardq/client";

const env = process.env;
const client = createClient({
  url: env.SHARDQ_URL ?? "http://127.0.0.1:8787",
  token: env.SHARDQ_TOKEN ?? "shardq-local-dev-token",
  account: env.SHARDQ_ACCOUNT ?? "local",
});
const queue = client.queue(env.SHARDQ_QUEUE ?? "example-pull");

const stop = new AbortController();
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, () => {
    console.log(`${signal}: finishing the messages in hand, then stopping`);
    stop.abort();
  });
}

console.log(`consuming ${queue.name} at ${client.url} (Ctrl-C stops)`);
const summary = await queue.consume(
  async (message) => {
    // Your work goes here. Return to ack the message; throw to have it retried.
    if (/** @type {{ fail?: boolean } | null} */ (message.body)?.fail)
      throw new Error(`message ${message.id} asked to fail`);
    console.log(JSON.stringify({ id: message.id, attempts: message.attempts, body: message.body }));
  },
  {
    concurrency: Number(env.CONCURRENCY ?? 8),
    signal: stop.signal,
    onError: (err, { stage, message }) =>
      console.error(
        `${stage}${message ? ` of ${message.id}` : ""}: ${err instanceof Error ? err.message : String(err)}`,
      ),
  },
);
console.log(
  `stopped: ${summary.handled} handled, ${summary.failed} failed, ${summary.acked} acked, ${summary.retried} retried`,
);
