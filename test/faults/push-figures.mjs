// The push path's figures (push-checker.mjs computes the verdict; these only describe),
// and their rows in the report (report.mjs): deliveries through the Worker consumer, what
// it did with them (throws, hangs, late acks), the causes of each redelivery, and how the
// queue recovered from each consumer shard abort.
import { statOf } from "./figures.mjs";

/** statOf of whole milliseconds. @param {number[]} xs */
const stat = (xs) => statOf(xs.map((x) => Math.round(x)));

/**
 * @typedef {import("./push-checker.mjs").PushDelivery} PushDelivery
 * @typedef {import("./push-checker.mjs").ConsumerAbort} ConsumerAbort
 * @typedef {import("./push-checker.mjs").Excuse} Excuse
 */

/**
 * @param {{ pushed: PushDelivery[], sent: { attempted: number, ok: number },
 *   pairs: Array<{ a: PushDelivery, b: PushDelivery | null, bStart: number, excuse: Excuse | null }>,
 *   aborts: ConsumerAbort[], kills: number[], overlaps: Array<{ first: any }>, excused: Record<string, number>,
 *   afterAck: Array<{ acked: any }>, notAgain: number, deadLetteredAgain: number, planned: number | null, skipped: number, leaseMs: number | null }} x
 */
export function pushFigures(x) {
  const invocations = new Map(x.pushed.map((d) => [d.d, d]));
  const batches = [...invocations.values()];
  const ended = batches.filter((d) => d.end !== null);

  // Each redelivery put down to a cause. A retry is the consumer's own (after a throw, from
  // waitUntil, or plain); otherwise a fault between the two starts; otherwise it came again
  // after the consumer acked it (a violation, push-checker.mjs) or after a span with no end.
  const causes = {
    retried: 0,
    retry_all: 0,
    threw: 0,
    late_retry: 0,
    dead_lettered: 0,
    kill: 0,
    abort_consumer: 0,
    storage_reset: 0,
    acked_then_again: 0,
    cut_off: 0,
  };
  for (const { a, b, excuse } of x.pairs) {
    if (b === null) causes.dead_lettered++;
    else if (a.outcome === "retried")
      causes[a.late === "retried" ? "late_retry" : a.threw ? "threw" : a.retryAll ? "retry_all" : "retried"]++;
    else if (excuse)
      causes[excuse.kind === "kill" ? "kill" : excuse.kind === "abort-consumer" ? "abort_consumer" : "storage_reset"]++;
    else if (a.end === null) causes.cut_off++;
    else causes.acked_then_again++;
  }

  // Recovery after each consumer shard abort: how long after it was seen the messages it
  // held came again. abort-dispatched held the batch whose acks it dropped (delivered again
  // after the consumer acked them, the abort between); abort-leased held a batch never
  // handed over, which shows as a delivery whose attempts skip one (the lease ran out and
  // counted as a failed delivery) after it, with no kill between.
  /** @type {Map<ConsumerAbort, number[]>} */
  const cameAgain = new Map();
  const add = (/** @type {ConsumerAbort} */ a, /** @type {number} */ t) =>
    cameAgain.set(a, [...(cameAgain.get(a) ?? []), t - /** @type {number} */ (a.ok)]);
  for (const { a, b, excuse } of x.pairs) if (b && excuse?.abort && a.outcome !== "retried") add(excuse.abort, b.start);
  const leased = x.aborts.filter((a) => a.fired && a.ok !== null && a.kind === "abort-leased");
  /** @type {Map<string, PushDelivery[]>} */
  const byMessage = new Map();
  for (const d of x.pushed) byMessage.set(`${d.q}\u0000${d.id}`, [...(byMessage.get(`${d.q}\u0000${d.id}`) ?? []), d]);
  let attemptGaps = 0;
  for (const ds of byMessage.values()) {
    ds.sort((p, q) => p.start - q.start);
    ds.forEach((b, i) => {
      const prev = ds[i - 1];
      if (b.a <= (prev?.a ?? 0) + 1) return;
      attemptGaps++;
      const from = prev?.start ?? -Infinity;
      const a = leased
        .filter(
          (l) =>
            l.q === b.q &&
            /** @type {number} */ (l.ok) < b.start &&
            /** @type {number} */ (l.ok) > from &&
            !x.kills.some((k) => k > l.inv && k < b.start),
        )
        .at(-1);
      if (a) add(a, b.start);
    });
  }
  const each = x.aborts.map((a) => {
    const again = cameAgain.get(a) ?? [];
    return {
      n: a.n,
      kind: a.kind,
      consumer_shard: a.index,
      at_ms: Math.round(a.inv),
      fired: a.fired,
      armed_to_reset_ms: a.fired && a.ok !== null ? Math.round(a.ok - a.inv) : null,
      messages_came_again: again.length,
      reset_to_came_again_ms: stat(again),
    };
  });
  const kinds = [...new Set(x.aborts.map((a) => a.kind))];

  const threw = ended.filter((d) => d.threw);
  const hung = ended.filter((d) => d.hangMs > 0);
  const late = ended.filter((d) => d.lateMs > 0);
  const inThrows = x.pushed.filter((d) => d.threw);
  return {
    sent: x.sent,
    lease_ms: x.leaseMs,
    deliveries: x.pushed.length,
    distinct: byMessage.size,
    invocations: batches.length,
    invocations_cut_off: batches.length - ended.length,
    batch_size: stat(batches.map((d) => d.size)),
    ack_all: ended.filter((d) => d.ackAll).length,
    retry_all: ended.filter((d) => d.retryAll).length,
    throws: {
      invocations: threw.length,
      acked_before: inThrows.filter((d) => d.outcome === "acked").length,
      retried_by: inThrows.filter((d) => d.outcome === "retried").length,
      acked_before_then_again: x.afterAck.filter((v) => v.acked.threw).length,
    },
    hangs: {
      invocations: hung.length,
      messages: x.pushed.filter((d) => d.hangMs > 0).length,
      hang_ms: stat(hung.map((d) => d.hangMs)),
      overlaps_while_hanging: x.overlaps.filter((v) => v.first.hang_ms > 0).length,
      acked_then_again: x.afterAck.filter((v) => v.acked.hang_ms > 0).length,
    },
    late: {
      invocations: late.length,
      acks: x.pushed.filter((d) => d.late === "acked").length,
      retries: x.pushed.filter((d) => d.late === "retried").length,
      late_ms: stat(late.map((d) => d.lateMs)),
      retries_came_again: causes.late_retry,
      overlaps_while_late: x.overlaps.filter((v) => v.first.late_ms > 0).length,
      acked_then_again: x.afterAck.filter((v) => v.acked.late_ms > 0).length,
    },
    duplicates: { extra_deliveries: x.pairs.length, causes },
    attempt_gaps: attemptGaps,
    poison: { messages: new Set(x.pushed.filter((d) => d.x).map((d) => d.id)).size },
    overlaps_while_up: x.overlaps.length,
    overlaps_across: x.excused,
    after_ack: x.afterAck.length,
    not_again: x.notAgain,
    dead_lettered_again: x.deadLetteredAgain,
    consumer_aborts: {
      planned: x.planned,
      count: x.aborts.length,
      fired: x.aborts.filter((a) => a.fired).length,
      skipped: x.skipped,
      by_kind: Object.fromEntries(
        kinds.map((k) => [
          k,
          { count: each.filter((e) => e.kind === k).length, fired: each.filter((e) => e.kind === k && e.fired).length },
        ]),
      ),
      messages_came_again: each.reduce((n, e) => n + e.messages_came_again, 0),
      reset_to_came_again_ms: stat([...cameAgain.values()].flat()),
      each,
    },
  };
}

