/**
 * The fault harness's route to storage-shard/test-hooks.ts: arm a reset of one of a
 * queue's storage shards at a fault point, or read whether it happened (the shard's
 * instance id changes when it is reset), or corrupt some of its stored bodies.
 *
 *   GET  .../queues/:queue/test-hooks?shard=<name>                 -> { instance, armed }
 *   POST .../queues/:queue/test-hooks { shard, arm: point|null }   -> { instance, armed }
 *   POST .../queues/:queue/test-hooks { shard, corrupt: n }        -> { instance, armed, corrupted: [{ id, seq }] }
 *
 * It exists so test/faults can crash one shard at an exact point of the append and
 * settle paths, which a SIGKILL of the whole service cannot aim at. Fenced twice: it
 * is routed only when SHARDQ_TEST_HOOKS is "on" (otherwise the router answers 404
 * exactly as for any unknown path, see testHookRoutes), and the shard's method throws
 * without the var. Only the harness sets the var, in a generated config; wrangler.toml
 * must not (`npm run deploy:dry-run` fails if it does). It also needs the admin scope.
 */
import { z } from "zod";
import { storageShardFor } from "../src/addressing";
import type { Env } from "../src/env";
import { HttpError } from "../src/errors";
import { FAULT_POINTS, testHooksEnabled, type FaultPoint } from "../storage-shard/test-hooks";
import type { Scope } from "./auth";
import { ok } from "./envelope";
import { readJson } from "./read-json";
import { notFound } from "./send";
import { cachedShardMap } from "./shard-map-cache";
import { parseWith } from "./validate";

const PATH = /^\/accounts\/[^/]+\/queues\/[^/]+\/test-hooks\/?$/;

/** The ROUTES entries of the hooks: none unless the var is on, so the path is as unknown as any other. */
export function testHookRoutes(env: Env): Array<[RegExp, Partial<Record<string, readonly Scope[]>>]> {
  return testHooksEnabled(env) ? [[PATH, { GET: ["admin"], POST: ["admin"] }]] : [];
}

const body = z
  .object({
    shard: z.string().min(1),
    arm: z.enum(FAULT_POINTS as [FaultPoint, ...FaultPoint[]]).nullable().optional(),
    corrupt: z.number().int().min(1).max(100).optional(),
  })
  .strict()
  .refine((b) => (b.arm !== undefined) !== (b.corrupt !== undefined), "give either arm or corrupt");

/** GET or POST .../test-hooks. */
export async function testHook(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const path = new URL(request.url).pathname;
  if (!testHooksEnabled(env)) throw new HttpError("not_found", `no route for ${request.method} ${path}`);
  const post = request.method === "POST" ? parseWith(body, await readJson(request)) : null;
  const name = post?.shard ?? new URL(request.url).searchParams.get("shard");
  const map = await cachedShardMap(env, accountId, queueRef);
  if (!map) throw notFound(queueRef);
  const shard = map.shards.find((s) => s.name === name);
  if (!shard) throw HttpError.invalid("shard", `is not a storage shard of queue "${queueRef}"`);
  const target = storageShardFor(env, shard.name, shard.region);
  return ok(await (post ? target.testHook(post.arm, post.corrupt ?? 0) : target.testHook()));
}
