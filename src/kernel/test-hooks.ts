/**
 * Fault hooks for the fault harness (test/faults), and nothing else. A SIGKILL of
 * `wrangler dev` resets every object at once at a random moment; these end one object
 * (ctx.abort(), which ends it as a crash or an eviction would) at the moments
 * at-least-once has to get right, or make its next alarms throw:
 *
 *   storage shard   abort-append      an append is durable, its reply has not left
 *                   abort-settle      at the next ack or retry it is asked to apply
 *   consumer shard  abort-leased      a batch is leased, not yet handed to the consumer
 *                   abort-dispatched  the consumer returned, its acks not yet applied
 *   coordinator     abort-scale-out   new shards written as pending and activated, not yet active
 *                   abort-drain       a shard told to drain, the change not yet recorded
 *   any of them     throw-alarm       the next `times` alarms throw before doing anything
 *
 * The hooks' code is here, but for the two pieces that need what lies above the kernel:
 * the broker's route (broker/http/test-hooks-api.ts) and the storage shard's "corrupt"
 * fault (storage-shard/segments/corrupt-bodies.ts). Two fences keep them shut:
 *
 * - At run time, testHooksEnabled(env): a hook works only when the var SHARDQ_TEST_HOOKS
 *   is "on", which only the fault harness sets, in a config it generates
 *   (cli/wrangler/dev-config.mjs); wrangler.toml and .dev.vars never set it, and `npm run
 *   deploy:dry-run` fails if they do. Without it the broker's route answers 404 like an
 *   unknown path and each object's testHook RPC method throws. Objects get their hooks
 *   from testHooksFor(env, target), which asks it.
 *
 * - At build time, the build fence (BuildGlobals below): `wrangler deploy` bundles with
 *   process.env.NODE_ENV replaced by "production" (`wrangler dev` by "development"; either
 *   unless NODE_ENV is set in the shell), esbuild folds the expression and drops the code
 *   it rules out. A deployed bundle holds inert stand-ins where the hooks were: no
 *   arming, no abort, no corruption, no route handler. (The Coordinator's forced
 *   scale-out, drain and held map are still there, behind its hooks' check(), which
 *   throws.) `npm run deploy:dry-run` fails on hook code in its bundle, and
 *   test/e2e/production-bundle-hooks.test.ts reads such a bundle. The vitest workers pool leaves
 *   the expression as written and NODE_ENV unset, so tests keep the hooks behind the var.
 *   Running the fault harness with NODE_ENV=production would leave them out: it would find
 *   its route missing.
 */
import { randomHex } from "./ids";

/**
 * What the build fence reads. The fence itself is the expression
 *
 *   (globalThis as BuildGlobals).process?.env?.NODE_ENV !== "production"
 *
 * written out in full wherever code is to be left out of a production build (here,
 * broker/http/test-hooks-api.ts, storage-shard/segments/corrupt-bodies.ts): esbuild folds it only
 * where it stands, never through a variable or a function, and wrangler's replacement
 * matches it with or without the `?.`. Where no bundler replaced it, the `?.` keeps it from
 * throwing when there is no `process`, and it reads true: the hooks are in, behind the var.
 */
export type BuildGlobals = { process?: { env?: { NODE_ENV?: string } } };

export const FAULT_POINTS = {
  storage: ["abort-append", "abort-settle", "throw-alarm"],
  consumer: ["abort-leased", "abort-dispatched", "throw-alarm"],
  coordinator: ["abort-scale-out", "abort-drain", "throw-alarm"],
} as const;
export type HookTarget = keyof typeof FAULT_POINTS;
export type FaultPoint = (typeof FAULT_POINTS)[HookTarget][number];
export const ALL_FAULT_POINTS: readonly FaultPoint[] = [...new Set(Object.values(FAULT_POINTS).flat())];

/** Most alarms one arming makes throw: past the platform's 6 retries, and no further. */
export const MAX_ALARM_THROWS = 10;

export interface TestHookStatus {
  /** Random per object instance: a new value means the object was reset since it was read. */
  instance: string;
  armed: FaultPoint | null;
  /** Alarms still to throw (throw-alarm). */
  throws_left: number;
  /** Alarms this instance threw on purpose, and when (ms since the epoch) its last alarm ran to the end. */
  alarms_thrown: number;
  alarm_ok_at: number | null;
}

/** The one run-time fence: whether the hooks are open. Always false in a production build. */
export function testHooksEnabled(env: { SHARDQ_TEST_HOOKS?: string }): boolean {
  return (globalThis as BuildGlobals).process?.env?.NODE_ENV !== "production" && env.SHARDQ_TEST_HOOKS === "on";
}

