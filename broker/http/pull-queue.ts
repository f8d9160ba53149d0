/** The queue as every pull consumer's verb finds it: its delivery plan, its http_pull consumer, its pause. */
import { coordinatorFor } from "../../src/kernel/addressing";
import type { ConsumerRecord } from "../../src/kernel/consumer-settings";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import type { DeliveryPlan } from "../../src/kernel/shard-map";
import { readQueue } from "../../src/routing/queue-lookup";

/** The answer of a pull while delivery is paused, whether it came then or was waiting. */
export const pausedError = (plan: DeliveryPlan) =>
  new HttpError(
    "conflict",
    `delivery of queue "${plan.queueName}" is paused; set settings.delivery_paused to false to pull`,
    "queue",
  );

/**
 * The queue's delivery plan from its Coordinator (pause state and consumer as of now,
 * not as a cached map says), with its http_pull consumer. A cached map may name a
 * queue deleted (and perhaps re-created) since: then the current map is read once.
 */
export async function pullQueue(
  env: Env,
  accountId: string,
  queueRef: string,
  verb: string,
): Promise<{ plan: DeliveryPlan; consumer: ConsumerRecord }> {
  const plan = await readQueue(env, accountId, queueRef, async (map) => {
    const plan = await coordinatorFor(env, map.queueId).deliveryPlan();
    return plan && plan.accountId === accountId ? plan : null;
  });
  const consumer = plan.consumer;
  if (consumer?.type !== "http_pull") {
    const has = consumer ? "a worker consumer" : "no consumer";
    throw new HttpError(
      "conflict",
      `queue "${plan.queueName}" has ${has}; messages/${verb} needs an http_pull consumer (POST .../consumers with {"type": "http_pull"})`,
      "queue",
    );
  }
  return { plan, consumer };
}
