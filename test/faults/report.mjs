// What a fault run prints and writes: a table on the console, and report.json and
// report.md next to the history.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { controlSection, controlSummaryRows } from "./control-figures.mjs";
import { pushSection, pushSummaryRows } from "./push-figures.mjs";

/**
 * @typedef {import("./checker.mjs").CheckResult} CheckResult
 * @typedef {{ seed: number, mode: string, replay: string, messages: number, faults?: string[], kills: number, aborts?: number, corruptions?: number, producers: number, consumers: number,
 *   rate: number, started_at: string, load_s: number, drain_s: number, total_s: number, history: string, out: string }} RunMeta
 */

const n = (/** @type {number} */ x) => x.toLocaleString("en-US");
const secs = (/** @type {{ median: number, max: number } | null} */ s) =>
  s ? `${(s.median / 1000).toFixed(1)} s / ${(s.max / 1000).toFixed(1)} s` : "n/a";

/**
 * The summary rows, shared by the console table and the Markdown report.
 * @param {CheckResult} r @param {RunMeta} meta
 * @returns {Array<[string, string]>}
 */
export function summaryRows(r, meta) {
  const f = r.figures;
  const c = f.duplicated.redelivery_causes;
  const k = f.kills;
  const ab = f.aborts;
  const kinds = Object.entries(ab?.by_kind ?? {})
    .map(([kind, x]) => `${x.fired} of ${x.count} ${kind}`)
    .join(", ");
  return [
    ["verdict", r.valid ? "VALID" : `INVALID: ${r.failures.join("; ")}`],
    ["seed, replay", `${meta.seed}: ${meta.replay}`],
    [
      "faults",
      `${k.count} hard kills (SIGKILL of wrangler dev and workerd), restarted on the same state${ab?.count ? `; ${ab.fired} of ${ab.count} storage shard resets fired (${kinds})` : ""}${meta.corruptions ? `; ${meta.corruptions} corruptions at rest` : ""}`,
    ],
    [
      "messages sent",
      `${n(f.sent.attempted)} attempted: ${n(f.sent.ok)} ok, ${n(f.sent.unknown)} unknown, ${n(f.sent.fail)} failed`,
    ],
    [
      "delivered",
      `${n(f.delivered.distinct)} distinct in ${n(f.delivered.deliveries)} deliveries (${n(f.delivered.from_dead_letter_queue)} from the dead-letter queue)`,
    ],
    [
      "lost",
      `${n(f.lost)}${f.lost_after_delivery ? ` (${n(f.lost_after_delivery)} of them delivered, then gone from every queue without an ack)` : ""}`,
    ],
    ["unexpected", `${n(f.unexpected)}${f.wrong_id ? ` (+${n(f.wrong_id)} under a wrong id)` : ""}`],
    [
      "message ids stored twice",
      `${n(f.stored_twice_same_id ?? 0)}${f.stored_twice_across_cut_move ? ` (+${n(f.stored_twice_across_cut_move)} where a cut-off redrive's copy came back beside its source)` : ""}`,
    ],
    ...(f.quarantine?.corrupted
      ? /** @type {Array<[string, string]>} */ ([
          [
            "corrupted at rest",
            `${n(f.quarantine.corrupted)} stored bodies corrupted: ${f.quarantine.reported ?? "no"} reported quarantined (${n(f.quarantine.expected)} expected), ${n(f.quarantine.delivered_after_corruption)} delivered after it; ${n(f.quarantine.never_delivered)} never delivered, not lost`,
          ],
        ])
      : []),
    ["garbled deliveries", n(f.quarantine?.garbled_deliveries ?? 0)],
    [
      "sent again with their Idempotency-Key",
      `${n(f.idempotent_retries?.messages ?? 0)} messages after an unknown first try: ${n(f.idempotent_retries?.delivered ?? 0)} delivered, ${n(f.idempotent_retries?.stored_under_two_ids ?? 0)} stored under two ids`,
    ],
    [
      "duplicated",
      `${n(f.duplicated.messages)} messages, ${n(f.duplicated.extra_deliveries)} extra deliveries (causes: ${c.retried} consumer retry, ${c.dead_lettered} dead-lettered, ${c.lease_expired} lease expired, ${c.kill} kill, ${c.abort ?? 0} shard reset, ${c.other} other); harness ids stored under two ids: ${f.duplicated.stored_twice}`,
    ],
    ["recovered", `${n(f.recovered)} of ${n(f.sent.unknown)} unknown sends delivered`],
    [
      "lease overlaps",
      `${f.lease_overlaps} while up; ${f.leases_ended_by_kill} leases ended by a kill, ${f.leases_ended_by_abort ?? 0} by a shard reset`,
    ],
    [
      "delivered after ack",
      `${n(f.delivered_after_ack)}${f.delivered_after_ack_across_cut_move ? ` (+${n(f.delivered_after_ack_across_cut_move)} deliveries of a second copy a cut-off redrive or dead-lettering left behind)` : ""}`,
    ],
    ...(f.moves?.redrives
      ? /** @type {Array<[string, string]>} */ ([
          [
            "moves",
            `${n(f.moves.redrives_ok)} of ${n(f.moves.redrives)} redrives ok (${n(f.moves.redrives_cut)} cut off), ${n(f.moves.moved_reported)} messages moved; ${n(f.moves.messages_back_after_dead_letter)} messages back in a queue after a dead-lettering, ${n(f.moves.messages_dead_lettered_twice)} dead-lettered twice or more (most stays: ${f.moves.most_stays})`,
          ],
        ])
      : []),
    ...(f.ready
      ? /** @type {Array<[string, string]>} */ ([
          [
            "ready too long (> 10 s while asked for)",
            `${n(f.ready.too_long)} of ${n(f.ready.windows)} times a message was ready; the longest while a consumer asked ${secs({ median: f.ready.worst_asking_ms, max: f.ready.worst_asking_ms }).split(" / ")[0]}`,
          ],
        ])
      : []),
    ...(f.quiet?.planned
      ? /** @type {Array<[string, string]>} */ ([
          [
            "quiet phases",
            `${f.quiet.phases} of ${f.quiet.planned} ran; ${n(f.quiet.delivered_in_phase)} of ${n(f.quiet.delayed)} messages due during one delivered within it (at most ${(f.quiet.worst_due_to_delivery_ms / 1000).toFixed(1)} s after due)`,
          ],
        ])
      : []),
    [
      "poison messages",
      `${f.poison.dead_lettered} of ${f.poison.sent} dead-lettered after max_retries${f.poison.quarantined ? ` (${f.poison.quarantined} corrupted and quarantined first)` : ""}`,
    ],
    [
      "acks",
      `${n(f.acks.confirmed)} acks and ${n(f.acks.retriesConfirmed)} retries confirmed, ${n(f.acks.stale)} refused as stale, ${n(f.acks.unknown)} unknown, ${n(f.acks.failed)} failed`,
    ],
    ["ready after restart (median / max)", secs(k.ready_ms)],
    ["restart to first send ok", secs(k.restart_to_first_send_ms)],
    ["restart to first pull ok", secs(k.restart_to_first_pull_ms)],
    ["kill to first send ok", secs(k.kill_to_first_send_ms)],
    ...(ab?.count
      ? /** @type {Array<[string, string]>} */ ([
          [
            "shard resets",
            `${n(ab.unknown_send_messages)} messages in sends left unknown and ${n(ab.acks_not_applied)} acks or retries not applied around them; ${n(ab.messages_came_again)} messages they set free came again`,
          ],
          ["reset to the last message it set free coming again", secs(ab.reset_to_last_came_again_ms)],
        ])
      : []),
    ...pushSummaryRows(f.push),
    ...(f.outbox
      ? /** @type {Array<[string, string]>} */ ([
          [
            "outbox and inbox",
            `${f.outbox.exact ? "exact" : "**not exact**"}: ${n(f.outbox.committed)} increments committed by ${f.outbox.producers} producer objects (${f.outbox.id_mode} with ids: "id", ${f.outbox.keyed} keyed), ${n(f.outbox.applied)} applied once each; ${n(f.outbox.duplicates)} repeats dropped by the inbox; ${n(f.outbox.increments_ok)} increments answered, ${n(f.outbox.increments_unknown)} unknown; ${f.outbox.kills} kills of their Worker, ${n(f.outbox.resets)} producer resets, ${n(f.outbox.refused)} sends refused and ${n(f.outbox.answers_lost)} answers lost (at least)`,
          ],
        ])
      : []),
    ...(f.order?.messages
      ? /** @type {Array<[string, string]>} */ ([
          [
            "ordering keys",
            `${n(f.order.messages)} messages sent with one of ${n(f.order.keys)} keys, ${n(f.order.delivered)} delivered (${n(f.order.unknown_delivered)} of unknown sends, ordered after earlier ones only), ${n(f.order.ordered_pairs)} ordered pairs: ${n(f.order.first_out_of_order)} first delivered before an earlier one, ${n(f.order.batches_out_of_order)} batches out of order, ${n(f.order.delivered_while_held)} delivered while an earlier one was leased or waiting for a retry, ${n(f.order.wrong_key)} pulled with the wrong key`,
          ],
        ])
      : []),
    ...controlSummaryRows(f.control),
    ["time", `load with faults ${meta.load_s} s, drain ${meta.drain_s} s, total ${meta.total_s} s`],
  ];
}

/** @param {CheckResult} r @param {RunMeta} meta */
export function formatTable(r, meta) {
  const rows = summaryRows(r, meta);
  const width = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n");
}

/**
 * Writes report.json and report.md into meta.out; returns their paths.
 * @param {CheckResult} r @param {RunMeta} meta
 */
export function writeReport(r, meta) {
  const json = join(meta.out, "report.json");
  const md = join(meta.out, "report.md");
  writeFileSync(json, `${JSON.stringify({ meta, ...r }, null, 2)}\n`);
  writeFileSync(md, markdown(r, meta));
  return { json, md };
}

/** @param {CheckResult} r @param {RunMeta} meta */
function markdown(r, meta) {
  const esc = (/** @type {string} */ s) => s.replaceAll("|", "\\|");
  const lines = [
    `# shardq fault run: ${meta.mode}, seed ${meta.seed}`,
    "",
    `Started ${meta.started_at}. ${n(meta.messages)} messages from ${meta.producers} producers${meta.rate ? ` at ${n(meta.rate)} msg/s` : ""}, ${meta.consumers} pull consumers (long-polling half their pulls), ${meta.kills} hard kills, ${meta.aborts ?? 0} storage shard resets and ${meta.corruptions ?? 0} corruptions planned (faults: ${(meta.faults ?? ["kill"]).join(", ")}).`,
    `Replay: \`${meta.replay}\`. History: \`${meta.history}\` (check it again with \`node test/faults/run.mjs --check ${meta.history}\`).`,
    "",
    "| | |",
    "| --- | --- |",
    ...summaryRows(r, meta).map(([k, v]) => `| ${esc(k)} | ${esc(v)} |`),
    "",
    "## Kills",
    "",
    "| kill | at (s) | ready after restart (ms) | restart to first send ok (ms) | restart to first pull ok (ms) | kill to first send ok (ms) | messages in unknown sends |",
    "| --- | --- | --- | --- | --- | --- | --- |",
    ...r.figures.kills.each.map(
      (k) =>
        `| ${k.n} | ${(k.at_ms / 1000).toFixed(1)} | ${k.ready_ms ?? "–"} | ${k.restart_to_first_send_ms ?? "–"} | ${k.restart_to_first_pull_ms ?? "–"} | ${k.kill_to_first_send_ms ?? "–"} | ${k.unknown_send_messages} |`,
    ),
    "",
    ...(r.figures.aborts?.count
      ? [
          "## Storage shard resets",
          "",
          "| abort | kind | shard | at (s) | fired | armed to reset (ms) | messages in unknown sends | acks not applied | messages that came again | reset to the last coming again (ms) |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
          ...r.figures.aborts.each.map(
            (a) =>
              `| ${a.n} | ${a.kind} | ${a.shard} | ${(a.at_ms / 1000).toFixed(1)} | ${a.fired ? "yes" : "**no**"} | ${a.armed_to_reset_ms ?? "–"} | ${a.unknown_send_messages} | ${a.acks_not_applied} | ${a.messages_came_again} | ${a.reset_to_last_came_again_ms ?? "–"} |`,
          ),
          "",
        ]
      : []),
    ...pushSection(r.figures.push),
    ...controlSection(r.figures.control),
    "## Definitions",
    "",
    "- lost: a send answered ok whose message was never acked by the end of the drain: never delivered, or delivered and then gone from every queue (the queue, its dead-letter queue, back again by a redrive) with no ack that may have applied (confirmed, or left unknown by a fault) under any of its leases, nor an ack by a queue() handler. Corrupted messages are quarantined instead (below).",
    "- moves: the redriver pauses the dead-letter queue's consumer for 1.5 to 4 s, redrives up to 5 to 200 of its messages back to the pull queue (or, one time in three, the push queue), and lets it run again, all through the load. A poison message moved back is retried out and dead-lettered again. A message's stay in a queue ends when it leaves it; a redrive brings it back as a new copy (a new row, attempts from 1). Copies in two queues are two stored messages, and their leases may overlap. A redrive cut off between storing at its target and settling its source leaves two copies that go on separately (at-least-once): a delivery after a confirmed ack of the message is counted apart when the message had left a queue and a redrive was cut off after that and before the ack, and is a failure otherwise.",
    "- unexpected: a delivery of a harness id never sent, or whose send certainly failed (4xx, connection refused).",
    "- duplicated: a message delivered more than once; at-least-once allows it. Each redelivery is put down to a cause: the consumer retried it, it moved to the dead-letter queue, its lease had expired (the consumer dropped it, acked late, or its ack was lost), a kill in between, or other.",
    "- recovered: a send whose outcome was unknown (reset, timeout, 5xx) whose message was delivered.",
    "- lease overlap: two deliveries of one message whose leases were held at once. A lease is certainly held from its pull's answer to the earlier of (pull invoked + visibility timeout) and the first ack or retry sent under it, and was granted between its pull's invoke and answer; an overlap is one lease granted within the other's certain span, or the two certain spans sharing more than 250 ms. Leases of fresh messages live in the storage shard's memory, so those taken before a kill end with it: counted apart, as leases ended by a kill.",
    "- causes of redeliveries: kill means a kill came between the two deliveries (mostly an ack cut off by it, logged as unknown); shard reset means the storage shard holding the message was reset between them (an abort fault: its memory leases ended, or the ack it was asked to apply was not); lease expired means the consumer dropped the message, acked it late, or its ack was lost.",
    "- storage shard resets (abort faults): the test hooks (src/kernel/test-hooks.ts) reset one storage shard with ctx.abort() after an append committed and before its reply (abort-append), or at the next ack or retry it was asked to apply (abort-ack). Leases it held in memory end with it, counted apart like those a kill ends.",
    "- control-plane faults (control-faults.mjs): abort-coordinator resets the queue's Coordinator after a forced scale-out activated its new shard and before it was recorded active, or after a shard was told to drain and before that was recorded; recovered when the new shard is active in the map, or the shard reports the state the map gives it. throw-alarm makes the next 1 to 7 alarms of a storage shard, a consumer shard or the Coordinator throw (the platform retries an alarm 6 times, 2 s apart and doubling); recovered when an alarm of that object runs through. stale-map drains a storage shard while the map brokers read from KV stays as it was (60 s in the full run), so brokers keep sending to it and know nothing of its replacement; recovered when it is retired and KV has the current map. None of them ends a lease, so every other rule applies to them unchanged. Messages sent meanwhile: the sends invoked while the fault played out, by outcome.",
    "- sent again with their Idempotency-Key: a fifth of the batches carry a key, and one whose outcome was unknown is sent again with it (up to 8 tries, through a restart); it must be stored once, under the ids of the first try (stored under two ids is a failure).",
    "- corrupted at rest: the corrupt fault flips a byte of some stored bodies of one shard (checksums kept). Those messages must be quarantined when next leased (never delivered from a pull invoked after the corruption) and counted in the quarantined total the shards report (GET .../metrics, heartbeat totals); they are not lost. Garbled: a delivered body that is not exactly the bytes sent (every body is fixed by its harness id, poison flag and padding).",
    "- message ids stored twice: one message id of a queue delivered from two stored copies (storage shard and copy, read from the lease id) within one stay, as an append retried after a lost reply would store it if the shard did not skip the ids it holds; counted apart when a redrive cut off after the message left a queue let its copy come back beside its source.",
    "- delivered after ack: a pull, invoked after an ack of the message was confirmed, that delivered it.",
    "- outbox and inbox (outbox-workload.mjs): producer objects of a Worker run in a wrangler dev of its own (killed and restarted apart from shardq) add 1 to 4 to a counter and record one message per increment through shardq/outbox in the same transaction; the Worker's queue() handler, reached through ShardqConsumer, applies each through shardq/inbox in consumer objects. The binding refuses some sends and loses some answers, producer objects reset right after some commits, the handler throws before applying, or applies and throws before settling, or hangs past the push lease, and some effects throw. Exact: at the end every producer's counter T was applied as seqs 1..T, each once, keyed producers' in order, and no outbox holds anything. The figures of refusals, lost answers and resets are kept in the objects' memory and start again after a kill: lower bounds.",
    "- ordering keys (`--ordered`): a share of each producer's messages carry one of its 20 ordering keys, at most one a key in a send, so a key's sends go one after another. Per queue and key, a comes before b when a's send was answered ok before b's was invoked (a send left unknown comes after those, before none: it may still be applied later). First delivered before an earlier one: b was certainly granted (a pull grants between its invoke and its answer, a push before its handler's start) before a's first pull was invoked. Batches out of order: a pull's answer or a queue() call holding b ahead of a. Delivered while an earlier one was held: a delivery of b, in a batch without a, granted before a could have been released, a's release being no earlier than the first ack that may have applied under its leases (or the end of a push handler that acked it), or, when it was dead-lettered or never acked, the end of its last lease (as for lease overlaps) or a fault that may have ended it; no fault excuses it, as a key's lease is persisted. Wrong key: a pull answering with another ordering_key than sent. Only a message's first stay in its queue counts.",
    "",
  ];
  if (!r.valid) {
    lines.push(
      "## Failures",
      "",
      ...r.failures.map((f) => `- ${f}`),
      "",
      "Examples:",
      "",
      "```json",
      JSON.stringify(r.examples, null, 2),
      "```",
      "",
    );
  }
  return `${lines.join("\n")}\n`;
}
