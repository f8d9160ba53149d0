/**
 * Rate limits per account and per queue: past its limit a tenant gets 429
 * with Retry-After and a JSON error naming what is limited, stores nothing, and does
 * not slow anyone else. The service's limiters are swapped for low ones
 * (vitest.config.ts: 10 calls per account and 3 per queue a minute). Windows are
 * aligned to the clock, so a test may straddle two: each sends enough to pass a limit
 * twice over, and asserts only what holds either way.
 */
import { createExecutionContext, env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { QueueProducer } from "../../broker/producer/queue-producer";
import { RATE_LIMIT_RETRY_AFTER_SECONDS } from "../../broker/http/rate-limit";
import { router } from "../../broker/http/router";
import type { Env } from "../../src/kernel/env";
import { BASE, queuePath, queuesPath } from "./helpers";

const ACCOUNT_LIMIT = 10;
const QUEUE_LIMIT = 3;

/** Accounts of their own, so no other test's calls count against these limits. */
function tenants(...accounts: string[]): Record<string, string> {
  const tokens: Record<string, { account: string }> = {};
  for (const a of accounts) tokens[`${a}-token`] = { account: a };
  return { AUTH_TOKENS: JSON.stringify(tokens) };
}

function withLimits(vars: Record<string, string>, limited = true): Env {
  return {
    ...env,
    ...vars,
    RATE_LIMITS: limited ? "on" : "off",
    ACCOUNT_RATE_LIMITER: env.TEST_ACCOUNT_LIMITER,
    QUEUE_RATE_LIMITER: env.TEST_QUEUE_LIMITER,
  } as Env;
}

async function call(e: Env, account: string, method: string, path: string, body?: unknown) {
  const request = new Request(`${BASE}${path}`, {
    method,
    headers: { authorization: `Bearer ${account}-token`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const res = await router.fetch(request, e, createExecutionContext());
  return { status: res.status, headers: res.headers, json: (await res.json()) as any };
}

async function backlogOf(e: Env, account: string, queue: string): Promise<number> {
  return (await call(e, account, "GET", `${queuePath(queue, account)}/metrics`)).json.result.backlog_count;
}

const unique = () => Math.random().toString(16).slice(2, 8);

describe("rate limits per account and per queue", () => {
  it("answers a queue over its rate with 429, Retry-After and a JSON error naming the queue, storing nothing, while the account's other queues go on", async () => {
    const a = `rl-q-${unique()}`;
    const vars = tenants(a);
    const setup = withLimits(vars, false);
    for (const q of ["busy", "calm"])
      expect((await call(setup, a, "POST", queuesPath(a), { queue_name: q })).status).toBe(201);

    const limited = withLimits(vars);
    const answers = [];
    for (let i = 0; i < 2 * QUEUE_LIMIT + 1; i++)
      answers.push(await call(limited, a, "POST", `${queuePath("busy", a)}/messages`, { body: i }));
    const refused = answers.filter((r) => r.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.headers.get("retry-after")).toBe(String(RATE_LIMIT_RETRY_AFTER_SECONDS));
      expect(r.json).toMatchObject({ success: false, result: null });
      expect(r.json.errors[0].field).toBe("queue");
    }
    expect(await backlogOf(setup, a, "busy")).toBe(answers.filter((r) => r.status === 200).length);
    // The same account's other queue has its own budget.
    expect((await call(limited, a, "POST", `${queuePath("calm", a)}/messages`, { body: "calm" })).status).toBe(200);
  });

  it("answers an account over its rate with 429 naming account_id on every route, and leaves other accounts alone", async () => {
    const [noisy, quiet] = [`rl-noisy-${unique()}`, `rl-quiet-${unique()}`];
    const vars = tenants(noisy, quiet);
    const setup = withLimits(vars, false);
    const queues = Array.from({ length: 7 }, (_, i) => `q${i}`);
    for (const q of queues)
      expect((await call(setup, noisy, "POST", queuesPath(noisy), { queue_name: q })).status).toBe(201);
    expect((await call(setup, quiet, "POST", queuesPath(quiet), { queue_name: "q0" })).status).toBe(201);

    const limited = withLimits(vars);
    // Three calls per queue stay within each queue's limit; 21 in all pass the account's twice.
    const answers = [];
    for (const q of queues)
      for (let i = 0; i < QUEUE_LIMIT; i++)
        answers.push(await call(limited, noisy, "POST", `${queuePath(q, noisy)}/messages`, { body: i }));
    expect(answers.length).toBeGreaterThan(2 * ACCOUNT_LIMIT);
    const refused = answers.filter((r) => r.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.json.errors[0].field).toBe("account_id");
      expect(r.headers.get("retry-after")).toBe(String(RATE_LIMIT_RETRY_AFTER_SECONDS));
    }
    let stored = 0;
    for (const q of queues) stored += await backlogOf(setup, noisy, q);
    expect(stored).toBe(answers.filter((r) => r.status === 200).length);
    // Any route, not only sends: the account is over its rate.
    const listing = [];
    for (let i = 0; i <= ACCOUNT_LIMIT; i++)
      listing.push((await call(limited, noisy, "GET", queuesPath(noisy))).status);
    expect(listing).toContain(429);
    // The quiet tenant is served as if nothing happened.
    for (let i = 0; i < QUEUE_LIMIT; i++)
      expect((await call(limited, quiet, "POST", `${queuePath("q0", quiet)}/messages`, { body: i })).status).toBe(200);
  });

  it("counts producer-binding sends too: past the limit send() and sendBatch() throw, storing nothing", async () => {
    const a = `rl-bind-${unique()}`;
    const vars = tenants(a);
    const setup = withLimits(vars, false);
    expect((await call(setup, a, "POST", queuesPath(a), { queue_name: "bound" })).status).toBe(201);
    const ctx = createExecutionContext();
    Object.defineProperty(ctx, "props", { value: { account: a, queue: "bound" } });
    const producer = new QueueProducer(ctx, withLimits(vars));
    let sent = 0;
    const errors: string[] = [];
    for (let i = 0; i < 2 * QUEUE_LIMIT + 1; i++) {
      try {
        sent +=
          i % 2 === 0
            ? (await producer.send(i), 1)
            : (await producer.sendBatch([{ body: i }, { body: -i }])).messageIds.length;
      } catch (err) {
        errors.push((err as Error).message);
      }
    }
    expect(errors.length).toBeGreaterThan(0);
    for (const m of errors) expect(m).toMatch(/over its request rate; retry after \d+ s/);
    expect(await backlogOf(setup, a, "bound")).toBe(sent);
  });

  it("counts a queue's calls under one allowance whether its path names it by name or by id", async () => {
    const a = `rl-ref-${unique()}`;
    const vars = tenants(a);
    const setup = withLimits(vars, false);
    const queue = (await call(setup, a, "POST", queuesPath(a), { queue_name: "either" })).json.result;
    // A counter of our own, exact and without clock windows: what matters is which key each call counts under.
    const counts = new Map<string, number>();
    const counting = {
      limit: async ({ key }: { key: string }) => {
        counts.set(key, (counts.get(key) ?? 0) + 1);
        return { success: counts.get(key)! <= QUEUE_LIMIT };
      },
    } as unknown as RateLimit;
    const limited = {
      ...withLimits(vars),
      QUEUE_RATE_LIMITER: counting,
      ACCOUNT_RATE_LIMITER: { limit: async () => ({ success: true }) },
    } as unknown as Env;
    const byName = [];
    for (let i = 0; i < QUEUE_LIMIT; i++)
      byName.push((await call(limited, a, "POST", `${queuePath("either", a)}/messages`, { body: i })).status);
    expect(byName).toEqual(Array(QUEUE_LIMIT).fill(200));
    const byId = await call(limited, a, "POST", `${queuePath(queue.queue_id, a)}/messages`, { body: "by id" });
    expect(byId.status).toBe(429);
    expect(byId.json.errors[0].field).toBe("queue");
    const ctx = createExecutionContext();
    Object.defineProperty(ctx, "props", { value: { account: a, queue: queue.queue_id } });
    await expect(new QueueProducer(ctx, limited).send("through the binding, by id")).rejects.toThrow(
      /over its request rate/,
    );
    expect(await backlogOf(setup, a, "either")).toBe(QUEUE_LIMIT);
    expect(counts.size).toBe(1);
  });

  it("lets calls through when the limiter itself fails, and is off unless RATE_LIMITS is on", async () => {
    const a = `rl-open-${unique()}`;
    const vars = tenants(a);
    const broken = { limit: () => Promise.reject(new Error("limiter down")) } as unknown as RateLimit;
    const failing = { ...withLimits(vars), ACCOUNT_RATE_LIMITER: broken, QUEUE_RATE_LIMITER: broken } as Env;
    expect((await call(failing, a, "POST", queuesPath(a), { queue_name: "open" })).status).toBe(201);
    for (let i = 0; i < 2 * QUEUE_LIMIT + 1; i++)
      expect((await call(failing, a, "POST", `${queuePath("open", a)}/messages`, { body: i })).status).toBe(200);
    const off = withLimits(vars, false);
    for (let i = 0; i < 2 * QUEUE_LIMIT + 1; i++)
      expect((await call(off, a, "POST", `${queuePath("open", a)}/messages`, { body: i })).status).toBe(200);
  });
});
