// The operator who purges the dead-letter queue while a redrive of it runs: the redriver
// calls `during()` as it starts a redrive, and now and then (its own seeded stream, so every
// other decision stays what the seed made it) a purge of the same queue follows a moment
// later, racing the redrive's batches. The purge asks for the ids it deleted (`return_ids`),
// and the history keeps them: purge-checker.mjs holds the run to "what a purge reports
// deleted is never delivered again", and counts the messages it deleted apart from the lost
// ones (an operator deleted them).
import { prng } from "./prng.mjs";
import { sleep } from "./workload.mjs";

/**
 * @param {{ seed: number, history: import("./history.mjs").History, api: ReturnType<typeof import("./client.mjs").apiClient>, dlq: string,
 *   deadLetterAfter: number, rate?: number, tally: { purges: number, purged: number } }} o
 *   deadLetterAfter: deliveries of a message before its queue dead-letters it (max_retries + 1), for the checker
 */
export function dlqPurger(o) {
  const rng = prng(o.seed, "dlq-purger");
  const rate = o.rate ?? 0.25;
  return {
    /** Called as a redrive of the dead-letter queue starts; resolves once the purge it started (if any) answered. */
    async during() {
      if (!rng.chance(rate)) return;
      // Half the time as the redrive leases its first batch, else within its first batches (a
      // batch is leased, written and acked in a few ms): either may take a message first.
      await sleep(rng.chance(0.5) ? 0 : rng.int(1, 40));
      const op = o.history.invoke("purger", "purge", { q: o.dlq, dead_letter_after: o.deadLetterAfter });
      const r = await o.api.call("POST", `/${o.dlq}/purge`, { delete_messages_permanently: true, return_ids: true });
      const ids = r.outcome === "ok" && Array.isArray(r.result?.ids) ? r.result.ids.map(String) : null;
      if (r.outcome === "ok" && ids) {
        o.history.complete(op, "ok", { purged: r.result?.purged ?? null, completed: r.result?.completed ?? null, ids });
        o.tally.purges++;
        o.tally.purged += ids.length;
      } else if (r.outcome === "ok") {
        // A yes without the ids cannot say what it deleted.
        o.history.complete(op, "unknown", { status: r.status, error: "ok without ids" });
      } else o.history.complete(op, r.outcome, { status: r.status, error: r.error });
    },
  };
}