/** One object's hooks, as its code calls them: every fault point, and the RPC method's control. */
export interface TestHooks {
  /** Throws unless the hooks are on: every hook entry point calls it first. */
  check(): void;
  /** Arms a point (null disarms; throw-alarm takes how many alarms), or only reads. Throws unless enabled. */
  control(arm?: FaultPoint | null, times?: number): TestHookStatus;
  status(): TestHookStatus;
  /** At a fault point: aborts the object now when this point is armed. Costs one comparison otherwise. */
  at(point: FaultPoint, ctx: DurableObjectState): void;
  /**
   * After a write, with its reply: when this point is armed, waits until the write is
   * durable and then aborts, so the reply never leaves.
   */
  afterDurable<T>(point: FaultPoint, ctx: DurableObjectState, reply: T): T | Promise<T>;
  /** First thing in alarm(): throws while throw-alarm has throws left (the platform retries the alarm). */
  alarmStarts(): void;
  /** Last thing in an alarm() that ran through: when the object was seen working again. */
  alarmEnds(now: number): void;
}

const OFF = 'test hooks are off (SHARDQ_TEST_HOOKS is not "on")';

/** The hooks of a build that has them: at most one point armed, fired once (the reset forgets it anyway). */
class ArmableHooks implements TestHooks {
  private readonly instance = randomHex(8);
  private armed: FaultPoint | null = null;
  private throwsLeft = 0;
  private alarmsThrown = 0;
  private alarmOkAt: number | null = null;
  constructor(
    private readonly enabled: boolean,
    private readonly target: HookTarget,
  ) {}

  check(): void {
    if (!this.enabled) throw new Error(OFF);
  }

  control(arm?: FaultPoint | null, times = 1): TestHookStatus {
    this.check();
    if (arm !== undefined) {
      if (arm !== null && !(FAULT_POINTS[this.target] as readonly string[]).includes(arm)) {
        throw new Error(
          `fault point ${String(arm)} is not one of the ${this.target}'s (${FAULT_POINTS[this.target].join(", ")})`,
        );
      }
      this.armed = arm === "throw-alarm" ? null : arm;
      this.throwsLeft =
        arm === "throw-alarm"
          ? Math.max(1, Math.min(MAX_ALARM_THROWS, Math.floor(times)))
          : arm === null
            ? 0
            : this.throwsLeft;
    }
    return this.status();
  }

  status(): TestHookStatus {
    return {
      instance: this.instance,
      armed: this.throwsLeft > 0 ? "throw-alarm" : this.armed,
      throws_left: this.throwsLeft,
      alarms_thrown: this.alarmsThrown,
      alarm_ok_at: this.alarmOkAt,
    };
  }

  at(point: FaultPoint, ctx: DurableObjectState): void {
    if (this.armed !== point) return;
    this.armed = null;
    ctx.abort(`test hook: ${point}`);
  }

  // Aborting at once would not do: the turn's writes commit only when it ends, so an abort
  // inside it rolls them back (the output gate's promise) and nothing would be stored.
  afterDurable<T>(point: FaultPoint, ctx: DurableObjectState, reply: T): T | Promise<T> {
    if (this.armed !== point) return reply;
    this.armed = null;
    return ctx.storage.sync().then(() => {
      ctx.abort(`test hook: ${point}`);
      return reply;
    });
  }

  alarmStarts(): void {
    if (this.throwsLeft <= 0) return;
    this.throwsLeft--;
    this.alarmsThrown++;
    throw new Error(`test hook: throw-alarm (${this.throwsLeft} more to throw)`);
  }

  alarmEnds(now: number): void {
    if (this.enabled) this.alarmOkAt = now;
  }
}

/**
 * A production build's stand-in: nothing can be armed, so every fault point is a no-op,
 * and every entry throws as ArmableHooks does with the var off.
 */
class InertHooks implements TestHooks {
  constructor(_enabled: boolean, _target: HookTarget) {}
  check(): void {
    throw new Error(OFF);
  }
  control(): TestHookStatus {
    throw new Error(OFF);
  }
  status(): TestHookStatus {
    return { instance: "", armed: null, throws_left: 0, alarms_thrown: 0, alarm_ok_at: null };
  }
  at(): void {}
  afterDurable<T>(_point: FaultPoint, _ctx: DurableObjectState, reply: T): T {
    return reply;
  }
  alarmStarts(): void {}
  alarmEnds(): void {}
}

/** The hooks' class for this build: not exported, so testHooksFor is the only way to hooks. */
const HooksOfThisBuild: new (enabled: boolean, target: HookTarget) => TestHooks =
  (globalThis as BuildGlobals).process?.env?.NODE_ENV !== "production" ? ArmableHooks : InertHooks;

/** An object's hooks, open only when the fence is (testHooksEnabled). */
export function testHooksFor(env: { SHARDQ_TEST_HOOKS?: string }, target: HookTarget): TestHooks {
  return new HooksOfThisBuild(testHooksEnabled(env), target);
}
