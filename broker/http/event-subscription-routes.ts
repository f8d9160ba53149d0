/** Cloudflare's event subscription routes (./route-table.ts), each answering 501: shardq has no such event sources. */
import { eventSubscriptions } from "./event-subscriptions";
import type { Route } from "./route";
import { A, ACCOUNT } from "./route-kit";

const SUBSCRIPTIONS = `${ACCOUNT}/event_subscriptions/subscriptions`;

export const EVENT_SUBSCRIPTION_ROUTES: readonly Route[] = (
  [
    ["GET", SUBSCRIPTIONS, "listEventSubscriptions", "List event subscriptions"],
    ["POST", SUBSCRIPTIONS, "createEventSubscription", "Create an event subscription"],
    ["GET", `${SUBSCRIPTIONS}/{subscription_id}`, "getEventSubscription", "Read an event subscription"],
    ["PATCH", `${SUBSCRIPTIONS}/{subscription_id}`, "updateEventSubscription", "Change an event subscription"],
    ["DELETE", `${SUBSCRIPTIONS}/{subscription_id}`, "deleteEventSubscription", "Delete an event subscription"],
  ] as const
).map(([method, path, operationId, summary]): Route => ({
  method,
  path,
  access: [A],
  cloudflare: true,
  handle: eventSubscriptions,
  operationId,
  tag: "Event subscriptions",
  summary,
  description:
    "Not served: 501. Cloudflare's event subscriptions deliver events of its own products (R2, KV, Workers AI, Workflows...) into a queue, and shardq has no such sources. Send such events from a Worker, through a producer binding or POST .../messages.",
  answer: { kind: "unsupported", description: "Never: every call answers 501." },
  errors: [501],
}));
