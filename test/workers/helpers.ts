import { SELF } from "cloudflare:test";

export const TOKEN = "shardq-local-dev-token";
export const ACCOUNT = "local";
export const BASE = "http://shardq.test";

export interface Envelope<T = any> {
  success: boolean;
  errors: Array<{ code: number; message: string; field?: string }>;
  messages: unknown[];
  result: T;
  result_info?: Record<string, number>;
}

/** Calls the service's HTTP API as a client would. */
export async function api<T = any>(
  method: string,
  path: string,
  body?: unknown,
  opts: { token?: string | null; headers?: Record<string, string>; raw?: BodyInit } = {},
): Promise<{ status: number; json: Envelope<T>; headers: Headers }> {
  const headers: Record<string, string> = { ...opts.headers };
  const token = opts.token === undefined ? TOKEN : opts.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  let payload: BodyInit | undefined = opts.raw;
  if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["content-type"] ??= "application/json";
  }
  const res = await SELF.fetch(`${BASE}${path}`, { method, headers, body: payload });
  const json = (await res.json()) as Envelope<T>;
  return { status: res.status, json, headers: res.headers };
}

export const queuesPath = (account = ACCOUNT) => `/accounts/${account}/queues`;
export const queuePath = (queue: string, account = ACCOUNT) => `/accounts/${account}/queues/${queue}`;

export async function createQueue(name: string, settings?: Record<string, unknown>): Promise<{ queue_id: string; queue_name: string }> {
  const res = await api("POST", queuesPath(), settings ? { queue_name: name, settings } : { queue_name: name });
  if (res.status !== 201) throw new Error(`create ${name}: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json.result;
}
