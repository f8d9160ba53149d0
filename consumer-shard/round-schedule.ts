/**
 * When a consumer shard's delivery rounds run: on a timer in memory when the next is due soon,
 * else on the object's alarm; and never two at once.
 *
 * An alarm is a row written and a request. At a trickle of messages every batch waits for its
 * max_wait_time_ms, so a round per alarm was an alarm per message; a wait of TIMER_WAIT_MS or
 * less runs on a timer instead, which costs neither. A timer is lost with the object (a crash,
 * a deploy), so while rounds run on timers an alarm stays set behind them (BACKSTOP_MS): one
 * alarm per that long while messages flow, deleted once the shard stays idle IDLE_MS, so an
 * idle shard keeps no alarm.
 */
import type { Timers } from "../src/kernel/clock";

/**
 * A round due within this long waits on a timer. Short enough that the object, kept in memory
 * by the wake-up or the round that set the timer, still is when it fires (an idle object is
 * evicted about 10 s after its last request).
 */
export const TIMER_WAIT_MS = 5000;
/** The backstop alarm's distance behind the round a timer waits for: what a lost timer delays that round by, at worst. */
export const BACKSTOP_MS = 30_000;
/** A shard idle this long (no round due) deletes its backstop alarm. */
export const IDLE_MS = 3000;

export class RoundSchedule {
  /** The round waiting on a timer, and when it is due. */
  private timer: { at: number; handle: unknown } | null = null;
  /** The alarm this instance set last: for a round, or the backstop behind timers (null: none it knows of). */
  private alarmSet: { at: number; backstop: boolean } | null = null;
  /** The round under way (from the alarm or a timer). */
  private running: Promise<void> | null = null;
  /** A round was asked for while one ran: another follows it. */
  private again = false;
  /** When the last round found nothing due (null: something is due since). */
  private idleSince: number | null = null;

  constructor(
    private readonly storage: DurableObjectStorage,
    /** The timers to wait on; none while a test drives time with its own clock (alarms then, as the test runs them). */
    private readonly timers: () => Timers | null,
    private readonly now: () => number,
    private readonly runOnce: () => Promise<void>,
  ) {}

  private async dropBackstop(): Promise<void> {
    if (!this.alarmSet?.backstop) return;
    this.alarmSet = null;
    await this.storage.deleteAlarm();
  }

  /** A round is under way. */
  get busy(): boolean {
    return this.running !== null;
  }

  /**
   * An alarm BACKSTOP_MS from now unless one is set: a batch pushed by a storage shard came
   * without a round, and the next one is lost if that shard restarts meanwhile. One alarm per
   * BACKSTOP_MS while pushes come, as behind timers.
   */
  async backstop(): Promise<void> {
    // Not idle: a backstop set for rounds is kept while batches come pushed, not deleted to be set again.
    this.idleSince = null;
    if (this.alarmSet !== null || !this.timers()) return;
    if ((await this.storage.getAlarm()) !== null) return;
    const at = this.now() + BACKSTOP_MS;
    this.alarmSet = { at, backstop: true };
    await this.storage.setAlarm(at);
  }

  /** The alarm fired: a round, whatever it was set for (a backstop's finds what a lost timer left). */
  alarmFired(): Promise<void> {
    this.alarmSet = null;
    return this.round();
  }

  /** A round now, or, while one runs, another after it. */
  round(): Promise<void> {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.runOnce();
      } while (this.again);
    })().finally(() => (this.running = null));
    return this.running;
  }

  /**
   * Makes sure a round runs at `at`, unless one is already due sooner: on a timer when that is
   * within TIMER_WAIT_MS (with the backstop alarm behind it), else on the alarm. Null: nothing
   * is due; a backstop no timer needs is deleted.
   *
   * Never later than what is set: a wake-up that came during a round asked for now (inside a
   * running alarm, getAlarm() sees only alarms set since it began), and overwriting it with the
   * round's later next lost that wake-up: the Coordinator, told the shard was running, left it
   * alone until its report went stale, and a message sent meanwhile waited.
   */
  async schedule(at: number | null): Promise<void> {
    const now = this.now();
    const timers = this.timers();
    // A timer long past its time never fired (its request's context is gone): forgotten.
    if (this.timer !== null && now > this.timer.at + TIMER_WAIT_MS) this.timer = null;
    if (at === null) {
      // Not while a timer waits, or a wake-up came during this round: their round needs it.
      if (this.timer !== null || this.again || !this.alarmSet?.backstop) return;
      // Nor at once: at a trickle the next message comes within a second, and deleting the
      // backstop to set it again is two rows a message. Once the shard stayed idle IDLE_MS.
      if (!timers) return this.dropBackstop();
      const since = (this.idleSince = now);
      timers.set(() => {
        if (this.idleSince === since && this.timer === null && this.running === null)
          this.dropBackstop().catch((err: unknown) =>
            console.error("consumer shard: backstop alarm not deleted:", err),
          );
      }, IDLE_MS);
      return;
    }
    this.idleSince = null;
    if (timers && at - now <= TIMER_WAIT_MS) {
      if (this.timer === null || this.timer.at > at) {
        if (this.timer) timers.clear(this.timer.handle);
        const timer: { at: number; handle: unknown } = { at, handle: null };
        timer.handle = timers.set(
          () => {
            // One replaced by a sooner timer and not cleared (clearTimeout() from another request
            // of the object may not reach it): that one's round was this one's.
            if (this.timer !== timer) return;
            this.timer = null;
            this.round().catch((err: unknown) => console.error("consumer shard: round failed:", err));
          },
          Math.max(0, at - now),
        );
        this.timer = timer;
      }
      if ((await this.storage.getAlarm()) === null) {
        this.alarmSet = { at: at + BACKSTOP_MS, backstop: true };
        await this.storage.setAlarm(at + BACKSTOP_MS);
      }
      return;
    }
    const pending = await this.storage.getAlarm();
    if (pending === null || pending > at) {
      this.alarmSet = { at, backstop: false };
      await this.storage.setAlarm(at);
    }
  }
}
