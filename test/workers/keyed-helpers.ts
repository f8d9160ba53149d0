// The HTTP calls the keyed-message suites (ordered-lanes, keyed-dead-letters) make, in one place.
import { api, queuePath } from "./helpers";

/** A pulled message as the pull route answers it. */
export interface Pulled {
  id: string;
  body: string;
  attempts: number;
  lease_id: string;
  ordering_key?: string;
}

export const pull = (q: string, body: unknown = {}) => api("POST", `${queuePath(q)}/messages/pull`, body);
export const ack = (q: string, body: unknown) => api("POST", `${queuePath(q)}/messages/ack`, body);
/** One message sent over HTTP, with an ordering key when `key` is given. */
export const send = (q: string, body: unknown, key?: string, extra: Record<string, unknown> = {}) =>
  api("POST", `${queuePath(q)}/messages`, { body, ...(key === undefined ? {} : { ordering_key: key }), ...extra });
