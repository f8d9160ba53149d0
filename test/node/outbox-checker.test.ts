// The outbox workload's check (test/faults/outbox-checker.mjs) on hand-made histories: exact
// passes, and each way it can be wrong is seen: an increment never applied, one applied twice,
// a seq beyond the counter, a keyed producer's effects out of order, an outbox left holding
// messages, a counter below a total it answered, a final state never read.
import { describe, expect, it } from "vitest";
import type { Op } from "../faults/history.mjs";
import { checkOutbox } from "../faults/outbox-checker.mjs";

interface Producer {
  producer: string;
  keyed?: boolean;
  total: number;
  pending?: number;
  balance?: Partial<{
    total: number;
    distinct: number;
    maxTimes: number;
    minSeq: number;
    maxSeq: number;
    outOfOrder: number;
    duplicates: number;
  }> | null;
}

/** A history: the plan, increments answered with `answered` totals, and the final state of `producers`. */
function history(
  producers: Producer[],
  opts: { answered?: Record<string, number[]>; settled?: boolean; final?: boolean } = {},
): Op[] {
  const ops: Op[] = [];
  let op = 0;
  const t = () => ops.length;
  ops.push({ op: op++, p: "harness", type: "ok", f: "outbox-plan", t: t(), value: { producers: producers.length } });
  for (const [p, totals] of Object.entries(opts.answered ?? {}))
    for (const total of totals) {
      const n = op++;
      ops.push({ op: n, p: `outbox-${p}`, type: "invoke", f: "increment", t: t(), value: { p, n: 1 } });
      ops.push({ op: n, p: `outbox-${p}`, type: "ok", f: "increment", t: t(), value: { total } });
    }
  if (opts.final !== false)
    ops.push({
      op: op++,
      p: "outbox",
      type: "ok",
      f: "final",
      t: t(),
      value: {
        settled: opts.settled ?? true,
        waited_ms: 1000,
        producers: producers.map((s) => ({
          producer: s.producer,
          ids: "envelope",
          keyed: s.keyed ?? false,
          counter: {
            total: s.total,
            pending: s.pending ?? 0,
            attempts: 0,
            lastError: null,
            faults: { refused: 1, answersLost: 2, resets: 3 },
          },
          balance:
            s.balance === null
              ? null
              : {
                  producer: s.producer,
                  total: s.total,
                  distinct: s.total,
                  maxTimes: s.total ? 1 : 0,
                  minSeq: s.total ? 1 : 0,
                  maxSeq: s.total,
                  outOfOrder: 0,
                  duplicates: 5,
                  ...s.balance,
                },
        })),
      },
    });
  return ops;
}

const ANSWERED = { p0: [1, 3, 7], p1: [2] };

describe("the outbox workload's check", () => {
  it("passes when every committed increment was applied once", () => {
    const r = checkOutbox(
      history(
        [
          { producer: "p0", total: 7, keyed: true },
          { producer: "p1", total: 2 },
        ],
        { answered: ANSWERED },
      ),
    );
    expect(r.failures).toEqual([]);
    expect(r.figures).toMatchObject({
      committed: 9,
      applied: 9,
      duplicates: 10,
      increments_ok: 4,
      exact: true,
      keyed: 1,
    });
  });

  it("says nothing for a run without the workload", () => {
    expect(checkOutbox([])).toEqual({ failures: [], figures: null, examples: {} });
  });

  it("sees committed increments never applied", () => {
    const r = checkOutbox(
      history([{ producer: "p0", total: 7, balance: { total: 5, distinct: 5, maxSeq: 7 } }], { answered: ANSWERED }),
    );
    expect(r.failures).toContain("outbox: 2 committed increments never applied");
    expect(r.examples.outbox).toHaveLength(1);
  });

  it("sees an effect applied twice", () => {
    const r = checkOutbox(
      history([{ producer: "p0", total: 7, balance: { total: 8, maxTimes: 2 } }], { answered: ANSWERED }),
    );
    expect(r.failures).toContain("outbox: 1 effects applied twice");
  });

  it("sees a message applied beyond the committed counter (an increment that rolled back)", () => {
    const r = checkOutbox(
      history([{ producer: "p0", total: 7, balance: { total: 8, distinct: 8, maxSeq: 8 } }], { answered: ANSWERED }),
    );
    expect(r.failures).toContain("outbox: 1 messages applied beyond the committed counter");
  });

  it("sees a keyed producer's effects out of order, and lets an unkeyed one's pass", () => {
    const keyed = checkOutbox(
      history([{ producer: "p0", total: 7, keyed: true, balance: { outOfOrder: 2 } }], { answered: ANSWERED }),
    );
    expect(keyed.failures).toContain("outbox: 2 keyed effects applied out of order");
    const unkeyed = checkOutbox(
      history([{ producer: "p0", total: 7, balance: { outOfOrder: 2 } }], { answered: ANSWERED }),
    );
    expect(unkeyed.failures).toEqual([]);
  });

  it("sees messages left in an outbox, and a run that never settled", () => {
    const r = checkOutbox(history([{ producer: "p0", total: 7, pending: 3 }], { answered: ANSWERED, settled: false }));
    expect(r.failures).toEqual(["outbox: not settled 1 s after the load", "outbox: 1 producers not as committed (p0)"]);
  });

  it("sees a counter below a total its increment was answered with", () => {
    const r = checkOutbox(history([{ producer: "p0", total: 6, balance: null }], { answered: ANSWERED }));
    expect(r.failures).toContain("outbox: 6 committed increments never applied");
    const kept = checkOutbox(history([{ producer: "p0", total: 6 }], { answered: ANSWERED }));
    expect(kept.failures).toEqual(["outbox: 1 producers not as committed (p0)"]);
    expect(kept.examples.outbox?.[0]).toMatchObject({ problems: ["an increment was answered 7, the counter is 6"] });
  });

  it("fails a run whose final state was never read, or that acknowledged no increment", () => {
    expect(checkOutbox(history([{ producer: "p0", total: 0 }], { final: false })).failures).toEqual([
      "outbox: the final state of the producers and accounts was never read",
    ]);
    expect(checkOutbox(history([{ producer: "p0", total: 0 }])).failures).toEqual([
      "outbox: no increment was acknowledged: the workload tested nothing",
    ]);
  });
});
