/** A pull that found nothing and asked to wait: long polling at the queue's Coordinator. */
import { coordinatorFor } from "../../src/kernel/addressing";
import type { Env } from "../../src/kernel/env";
import { HttpError } from "../../src/kernel/errors";
import type { PullWaitAnswer, WaitCap } from "../../src/kernel/pull-waits";
import type { DeliveryPlan } from "../../src/kernel/shard-map";
import { sleep } from "../../src/kernel/sleep";
import { leaseFromShards } from "./pull-from-shards";
import { pausedError } from "./pull-queue";

/** How long a pull refused for a cap of waiting pulls is told to wait: waiting pulls answer all the time. */
export const WAIT_CAP_RETRY_AFTER_SECONDS = 1;

/** After a Coordinator that held a waiting pull failed (a restart), how long before it is asked again. */
const COORDINATOR_RETRY_MS = 100;

/**
 * Long polling: waits at the queue's Coordinator for new messages (coordinator/pull-waiters.ts),
 * then leases, until some come or the wait ends: an empty answer, never an error. Nothing is
 * leased while waiting. A pull whose client goes away mid-wait leases nothing, and a
 * wake-up it took goes to the next waiting pull: otherwise the message would wait out a
 * lease nobody holds. The client says so (POST .../messages/pull/cancel with its `wait_id`,
 * as shardq/client does when a pull is aborted), or the runtime does (the request's signal,
 * which the `enable_request_signal` flag turns on; wrangler dev's local proxy does not pass
 * a disconnect on, so locally only the first works).
 */
export async function waitAndLease(
  env: Env,
  ctx: ExecutionContext,
  signal: AbortSignal,
  wait: { id: string; named: boolean; token: string | undefined },
  plan: DeliveryPlan,
  wanted: number,
  leaseMs: number,
  deadline: number,
  found: Awaited<ReturnType<typeof leaseFromShards>>,
) {
  let last = found;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0 || signal.aborted) return last;
    // A new handle each time: one whose object restarted keeps failing.
    const coordinator = coordinatorFor(env, plan.queueId);
    let woken: PullWaitAnswer | typeof GONE;
    try {
      woken = await untilGone<PullWaitAnswer>(
        signal,
        coordinator.waitForMessages(left, wait.id, wait.token) as Promise<PullWaitAnswer>,
      );
    } catch (err) {
      // A Coordinator that restarted forgot who waits: look at the shards, then wait again.
      console.error("waiting for messages failed; looking at the shards again:", err);
      await sleep(Math.min(left, COORDINATOR_RETRY_MS));
      woken = "woken";
    }
    if (woken === GONE || signal.aborted) {
      ctx.waitUntil(
        coordinatorFor(env, plan.queueId)
          .cancelWait(wait.id)
          .catch(() => null),
      );
      return last;
    }
    if (woken === "paused") throw pausedError(plan);
    if (typeof woken === "object") throw capped(woken, plan);
    if (woken === "ended") return last;
    last = await leaseFromShards(env, plan, wanted, leaseMs, deadline);
    if (last.leased.length === 0) {
      // Woken for a shard this plan may not name yet (a scale-out during the wait).
      plan = await currentPlan(env, plan);
      continue;
    }
    // Before the answer leaves: a cancel after it must not find a wake-up to hand on. A full
    // batch: more may be ready, for the next pull waiting.
    const full = last.leased.length === wanted ? last.leased[0]!.shard : null;
    if (wait.named || full !== null) await coordinator.pullAnswered(wait.id, full).catch(() => undefined);
    return last;
  }
}

const GONE = Symbol("client gone");

/** 429 for a pull over a cap of waiting pulls (coordinator/pull-waiters.ts); it leased nothing. */
function capped({ capped, limit }: { capped: WaitCap; limit: number }, plan: DeliveryPlan): HttpError {
  const err =
    capped === "queue"
      ? new HttpError(
          "rate_limited",
          `queue "${plan.queueName}" has ${limit} pulls waiting, the most one queue holds; retry after ${WAIT_CAP_RETRY_AFTER_SECONDS} s`,
          "queue",
        )
      : new HttpError(
          "rate_limited",
          `this token has ${limit} pulls waiting on queue "${plan.queueName}", the most one token holds on a queue; retry after ${WAIT_CAP_RETRY_AFTER_SECONDS} s, or wait in fewer pulls`,
          "authorization",
        );
  err.headers["retry-after"] = String(WAIT_CAP_RETRY_AFTER_SECONDS);
  return err;
}

/** `p`, or GONE as soon as the client has gone away. */
function untilGone<T>(signal: AbortSignal, p: Promise<T>): Promise<T | typeof GONE> {
  if (signal.aborted) return Promise.resolve(GONE);
  let onAbort!: () => void;
  const gone = new Promise<typeof GONE>((resolve) => {
    onAbort = () => resolve(GONE);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  return Promise.race([p, gone]).finally(() => signal.removeEventListener("abort", onAbort));
}

/** The queue's delivery plan as its Coordinator has it now; the one in hand if that fails. */
async function currentPlan(env: Env, plan: DeliveryPlan): Promise<DeliveryPlan> {
  const fresh = await coordinatorFor(env, plan.queueId)
    .deliveryPlan()
    .catch(() => null);
  return fresh && fresh.accountId === plan.accountId && fresh.queueId === plan.queueId ? fresh : plan;
}
