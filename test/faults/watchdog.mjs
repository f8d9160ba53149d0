// Bounds the end of a fault run. Every loop of the run has its own deadline, but the steps
// after the drain (the clients ending, the push sink and the history closing, the service
// stopping, the check) had none: a full run once printed "drain done" and then waited for
// more than nine minutes, with nothing to say what for. Each of those steps now waits a
// bounded time and says what it was still waiting for, and the whole run has a deadline
// past which it ends with that message instead of a verdict.

/** How long each step of the run's end may take before the run goes on without it. */
export const END_STEP_MS = {
  // A consumer's iteration: a pull or an ack (10 s each at most, client.mjs) and a short sleep.
  clients: 30_000,
  // A late ack sleeps at most the longest visibility timeout (5 s) and makes one call.
  late: 30_000,
  sink: 10_000,
  history: 10_000,
  // SIGTERM, SIGKILL 10 s later, 15 s for the group to go (cli/wrangler/dev-server.mjs).
  service: 30_000,
};

export class Watchdog {
  /**
   * @param {{ history: import("./history.mjs").History, log: (line: string) => void }} o
   */
  constructor(o) {
    this.o = o;
    this.waitingFor = "the start";
    this.since = Date.now();
    /** @type {string[]} the steps that did not end in their time */
    this.stuck = [];
    /** @type {NodeJS.Timeout | undefined} */
    this.timer = undefined;
    /** @type {(err: Error) => void} */
    let fail = () => {};
    /** Rejects when the deadline passes: what the run was waiting for, and what was still open. */
    this.expired = /** @type {Promise<never>} */ (new Promise((_, reject) => (fail = reject)));
    this.expired.catch(() => {});
    this.fail = fail;
    /** @type {Array<() => unknown>} run once if the deadline passes (stop the service) */
    this.onExpire = [];
  }

  /** What the run waits for from now on. @param {string} label */
  step(label) {
    this.waitingFor = label;
    this.since = Date.now();
  }

  /**
   * (Re)sets the run's deadline. The timer is not unref'd: a run whose last handle closed
   * while a promise stayed pending would otherwise exit without a verdict.
   * @param {number} at epoch ms
   */
  deadline(at) {
    clearTimeout(this.timer);
    this.deadlineAt = at;
    this.timer = setTimeout(() => this.expire(), Math.max(0, at - Date.now()));
  }

  expire() {
    const message = `fault run: no verdict by its deadline (${new Date(this.deadlineAt ?? Date.now()).toISOString()}): still waiting for ${this.waitingFor} (for ${Math.round((Date.now() - this.since) / 1000)} s); ${this.pending()}`;
    this.o.log(message);
    for (const f of this.onExpire) {
      try {
        void Promise.resolve(f()).catch(() => {});
      } catch {}
    }
    this.fail(new Error(message));
  }

  disarm() {
    clearTimeout(this.timer);
  }

  /**
   * Waits for `p` at most `ms`: on time, true; else says what is still pending, remembers
   * the step as stuck, and returns false (the run goes on to its verdict).
   * @param {string} label @param {Promise<unknown>} p @param {number} ms
   */
  async bounded(label, p, ms) {
    this.step(label);
    /** @type {NodeJS.Timeout | undefined} */
    let t;
    const late = new Promise((r) => (t = setTimeout(() => r("late"), ms)));
    const r = await Promise.race([
      p.then(
        () => "done",
        () => "done",
      ),
      late,
    ]);
    clearTimeout(t);
    if (r === "done") return true;
    this.stuck.push(label);
    this.o.log(`  still waiting for ${label} after ${Math.round(ms / 1000)} s, going on without it; ${this.pending()}`);
    return false;
  }

  /** The operations still open in the history, by process, and the process's live handles. */
  pending() {
    /** @type {Record<string, number>} */
    const open = {};
    for (const { p, f } of this.o.history.open.values()) open[`${p} ${f}`] = (open[`${p} ${f}`] ?? 0) + 1;
    /** @type {Record<string, number>} */
    const handles = {};
    for (const h of process.getActiveResourcesInfo()) handles[h] = (handles[h] ?? 0) + 1;
    const list = (/** @type {Record<string, number>} */ r) =>
      Object.entries(r)
        .map(([k, n]) => `${k} x${n}`)
        .join(", ") || "none";
    return `open operations: ${list(open)}; live handles: ${list(handles)}`;
  }
}
