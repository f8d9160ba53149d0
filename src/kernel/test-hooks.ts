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
 * Fenced: a hook works only when the var SHARDQ_TEST_HOOKS is "on", which only the
 * fault harness sets, in a config it generates (scripts/dev-config.mjs); wrangler.toml
 * and .dev.vars never set it, and `npm run deploy:dry-run` fails if they do. Without it
 * the broker's route answers 404 like an unknown path (broker/http/test-hooks-api.ts) and
 * each object's RPC method throws, so a deployed service has no way to reach a hook.
 */
import { randomHex } from "./ids";

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

export function testHooksEnabled(env: { SHARDQ_TEST_HOOKS?: string }): boolean {
  return env.SHARDQ_TEST_HOOKS === "on";
}

/** One object's hooks: at most one point armed, fired once (the reset forgets it anyway). */
export class TestHooks {
  private readonly instance = randomHex(8);
  private armed: FaultPoint | null = null;
  private throwsLeft = 0;
  private alarmsThrown = 0;
  private alarmOkAt: number | null = null;
  constructor(
    private readonly enabled: boolean,
    private readonly target: HookTarget,
  ) {}

  /** Throws unless the hooks are on: every hook entry point calls it first. */
  check(): void {
    if (!this.enabled) throw new Error("test hooks are off (SHARDQ_TEST_HOOKS is not \"on\")");
  }

  /** Arms a point (null disarms; throw-alarm takes how many alarms), or only reads. Throws unless enabled. */
  control(arm?: FaultPoint | null, times = 1): TestHookStatus {
    this.check();
    if (arm !== undefined) {
      if (arm !== null && !(FAULT_POINTS[this.target] as readonly string[]).includes(arm)) {
        throw new Error(`fault point ${String(arm)} is not one of the ${this.target}'s (${FAULT_POINTS[this.target].join(", ")})`);
      }
      this.armed = arm === "throw-alarm" ? null : arm;
      this.throwsLeft = arm === "throw-alarm" ? Math.max(1, Math.min(MAX_ALARM_THROWS, Math.floor(times))) : arm === null ? 0 : this.throwsLeft;
    }
    return this.status();
  }

  status(): TestHookStatus {
    return { instance: this.instance, armed: this.throwsLeft > 0 ? "throw-alarm" : this.armed, throws_left: this.throwsLeft, alarms_thrown: this.alarmsThrown, alarm_ok_at: this.alarmOkAt };
  }

  /** At a fault point: aborts the object now when this point is armed. Costs one comparison otherwise. */
  at(point: FaultPoint, ctx: DurableObjectState): void {
    if (this.armed !== point) return;
    this.armed = null;
    ctx.abort(`test hook: ${point}`);
  }

  /**
   * After a write, with its reply: when this point is armed, waits until the write is
   * durable and then aborts, so the reply never leaves. Aborting at once would not do:
   * the turn's writes commit only when it ends, so an abort inside it rolls them back
   * (the output gate's promise) and nothing would be stored.
   */
  afterDurable<T>(point: FaultPoint, ctx: DurableObjectState, reply: T): T | Promise<T> {
    if (this.armed !== point) return reply;
    this.armed = null;
    return ctx.storage.sync().then(() => {
      ctx.abort(`test hook: ${point}`);
      return reply;
    });
  }

  /** First thing in alarm(): throws while throw-alarm has throws left (the platform retries the alarm). */
  alarmStarts(): void {
    if (this.throwsLeft <= 0) return;
    this.throwsLeft--;
    this.alarmsThrown++;
    throw new Error(`test hook: throw-alarm (${this.throwsLeft} more to throw)`);
  }

  /** Last thing in an alarm() that ran through: when the object was seen working again. */
  alarmEnds(now: number): void {
    if (this.enabled) this.alarmOkAt = now;
  }
}