/** @typedef {ReturnType<typeof pushFigures>} PushFigures */

const n = (/** @type {number | undefined} */ v) => (v ?? 0).toLocaleString("en-US");
const secs = (/** @type {{ median: number, max: number } | null} */ s) =>
  s ? `${(s.median / 1000).toFixed(1)} s / ${(s.max / 1000).toFixed(1)} s` : "n/a";

/**
 * The push rows of the report's summary table (none when the run had no push queue).
 * @param {PushFigures | undefined} f
 * @returns {Array<[string, string]>}
 */
export function pushSummaryRows(f) {
  if (!f || (f.deliveries === 0 && f.sent.attempted === 0)) return [];
  const c = f.duplicates.causes;
  const ca = f.consumer_aborts;
  const kinds = Object.entries(ca.by_kind)
    .map(([k, v]) => `${v.fired} of ${v.count} ${k}`)
    .join(", ");
  return [
    [
      "push deliveries",
      `${n(f.sent.ok)} messages sent ok to the push queue; ${n(f.distinct)} distinct in ${n(f.deliveries)} deliveries to queue() in ${n(f.invocations)} invocations (${n(f.invocations_cut_off)} cut off by a kill)`,
    ],
    [
      "push overlaps",
      `${n(f.overlaps_while_up)} while up (two handlers holding one message); ${n(f.overlaps_across.kill)} across a kill, ${n(f.overlaps_across["abort-consumer"])} across a consumer shard abort, ${n(f.overlaps_across["storage-reset"])} across a storage shard reset`,
    ],
    [
      "push: delivered after the consumer acked",
      `${n(f.after_ack)} with no fault between; ${n(f.not_again)} not acked at their last delivery and never delivered again (${n(f.dead_lettered_again ?? 0)} more were a copy dead-lettered again after a kill or reset, whose first dead-lettering came out of the dead-letter queue)`,
    ],
    [
      "push consumer misbehaving",
      `${n(f.throws.invocations)} throws (${n(f.throws.acked_before)} explicit acks before them stood), ${n(f.hangs.invocations)} hangs past the lease (${secs(f.hangs.hang_ms)}, lease ${f.lease_ms ?? "?"} ms), ${n(f.late.invocations)} late settles from waitUntil (${n(f.late.acks)} acks, ${n(f.late.retries)} retries)`,
    ],
    [
      "push duplicates",
      `${n(f.duplicates.extra_deliveries)} extra deliveries (causes: ${c.retried} retry, ${c.retry_all} retryAll(), ${c.threw} throw, ${c.late_retry} late retry, ${c.dead_lettered} dead-lettered, ${c.kill} kill, ${c.abort_consumer} consumer shard abort, ${c.storage_reset} storage shard reset, ${c.acked_then_again} after an ack, ${c.cut_off} other)`,
    ],
    ...(ca.count || ca.planned
      ? /** @type {Array<[string, string]>} */ ([
          [
            "consumer shard aborts",
            `${ca.fired} of ${ca.planned ?? ca.count} fired (${kinds || "none"})${ca.skipped ? `, ${ca.skipped} skipped` : ""}; ${n(ca.messages_came_again)} messages they held came again`,
          ],
          ["consumer shard abort to its messages coming again", secs(ca.reset_to_came_again_ms)],
        ])
      : []),
  ];
}

