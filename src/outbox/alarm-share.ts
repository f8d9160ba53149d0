/**
 * One alarm per Durable Object, shared by the object and its outbox. The outbox keeps, in one
 * row of its own, the object's own alarm time (as the object gave it through the outbox, or as
 * the outbox found it), the time the outbox itself needs to run (a backstop while messages wait,
 * a retry after a failed send), and the alarm as the outbox last set or saw it. The alarm is
 * always the earlier of the two times, so the outbox only ever moves the object's alarm earlier,
 * puts the object's time back once it no longer needs its own, and leaves no alarm when neither
 * needs one.
 *
 * Every change happens in the caller's storage transaction (the row and the alarm are both in
 * the object's SQLite), so a transaction that rolls back takes its alarm change back with it.
 */

export const STATE_TABLE = "_shardq_outbox_state";

export interface SharedAlarmState {
  /** The object's own alarm, ms since the epoch; null: none. */
  ownAlarm: number | null;
  /** When the outbox needs to run: the backstop while messages wait, or the next retry. */
  outboxAlarm: number | null;
  /** The alarm as the outbox last set or saw it. */
  armed: number | null;
  /** Failed sends in a row (0 after any answered one). */
  attempts: number;
  lastError: string | null;
}

type Row = {
  own_alarm: number | null;
  outbox_alarm: number | null;
  armed: number | null;
  attempts: number;
  last_error: string | null;
};

const EMPTY: SharedAlarmState = { ownAlarm: null, outboxAlarm: null, armed: null, attempts: 0, lastError: null };

export function earliest(a: number | null, b: number | null): number | null {
  if (a === null) return b;
  if (b === null) return a;
  return Math.min(a, b);
}

export class AlarmShare {
  constructor(private readonly storage: DurableObjectStorage) {
    storage.sql.exec(
      `CREATE TABLE IF NOT EXISTS ${STATE_TABLE} (
        one INTEGER PRIMARY KEY CHECK (one = 1),
        own_alarm INTEGER,
        outbox_alarm INTEGER,
        armed INTEGER,
        attempts INTEGER NOT NULL,
        last_error TEXT
      )`,
    );
  }

  read(): SharedAlarmState {
    const [row] = this.storage.sql
      .exec<Row>(`SELECT own_alarm, outbox_alarm, armed, attempts, last_error FROM ${STATE_TABLE} WHERE one = 1`)
      .toArray();
    if (!row) return { ...EMPTY };
    return {
      ownAlarm: row.own_alarm,
      outboxAlarm: row.outbox_alarm,
      armed: row.armed,
      attempts: row.attempts,
      lastError: row.last_error,
    };
  }

  /**
   * Changes the state, sets the alarm to the earlier time if it is not that already, and writes
   * the row only when something changed: a send while the outbox is already armed writes nothing
   * here.
   */
  update(change: (s: SharedAlarmState) => void): SharedAlarmState {
    const now = Date.now();
    const before = this.read();
    const s = { ...before };
    change(s);
    const want = earliest(s.ownAlarm, s.outboxAlarm);
    // An alarm already due is left alone: it goes off now either way, and setting it again
    // would only write.
    const bothDue = want !== null && s.armed !== null && want <= now && s.armed <= now;
    if (want !== s.armed && !bothDue) {
      // The runtime moves a time in the past to now: the row keeps the time the runtime keeps,
      // so that reconcile() does not take the difference for the object's doing.
      const at = want === null ? null : Math.max(want, now);
      const done = at === null ? this.storage.deleteAlarm() : this.storage.setAlarm(at);
      done.catch((err: unknown) => console.error("shardq/outbox: could not set the object's alarm:", err));
      s.armed = at;
    }
    if (!sameState(before, s)) {
      this.storage.sql.exec(
        `INSERT OR REPLACE INTO ${STATE_TABLE} (one, own_alarm, outbox_alarm, armed, attempts, last_error) VALUES (1, ?, ?, ?, ?, ?)`,
        s.ownAlarm,
        s.outboxAlarm,
        s.armed,
        s.attempts,
        s.lastError,
      );
    }
    return s;
  }

  /**
   * Takes in what happened to the alarm since the outbox last looked. An alarm that was due and
   * is gone fired (its handler may not have called the outbox: the outbox's part is re-armed,
   * the object's own time, if it had come, is spent). Any other difference is the object's own
   * doing, through ctx.storage directly: its alarm is now what the object left.
   */
  async reconcile(now: number): Promise<void> {
    const actual = await this.storage.getAlarm();
    const s = this.read();
    if (actual === s.armed) return;
    // Both due: one alarm about to go off, whichever time the runtime wrote down for it.
    if (actual !== null && s.armed !== null && actual <= now && s.armed <= now) return;
    this.update((x) => {
      if (actual === null && x.armed !== null && x.armed <= now) {
        if (x.ownAlarm !== null && x.ownAlarm <= x.armed) x.ownAlarm = null;
      } else {
        x.ownAlarm = actual;
      }
      x.armed = actual;
    });
  }

  /**
   * Takes in the alarm that just fired, from within alarm(): it is gone unless set again during
   * the handler (the runtime deletes it after the handler otherwise). Returns whether it was the
   * object's own time that came: true when that time has passed, and also whenever the outbox
   * had nothing due, since an alarm nobody told the outbox about is the object's.
   */
  async fired(now: number): Promise<boolean> {
    const actual = await this.storage.getAlarm();
    const before = this.read();
    const outboxDue = before.outboxAlarm !== null && before.outboxAlarm <= now;
    const ownDue = (before.ownAlarm !== null && before.ownAlarm <= now) || !outboxDue;
    this.update((s) => {
      if (actual === null) s.armed = null;
      else if (actual !== s.armed) s.ownAlarm = s.armed = actual;
      if (ownDue && s.ownAlarm !== null && s.ownAlarm <= now) s.ownAlarm = null;
    });
    return ownDue;
  }
}

function sameState(a: SharedAlarmState, b: SharedAlarmState): boolean {
  return (
    a.ownAlarm === b.ownAlarm &&
    a.outboxAlarm === b.outboxAlarm &&
    a.armed === b.armed &&
    a.attempts === b.attempts &&
    a.lastError === b.lastError
  );
}
