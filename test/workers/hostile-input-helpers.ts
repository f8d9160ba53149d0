/**
 * The hostile-input suites' queue and case runner (hostile-*.test.ts): every malformed, oversized,
 * mistyped or out-of-range request is answered with the right 4xx and a JSON error naming the
 * field at fault, never a 5xx, and leaves nothing behind: the queue's backlog, settings and
 * consumers, and the account's queues, are as they were before it.
 */
import { expect } from "vitest";
import { api, createQueue, queuePath } from "./helpers";

const Q = "hostile";
let ready: Promise<void> | undefined;
/** One queue with a pull consumer, so every route of the API has something to refuse. */
export function hostileQueue(): Promise<void> {
  ready ??= (async () => {
    await createQueue(Q);
    const res = await api("POST", `${queuePath(Q)}/consumers`, { type: "http_pull" });
    expect(res.status).toBe(201);
  })();
  return ready;
}

/** What a refused request must not change. */
export async function snapshot() {
  const [metrics, info, consumers] = await Promise.all([
    api("GET", `${queuePath(Q)}/metrics`),
    api("GET", queuePath(Q)),
    api("GET", `${queuePath(Q)}/consumers`),
  ]);
  return {
    backlog: metrics.json.result.backlog_count,
    settings: info.json.result.settings,
    consumers: consumers.json.result,
  };
}

export const P = queuePath(Q);
export const JSON_TYPE = { "content-type": "application/json" };
export const nest = (depth: number, inner: string = "1") => "[".repeat(depth) + inner + "]".repeat(depth);
export const big = (n: number) => "x".repeat(n);
export const hex = "0123456789abcdef0123456789abcdef";

export type Case = {
  method: string;
  path: string;
  body?: unknown;
  raw?: BodyInit;
  headers?: Record<string, string>;
  status: number;
  field: string;
};

/**
 * One case of the refusal tables (hostile-bodies, hostile-content-types, hostile-names and
 * hostile-numbers.test.ts): its request answered with its status and a JSON error naming its
 * field, and nothing changed.
 */
export async function refused(c: Case): Promise<void> {
  await hostileQueue();
  const before = await snapshot();
  const res = await api(c.method, c.path, c.body, { raw: c.raw, headers: c.headers });
  expect(res.status).toBe(c.status);
  expect(res.json).toMatchObject({ success: false, messages: [], result: null });
  expect(res.json.errors[0].field).toBe(c.field);
  expect(res.json.errors[0].message).toBeTruthy();
  expect(await snapshot()).toEqual(before);
  // A refused create leaves no queue behind by that name.
  const name = (c.body as { queue_name?: unknown } | undefined)?.queue_name;
  if (typeof name === "string" && /^[a-z0-9-]{1,63}$/.test(name))
    expect((await api("GET", queuePath(name))).status).toBe(404);
}
