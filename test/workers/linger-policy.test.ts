import { describe, expect, it } from "vitest";
import { LingerPolicy, PROBE_EVERY, STEADY_GAP_MS } from "../../src/routing/linger-policy";

/** Leads `n` batches 1 ms apart with no send ever overlapping a write; `joined(k)`: whether the k-th wait gathered company. */
function paced(policy: LingerPolicy, n: number, joined: (k: number) => boolean, start = 1_000): boolean[] {
  const waits: boolean[] = [];
  let k = 0;
  for (let i = 0; i < n; i++) {
    policy.noteArrival(false);
    const wait = policy.noteLead(start + i);
    waits.push(wait);
    if (wait) policy.noteWaited(joined(k++) ? 2 : 1);
  }
  return waits;
}

describe("when the coalescer's batches wait for company", () => {
  it("never waits outside a steady stream", () => {
    const p = new LingerPolicy();
    for (let i = 0; i < 100; i++) {
      p.noteArrival(true);
      expect(p.noteLead(1_000 + i * (STEADY_GAP_MS + 1))).toBe(false);
    }
  });

  it("waits at once where sends overlap others' writes", () => {
    const p = new LingerPolicy();
    for (let i = 0; i < 5; i++) p.noteArrival(true);
    p.noteLead(1_000);
    expect(p.noteLead(1_001)).toBe(true);
  });

  it("learns that waiting pays for paced sends that never overlap a write, and waits at every batch from then on", () => {
    const p = new LingerPolicy();
    const waits = paced(p, 200, () => true);
    // Probes only at first: one in PROBE_EVERY.
    expect(waits.slice(0, PROBE_EVERY - 1).some(Boolean)).toBe(false);
    // Three probes that gathered company and it waits at every batch.
    const from = waits.findIndex((w, i) => w && waits[i + 1] && waits[i + 2]);
    expect(from).toBeGreaterThan(0);
    expect(from).toBeLessThanOrEqual(3 * PROBE_EVERY);
    expect(waits.slice(from).every(Boolean)).toBe(true);
  });

  it("makes a producer that awaits each send wait only on the rare probe, since nobody ever joins it", () => {
    const p = new LingerPolicy();
    const waits = paced(p, 1_000, () => false);
    const n = waits.filter(Boolean).length;
    expect(n).toBeGreaterThan(0);
    expect(n).toBeLessThanOrEqual(Math.ceil(1_000 / PROBE_EVERY));
  });

  it("stops waiting at every batch once the waits stop gathering company", () => {
    const p = new LingerPolicy();
    paced(p, 200, () => true);
    const waits = paced(p, 200, () => false, 2_000);
    expect(waits.slice(100).filter(Boolean).length).toBeLessThanOrEqual(Math.ceil(100 / PROBE_EVERY));
  });
});
