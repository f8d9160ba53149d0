/**
 * The fault harness's route to the hooks of src/kernel/test-hooks.ts: arm a fault point of
 * one of a queue's storage shards, consumer shards or its Coordinator, read whether it
 * happened (an object's instance id changes when it is reset), corrupt some stored
 * bodies of a storage shard, or have the Coordinator scale out, drain a shard, or keep
 * its published map stale for a while.
 *
 *   GET  .../queues/:queue/test-hooks?shard=<name> | ?consumer_shard=<i> | ?coordinator=1
 *   POST .../queues/:queue/test-hooks { shard, arm?: point|null, times?, corrupt?: n }
 *   POST .../queues/:queue/test-hooks { consumer_shard: i, arm: point|null, times? }
 *   POST .../queues/:queue/test-hooks { coordinator: true, arm?, times?, action?: "scale-out"|"drain", drain_shard?, hold_map_ms? }
 *     -> { instance, armed, throws_left, alarms_thrown, alarm_ok_at, ... }
 *   GET  .../accounts/:account/test-hooks/requests
 *     -> { requests }: the Durable Object requests (RPCs and alarms) every object's cost
 *        meter in this isolate has counted (src/kernel/sql-meter.ts requestsCounted), read
 *        without a Durable Object: `npm run bench -- many` counts those of a quiet window,
 *        and asking a DO would be one more. Every account's objects alike.
 *
 * It exists so test/faults can crash one object at an exact point, which a SIGKILL of
 * the whole service cannot aim at. Fenced twice: it is routed only when
 * SHARDQ_TEST_HOOKS is "on" (otherwise the router answers 404 exactly as for any
 * unknown path, see testHookRoutes), and each object's method throws without the var.
 * Only the harness sets the var, in a generated config; wrangler.toml must not
 * (`npm run deploy:dry-run` fails if it does). It also needs the admin scope. A
 * production build has none of it: the handler is left out by the build fence
 * (src/kernel/test-hooks.ts, BuildGlobals), an unknown path's 404 in its place.
 */
import { z } from "zod";
import { consumerShardFor, coordinatorFor, storageShardFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import { requestsCounted } from "../../src/kernel/sql-meter";
import {
  ALL_FAULT_POINTS,
  MAX_ALARM_THROWS,
  testHooksEnabled,
  type BuildGlobals,
  type FaultPoint,
} from "../../src/kernel/test-hooks";
import type { Scope } from "./auth";
import { ok } from "./envelope";
import { readJson } from "./read-json";
import { findQueue, lookupQueue } from "../../src/routing/queue-lookup";
import { parseWith } from "../../src/kernel/validate";

const PATH = /^\/accounts\/[^/]+\/queues\/[^/]+\/test-hooks\/?$/;
const REQUESTS_PATH = /^\/accounts\/[^/]+\/test-hooks\/requests\/?$/;

/** The hooks' entries for the router's path check (./path-access.ts, PathAccess): none unless the var is on, so the paths are as unknown as any other. */
export function testHookRoutes(env: Env): Array<[RegExp, Partial<Record<string, readonly Scope[]>>]> {
  return testHooksEnabled(env)
    ? [
        [PATH, { GET: ["admin"], POST: ["admin"] }],
        [REQUESTS_PATH, { GET: ["admin"] }],
      ]
    : [];
}

/** A POST's body. Built when called, not at load, so a build without the handler has none of it. */
function hookBody() {
  const point = z
    .enum(ALL_FAULT_POINTS as [FaultPoint, ...FaultPoint[]])
    .nullable()
    .optional();
  const times = z.number().int().min(1).max(MAX_ALARM_THROWS).optional();
  return z.union([
    z
      .object({ shard: z.string().min(1), arm: point, times, corrupt: z.number().int().min(1).max(100).optional() })
      .strict(),
    z.object({ consumer_shard: z.number().int().min(0).max(1000), arm: point, times }).strict(),
    z
      .object({
        coordinator: z.literal(true),
        arm: point,
        times,
        action: z.enum(["scale-out", "drain"]).optional(),
        drain_shard: z.string().min(1).optional(),
        hold_map_ms: z.number().int().min(1).max(600_000).optional(),
      })
      .strict(),
  ]);
}

/** The 404 of a path nobody routes. */
function unknownPath(request: Request): never {
  throw new HttpError("not_found", `no route for ${request.method} ${new URL(request.url).pathname}`);
}

/** GET or POST .../test-hooks, in a build that has the hooks. */
async function forwardToHook(request: Request, env: Env, accountId: string, queueRef: string): Promise<Response> {
  const url = new URL(request.url);
  if (!testHooksEnabled(env)) unknownPath(request);
  const map = await lookupQueue(env, accountId, queueRef);
  const q = url.searchParams;
  const req =
    request.method === "POST"
      ? parseWith(hookBody(), await readJson(request))
      : q.has("consumer_shard")
        ? { consumer_shard: Number(q.get("consumer_shard")) }
        : q.has("coordinator")
          ? { coordinator: true as const }
          : { shard: q.get("shard") ?? "" };
  if ("coordinator" in req) {
    const {
      arm,
      times: n,
      action,
      drain_shard,
      hold_map_ms,
    } = req as {
      arm?: FaultPoint | null;
      times?: number;
      action?: "scale-out" | "drain";
      drain_shard?: string;
      hold_map_ms?: number;
    };
    if (action === "drain" && !drain_shard) throw HttpError.invalid("drain_shard", 'is required with action "drain"');
    return ok(
      await coordinatorFor(env, map.queueId).testHook({
        arm,
        times: n,
        action,
        shard: drain_shard,
        holdMapMs: hold_map_ms,
      }),
    );
  }
  if ("consumer_shard" in req) {
    if (!Number.isInteger(req.consumer_shard) || req.consumer_shard < 0)
      throw HttpError.invalid("consumer_shard", "must be an integer >= 0");
    const { arm, times: n } = req as { arm?: FaultPoint | null; times?: number };
    return ok(await consumerShardFor(env, map.queueId, req.consumer_shard).testHook({ arm, times: n }));
  }
  // A shard the cached map does not know yet (the nemesis reads the Coordinator's map) is looked up there.
  const current = map.shards.some((s) => s.name === req.shard)
    ? map
    : ((await findQueue(env, accountId, queueRef, { current: true })) ?? map);
  const shard = current.shards.find((s) => s.name === req.shard);
  if (!shard) throw HttpError.invalid("shard", `is not a storage shard of queue "${queueRef}"`);
  const { arm, times: n, corrupt } = req as { arm?: FaultPoint | null; times?: number; corrupt?: number };
  return ok(await storageShardFor(env, shard.name, shard.region).testHook({ arm, times: n, corrupt }));
}

/** GET or POST .../test-hooks: forwarded to the hook, or (a production build) 404 as any unknown path. */
export const testHook: (request: Request, env: Env, accountId: string, queueRef: string) => Promise<Response> =
  (globalThis as BuildGlobals).process?.env?.NODE_ENV !== "production"
    ? forwardToHook
    : async (request) => unknownPath(request);

/** GET .../test-hooks/requests, in a build that has the hooks: this isolate's count, no object asked. */
function countedRequests(request: Request, env: Env): Response {
  if (!testHooksEnabled(env)) unknownPath(request);
  return ok({ requests: requestsCounted() });
}

/** GET .../test-hooks/requests: the count, or (a production build) 404 as any unknown path. */
export const testHookRequests: (request: Request, env: Env) => Response | Promise<Response> =
  (globalThis as BuildGlobals).process?.env?.NODE_ENV !== "production"
    ? countedRequests
    : async (request) => unknownPath(request);
