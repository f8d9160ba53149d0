/**
 * When a batch the coalescer opens should wait a moment for company (src/routing/coalesce.ts).
 *
 * Only in a steady stream: the batch before opened under STEADY_GAP_MS ago. A steady stream is
 * either many producers or one producer that awaits each send, and the timing alone does not
 * tell them apart: where a write is quicker than the gap between sends, neither kind's sends
 * ever overlap a write. So the policy also asks whether waiting pays:
 * - sends often arrive while another is being written (many producers; MIN_OVERLAP), or
 * - the batches that waited lately gathered company (MIN_YIELD).
 * When neither holds, one steady batch in PROBE_EVERY waits anyway, to find out. A producer that
 * awaits each send is never joined, so it pays the wait on those probes only; paced sends from
 * many producers join the probes, and from then on every steady batch waits.
 */
export const STEADY_GAP_MS = 2;
/** Share of overlapping sends above which a stream is many producers, not one awaiting each send. */
export const MIN_OVERLAP = 0.25;
/** Share of waits that gathered company above which waiting goes on. */
export const MIN_YIELD = 0.25;
/** While waiting does not pay, one steady batch in this many waits to find out whether it would. */
export const PROBE_EVERY = 16;
/** The weight of the newest observation in the moving shares. */
const WEIGHT = 0.1;
/** The shares a stream starts with: no evidence either way, below both thresholds. */
const START = 0;

export class LingerPolicy {
  private lastLead = 0;
  /** Moving share of sends that arrived while another batch of the stream was open or being written. */
  private overlap = START;
  /** Moving share of waits after which the batch held more than its leader. */
  private yield = START;
  /** Steady batches since the last that waited. */
  private sinceWait = 0;

  /** A send arrived; `busy`: another batch of the stream was open or being written. */
  noteArrival(busy: boolean): void {
    this.overlap = this.overlap * (1 - WEIGHT) + (busy ? WEIGHT : 0);
  }

  /** A batch opened at `now`: whether it should wait for company. */
  noteLead(now: number): boolean {
    const steady = now - this.lastLead <= STEADY_GAP_MS;
    this.lastLead = now;
    if (!steady) return false;
    const pays = this.overlap >= MIN_OVERLAP || this.yield >= MIN_YIELD;
    if (pays || ++this.sinceWait >= PROBE_EVERY) {
      this.sinceWait = 0;
      return true;
    }
    return false;
  }

  /** A batch that waited was written holding `messages` (its leader's included). */
  noteWaited(messages: number): void {
    this.yield = this.yield * (1 - WEIGHT) + (messages > 1 ? WEIGHT : 0);
  }

  /** When this stream last opened a batch (for forgetting quiet streams). */
  get lastLeadAt(): number {
    return this.lastLead;
  }
}
