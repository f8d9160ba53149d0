/**
 * A storage shard's one alarm, and when it sleeps.
 *
 * Awake, the shard reports to its Coordinator every heartbeat interval (a row written for the
 * alarm, an RPC). It wakes on anything that changes its figures (a send, a lease that took
 * messages, a settle, a purge, a state or epoch change) and goes back to sleep at the first
 * report that finds nothing changed since the last one sent, or sooner: 3 s after its last
 * request its quiet work (quiet-timer.ts) sends a report marked as its last and puts it to
 * sleep. Either way its last report's figures are exact, so an idle queue costs no request,
 * no alarm and no row written.
 *
 * Asleep, it keeps one alarm at the earliest time something here comes due without a
 * request: a delayed or retried message becoming ready, a lease running out, a held key's
 * next message, the oldest message reaching the queue's retention. That alarm tells the
 * Coordinator if messages are ready (a consumer or a waiting pull comes for them) and wakes
 * the shard for a report of its new figures. While a long-polling pull waits, the shard
 * also watches its due times (due-wakeups.ts) through the same alarm.
 *
 * Awake, the alarm is also never later than the delayed or retried messages written since
 * it woke (`dueBy`). The quiet work would put the alarm there, but it runs on a timer in
 * memory: a process killed before it ran left only the report's alarm, minutes away on the
 * slow cadence, and the messages came due with nobody to tell. After due work it moves on to
 * the next scheduled segment. Not covered: a segment's later messages, whose time the
 * lease that takes its first gives (a lease of a stored lease's segment would re-arm the
 * alarm at every lease period); they wait for the next report, quiet work or due time.
 * The alarm moves only sooner, so this costs an alarm per due time that comes before the
 * next report, at most one per batch written with a delay, none while the report comes first.
 *
 * Awake with traffic far below what the autoscaler acts on, it reports on a slow cadence
 * (src/kernel/heartbeat.ts SLOW_REPORT_MS, its report saying when the next is due): at a message a second a report
 * every interval was a Coordinator request and two rows written per few messages. Traffic
 * that picks up (busy), a backlog that grows, or a change the Coordinator waits to see (a
 * state, an epoch) brings the next report back to within an interval.
 */
export type AlarmCause = "heartbeat" | "due" | "watch";

/** The shortest delay among these that has one (a message ready at once comes due at no time), or null; no array made on the send path. */
export function shortestDelay(items: ReadonlyArray<{ delayMs: number }>): number | null {
  let shortest = Infinity;
  for (const { delayMs } of items) if (delayMs > 0 && delayMs < shortest) shortest = delayMs;
  return shortest === Infinity ? null : shortest;
}

export class ShardAlarm {
  /** Awake: when the next report is due. Null while asleep. */
  private heartbeatAt: number | null = null;
  /** When the earliest due work comes: asleep, from the rows; awake, also the delays written since. */
  private dueAt: number | null = null;
  /** When the one alarm is set for, as far as this instance knows. */
  private alarmAt: number | null = null;
  /** What the alarm was set for, when it was set (a test may run it early: it counts as that). */
  private setFor: AlarmCause | null = null;

  constructor(
    private readonly intervalMs: number,
    private readonly setAlarm: (at: number) => void,
    /** While a pull waits: the next due time it should hear of (due-wakeups.ts). */
    private readonly watchAt: () => number | null,
    /** Whether traffic since the last report is enough for the autoscaler or consumer scaling to hear of it within an interval. */
    private readonly busy: () => boolean = () => true,
    /** Called at every change: the shard's quiet work runs once they stop (quiet-timer.ts). */
    private readonly changed: () => void = () => {},
    private readonly deleteAlarm: () => void = () => {},
  ) {}

  get awake(): boolean {
    return this.heartbeatAt !== null;
  }

  /**
   * Something changed: a report goes out within an interval, or, awake on the slow cadence,
   * when it is due unless the traffic is busy or the change is one to tell `promptly`.
   */
  wake(now: number, promptly = false): void {
    this.changed();
    if (this.heartbeatAt !== null) {
      if (this.heartbeatAt > now + this.intervalMs && (promptly || this.busy())) {
        this.heartbeatAt = now + this.intervalMs;
        this.arm();
      }
      return;
    }
    this.heartbeatAt = now + this.intervalMs;
    this.arm();
  }

  /** After a report, awake: the next one at `at` (an interval on, or the slow cadence's). */
  reportAt(at: number): void {
    this.heartbeatAt = at;
    this.arm();
  }

  /** Messages written here come due at `at` (a delay, a retry's delay): the alarm is no later. */
  dueBy(at: number): void {
    if (this.dueAt !== null && this.dueAt <= at) return;
    this.dueAt = at;
    this.arm();
  }

  /**
   * Nothing changed since the last report: no more reports, one alarm at `dueAt` if anything
   * comes due. An alarm still set for a report (the quiet work sleeps between alarms) is moved
   * there, or deleted: left, it would wake the shard for nothing.
   */
  sleep(dueAt: number | null): void {
    this.heartbeatAt = null;
    this.dueAt = dueAt;
    const at = Math.min(dueAt ?? Infinity, this.watchAt() ?? Infinity);
    if (this.alarmAt !== null && this.alarmAt < at) {
      this.alarmAt = null;
      this.setFor = null;
      if (at === Infinity) this.deleteAlarm();
    }
    this.arm();
  }

  /**
   * At the alarm: what it is for. A report due, or run early for one, counts as the report.
   * None: an alarm this instance did not set (armed before a restart).
   */
  fired(now: number): Set<AlarmCause> {
    const causes = new Set<AlarmCause>();
    const early = this.setFor;
    this.alarmAt = null;
    this.setFor = null;
    if (this.heartbeatAt !== null && (now >= this.heartbeatAt || early === "heartbeat")) {
      this.heartbeatAt = null;
      causes.add("heartbeat");
    }
    if (this.dueAt !== null && (now >= this.dueAt || early === "due")) {
      this.dueAt = null;
      causes.add("due");
    }
    if (early === "watch") causes.add("watch");
    return causes;
  }

  /** Sets the alarm at the soonest of the report, the due work and a waiting pull's watch; only ever moved sooner. */
  arm(): void {
    const watch = this.watchAt();
    const at = Math.min(this.heartbeatAt ?? Infinity, this.dueAt ?? Infinity, watch ?? Infinity);
    if (at === Infinity || (this.alarmAt !== null && this.alarmAt <= at)) return;
    this.alarmAt = at;
    this.setFor = at === this.heartbeatAt ? "heartbeat" : at === this.dueAt ? "due" : "watch";
    this.setAlarm(at);
  }
}
