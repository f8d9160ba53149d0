// Sends messages to the example pull queue: `node examples/node-consumer/producer.mjs 100`.
// sendBatch cuts any number of messages into requests the API takes (100 messages and
// 256 KB each) and retries each on network errors, 429 and 503 under an idempotency key,
// so a retried request is stored once.
import { createClient } from "shardq/client";

const env = process.env;
const client = createClient({
  url: env.SHARDQ_URL ?? "http://127.0.0.1:8787",
  token: env.SHARDQ_TOKEN ?? "shardq-local-dev-token",
  account: env.SHARDQ_ACCOUNT ?? "local",
});
const count = Number(process.argv[2] ?? 10);
const queue = client.queue(env.SHARDQ_QUEUE ?? "example-pull");
const { messageIds, requests } = await queue.sendBatch(
  Array.from({ length: count }, (_, i) => ({ body: { n: i, sent_at: Date.now() } })),
);
console.log(`sent ${messageIds.length} messages to ${queue.name} in ${requests} request(s)`);
