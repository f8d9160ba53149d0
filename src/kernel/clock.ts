/**
 * The one source of "now" for shardq. Durable Objects take a Clock in tests so
 * delays, leases and timeouts can be driven with fake time.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/**
 * A clock tests move by hand. It starts far ahead of real time by default: alarms an
 * object sets from fake times then lie in the real future, and run only when a test
 * runs them, instead of firing at once, over and over.
 */
export class ManualClock implements Clock {
  constructor(private t = Date.now() + 100 * 365 * 86_400_000) {}
  now(): number {
    return this.t;
  }
  advance(ms: number): void {
    this.t += ms;
  }
  set(t: number): void {
    this.t = t;
  }
}

/** Timers an object runs work on later in memory: the system's, or a test's. */
export interface Timers {
  set(fn: () => void, ms: number): unknown;
  clear(handle: unknown): void;
}

export const systemTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};
