/**
 * What the route table's groups (./route-table.ts) write their entries with: the scopes by
 * letter, the paths every account's and queue's routes start with, the answer most routes
 * give, and the account and queue a request names.
 */
import type { z } from "zod";
import { param, type Answer, type ApiRequest } from "./route";

export const S = "send",
  C = "consume",
  A = "admin";
export const ACCOUNT = "/accounts/{account_id}";
export const QUEUE = `${ACCOUNT}/queues/{queue}`;
export const ok = (result: z.ZodType, description: string): Answer => ({
  kind: "envelope",
  status: 200,
  result,
  description,
});

/** The token's account: the router has checked it is the one the path names. */
export function account(req: ApiRequest): string {
  return req.principal.accountId;
}

export function queueRef(req: ApiRequest): string {
  return param(req, "queue");
}