/**
 * The report's push section.
 * @param {PushFigures | undefined} f
 * @returns {string[]}
 */
export function pushSection(f) {
  if (!f || (f.deliveries === 0 && f.sent.attempted === 0)) return [];
  const ms = (/** @type {{ median: number, max: number } | null} */ s) => (s ? `${s.median} / ${s.max}` : "–");
  return [
    "## Push consumer",
    "",
    `A Worker consumer (test/fixtures/push-consumer) reached at its queue() handler; push lease ${f.lease_ms ?? "?"} ms, renewed every third of it while the handler runs.`,
    "",
    "| figure | |",
    "| --- | --- |",
    `| deliveries | ${n(f.deliveries)} (${n(f.distinct)} messages) in ${n(f.invocations)} invocations, batch size median / max ${ms(f.batch_size)}; ${n(f.ack_all)} handlers called ackAll(), ${n(f.retry_all)} retryAll() |`,
    `| throws | ${n(f.throws.invocations)} handlers threw: ${n(f.throws.acked_before)} messages acked explicitly before (delivered again: ${n(f.throws.acked_before_then_again)}), ${n(f.throws.retried_by)} retried by the throw |`,
    `| hangs past the lease | ${n(f.hangs.invocations)} handlers (${n(f.hangs.messages)} messages) slept ${ms(f.hangs.hang_ms)} ms (median / max): handed to another handler meanwhile ${n(f.hangs.overlaps_while_hanging)}, delivered again after their acks ${n(f.hangs.acked_then_again)} |`,
    `| late settles (waitUntil) | ${n(f.late.invocations)} handlers settled ${n(f.late.acks)} acks and ${n(f.late.retries)} retries ${ms(f.late.late_ms)} ms after returning: the late retries came again ${n(f.late.retries_came_again)} times, the late acks were delivered again ${n(f.late.acked_then_again)} times, handed to another handler meanwhile ${n(f.late.overlaps_while_late)} |`,
    `| deliveries whose attempts skip one | ${n(f.attempt_gaps)} (a lease that ran out unseen: a batch leased and never handed over) |`,
    "",
    ...(f.consumer_aborts.count
      ? [
          "| consumer abort | kind | consumer shard | at (s) | fired | armed to reset (ms) | messages that came again | reset to coming again, median / max (ms) |",
          "| --- | --- | --- | --- | --- | --- | --- | --- |",
          ...f.consumer_aborts.each.map(
            (a) =>
              `| ${a.n} | ${a.kind} | ${a.consumer_shard ?? "–"} | ${(a.at_ms / 1000).toFixed(1)} | ${a.fired ? "yes" : "**no**"} | ${a.armed_to_reset_ms ?? "–"} | ${a.messages_came_again} | ${ms(a.reset_to_came_again_ms)} |`,
          ),
          "",
        ]
      : []),
    "- push overlap: a delivery of a message to a queue() handler that starts while an earlier handler given it has not ended (spans as the handler reported them, within the true ones). The consumer shard renews the lease while the handler runs, so only a kill, a consumer shard abort or a storage shard reset in between may explain one.",
    "- delivered after the consumer acked: a delivery that starts after a handler given the message ended having acked it (explicitly, by ackAll(), by returning, before a throw, from waitUntil), with no kill, consumer shard abort or storage shard reset between the two starts. Not acked at the last delivery: retried, thrown or cut off, and never seen again (not even in the dead-letter queue).",
    "- consumer shard aborts (abort-consumer): the test hooks reset one consumer shard of the push queue right after it leased a batch (abort-leased: the batch comes again once its lease runs out) or after the handler returned and before its acks were applied (abort-dispatched: the acked messages come again).",
    "",
  ];
}
