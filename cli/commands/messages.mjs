// Commands on messages: send, pull, ack (or retry), look one up (or cancel it), and
// redrive a dead-letter queue.
import { UsageError, oneOf, text, wholeNumber } from "../args.mjs";
import { bytes, keyValues, oneLine, plural, pulledBody, table, time } from "../format.mjs";
import { number, q, queueClient } from "./shared.mjs";

/** @typedef {import("./shared.mjs").ApiError} ApiError */
/** @typedef {import("../../src/client/index.ts").MessageSendRequest} MessageSendRequest */
/** @typedef {import("../../src/client/index.ts").PartialSendError} PartialSendError */
/** @typedef {import("./shared.mjs").Command} Command */
/** @typedef {import("./shared.mjs").Context} Context */
/** @typedef {import("./shared.mjs").PulledMessage} PulledMessage */

/**
 * A body from the command line: JSON when --content-type json or when it parses as
 * JSON, otherwise text.
 * @param {string} raw
 * @param {"json" | "text" | undefined} type
 * @param {string} label  for errors: "<body>" or "<body> #2"
 * @returns {MessageSendRequest & { contentType: "json" | "text" }}
 */
function messageFrom(raw, type, label) {
  if (type === "text") return { body: raw, contentType: "text" };
  try {
    return { body: JSON.parse(raw), contentType: "json" };
  } catch (err) {
    if (type === "json")
      throw new UsageError(
        `${label} is not valid JSON (${/** @type {Error} */ (err).message}); add --content-type text to send it as text`,
      );
    return { body: raw, contentType: "text" };
  }
}

/**
 * pull and ack need an HTTP pull consumer, and pull a queue whose delivery is not paused.
 * @param {ApiError} err
 * @param {Context} ctx
 */
function pullHint(err, ctx) {
  if (err.status !== 409) return undefined;
  if (/http_pull/.test(err.message)) return `add one with: shardq consumer http add ${ctx.args[0]}`;
  if (/paused/.test(err.message)) return `resume it with: shardq resume-delivery ${ctx.args[0]}`;
  return undefined;
}

/** @type {Command[]} */
export const MESSAGE_COMMANDS = [
  {
    name: "send",
    group: "Messages",
    args: ["<queue>", "<body>..."],
    summary: "Send messages (one <body> each; - reads one from stdin)",
    details:
      "A body is sent as JSON when it parses as JSON ('{\"order\": 42}', 42, '\"text\"'), else as text;\n--content-type makes it one or the other. Several bodies go in one batch; past 100 messages\nor 256 KB, in several, one after another. Prints each message's id.",
    options: {
      "content-type": {
        type: "string",
        value: "json|text",
        help: "how to send the bodies (default: json if they parse as JSON, else text)",
      },
      "delay-secs": number("seconds before the messages can be delivered (0 to 86400)"),
    },
    async run(ctx) {
      const [queue, ...raw] = /** @type {[string, ...string[]]} */ (ctx.args);
      const type = oneOf(ctx.opts, "content-type", /** @type {const} */ (["json", "text"]));
      const delay = wholeNumber(ctx.opts, "delay-secs");
      if (raw.filter((r) => r === "-").length > 1) throw new UsageError("<body> - (stdin) can be given once");
      const bodies = await Promise.all(raw.map((r) => (r === "-" ? ctx.readStdin() : r)));
      const messages = bodies.map((b, i) => messageFrom(b, type, raw.length > 1 ? `<body> #${i + 1}` : "<body>"));
      const withDelay = delay === undefined ? {} : { delaySeconds: delay };
      const sender = queueClient(ctx, queue);
      // --json prints the ids in the API's names; the queue's figures the API answers
      // beside them (`metadata`) are not kept by the client library.
      if (messages.length === 1) {
        const [m] = /** @type {[MessageSendRequest & { contentType: "json" | "text" }]} */ (messages);
        const { messageId } = await sender.send(m.body, { contentType: m.contentType, ...withDelay });
        ctx.show({ message_id: messageId }, () => `Sent message ${messageId} to queue ${queue}.`);
        return;
      }
      /** @type {string[]} */
      let ids;
      try {
        ({ messageIds: ids } = await sender.sendBatch(messages, withDelay));
      } catch (err) {
        // A batch cut into several requests failed after the first ones were stored: say
        // which bodies were (the first ones, in order), then report the failure (exit 1).
        const partial = /** @type {PartialSendError} */ (err);
        if (partial?.name !== "PartialSendError") throw err;
        const stored = partial.acceptedIds;
        ctx.show(
          { message_ids: stored },
          () =>
            `Sent ${stored.length} of ${plural(messages.length, "message")} to queue ${queue} (<body> #1 to #${stored.length}) before a request failed:\n${stored.join("\n")}`,
        );
        throw partial.cause;
      }
      ctx.show(
        { message_ids: ids },
        () => `Sent ${plural(ids.length, "message")} to queue ${queue}:\n${ids.join("\n")}`,
      );
    },
  },
  {
    name: "pull",
    group: "Messages",
    args: ["<queue>"],
    summary: "Pull messages (needs an HTTP pull consumer)",
    details:
      "Pulled messages are leased: they come back after the visibility timeout unless acked.\n--ack acks them at once; or take their lease ids from --json and run shardq ack.",
    options: {
      "batch-size": number("messages to pull (1 to 100, default 5)"),
      "visibility-timeout-ms": number("how long they stay leased (1000 to 43200000; default the consumer's)"),
      ack: { type: "boolean", help: "ack the pulled messages (they are deleted)" },
    },
    hint: pullHint,
    async run(ctx) {
      const [queue] = /** @type {[string]} */ (ctx.args);
      /** @type {Record<string, number>} */
      const body = {};
      const size = wholeNumber(ctx.opts, "batch-size");
      const visibility = wholeNumber(ctx.opts, "visibility-timeout-ms");
      if (size !== undefined) body.batch_size = size;
      if (visibility !== undefined) body.visibility_timeout_ms = visibility;
      // The pull route itself rather than the library's pull(), which answers the messages
      // decoded and renamed (leaseId, a Date, a Uint8Array for bytes): --json prints the
      // API's result, lease_id and base64 bodies included, as scripts and `shardq ack` take them.
      const pulled = /** @type {{ message_backlog_count: number, messages: PulledMessage[] }} */ (
        await ctx.api.request("POST", `${q(queue)}/messages/pull`, { body })
      );
      /** @type {import("../../src/client/index.ts").AckResult | undefined} */
      let acked;
      if (ctx.opts.ack && pulled.messages.length > 0) {
        acked = await queueClient(ctx, queue).ack({ acks: pulled.messages.map((m) => m.lease_id) });
      }
      ctx.show(acked ? { ...pulled, ack: acked } : pulled, () => {
        const n = pulled.messages.length;
        if (n === 0) return `No message ready in queue ${queue} (backlog ${pulled.message_backlog_count}).`;
        const rows = pulled.messages.map((m) => [
          m.id,
          String(m.attempts),
          time(m.timestamp_ms),
          m.metadata?.["CF-Content-Type"] ?? "",
          oneLine(pulledBody(m)),
        ]);
        const after = acked
          ? `Acked ${acked.ackCount} of them.${Object.keys(acked.warnings).length ? ` ${plural(Object.keys(acked.warnings).length, "ack")} did not count: ${Object.values(acked.warnings)[0]}` : ""}`
          : "They are leased, not acked: they return when the lease ends (--ack to ack them; lease ids are in --json).";
        return `${table(["ID", "ATTEMPTS", "SENT", "TYPE", "BODY"], rows)}\n\nPulled ${plural(n, "message")} from queue ${queue} (backlog ${pulled.message_backlog_count}). ${after}`;
      });
    },
  },
  {
    name: "ack",
    group: "Messages",
    args: ["<queue>", "<lease-id>..."],
    summary: "Ack (or with --retry, retry) pulled messages by lease id",
    hint: pullHint,
    options: {
      retry: {
        type: "boolean",
        help: "retry them instead: delivered again later, or dead-lettered when out of retries",
      },
      "delay-secs": number(
        "with --retry: seconds before they are delivered again (default the consumer's retry delay)",
      ),
    },
    async run(ctx) {
      const [queue, ...leases] = /** @type {[string, ...string[]]} */ (ctx.args);
      const delay = wholeNumber(ctx.opts, "delay-secs");
      if (delay !== undefined && !ctx.opts.retry) throw new UsageError("--delay-secs applies with --retry only");
      const request = ctx.opts.retry
        ? { retries: leases.map((leaseId) => (delay === undefined ? { leaseId } : { leaseId, delaySeconds: delay })) }
        : { acks: leases };
      const r = await queueClient(ctx, queue).ack(request);
      ctx.show(r, () => {
        const lines = [`Acked ${r.ackCount}, retried ${r.retryCount} (queue ${queue}).`];
        for (const [lease, why] of Object.entries(r.warnings)) lines.push(`  lease ${oneLine(lease, 24)} ${why}`);
        return lines.join("\n");
      });
    },
  },
  {
    name: "message",
    group: "Messages",
    args: ["<queue>", "<id>"],
    summary: "Look up a message by id (state, attempts, shard); --cancel deletes it",
    details: "A message moved to the queue's dead-letter queue is found there (state dead_lettered).",
    options: { cancel: { type: "boolean", help: "delete the message instead of showing it" } },
    async run(ctx) {
      const [queue, id] = /** @type {[string, string]} */ (ctx.args);
      const path = `${q(queue)}/messages/${encodeURIComponent(id)}`;
      if (ctx.opts.cancel) {
        const r = await ctx.api.request("DELETE", path);
        ctx.show(r, () => `Cancelled message ${id} of queue ${queue}.`);
        return;
      }
      const m =
        /** @type {{ id: string, state: string, attempts: number, timestamp_ms: number, visible_at_ms: number, size: number, content_type: string, shard: string, dead_letter_queue?: string }} */ (
          await ctx.api.request("GET", path)
        );
      ctx.show(m, () =>
        keyValues([
          ["id", m.id],
          ["queue", m.dead_letter_queue ? `${m.dead_letter_queue} (dead-letter queue of ${queue})` : queue],
          ["state", m.state],
          ["attempts", String(m.attempts)],
          ["sent", time(m.timestamp_ms)],
          ["visible at", time(m.visible_at_ms)],
          ["size", bytes(m.size)],
          ["content type", m.content_type],
          ["shard", m.shard],
        ]),
      );
    },
  },
  {
    name: "redrive",
    group: "Messages",
    args: ["<dead-letter-queue>"],
    summary: "Move messages from a dead-letter queue back to a queue",
    details:
      "The target is --target-queue, or else the one queue whose consumer dead-letters into this one.\nA call moves at most --limit messages (default 1000) in at most 30 s; run it again to move more.",
    options: {
      "target-queue": {
        type: "string",
        value: "queue",
        help: "where to move them (default: the queue that dead-letters here)",
      },
      limit: number("most messages to move (1 to 10000, default 1000)"),
      "messages-per-second": number("pace of the move (1 to 5000, default 500)"),
      "min-age-secs": number("only messages at least this old"),
      "max-age-secs": number("only messages at most this old"),
      "min-attempts": number("only messages delivered at least this often in the dead-letter queue"),
      "max-attempts": number("only messages delivered at most this often in the dead-letter queue"),
    },
    async run(ctx) {
      const [dlq] = /** @type {[string]} */ (ctx.args);
      /** @type {Record<string, number>} */
      const filter = {};
      for (const [flag, field] of [
        ["min-age-secs", "min_age_seconds"],
        ["max-age-secs", "max_age_seconds"],
        ["min-attempts", "min_attempts"],
        ["max-attempts", "max_attempts"],
      ]) {
        const v = wholeNumber(ctx.opts, /** @type {string} */ (flag));
        if (v !== undefined) filter[/** @type {string} */ (field)] = v;
      }
      /** @type {Record<string, unknown>} */
      const body = {};
      const target = text(ctx.opts, "target-queue");
      const limit = wholeNumber(ctx.opts, "limit");
      const rate = wholeNumber(ctx.opts, "messages-per-second");
      if (target !== undefined) body.target_queue = target;
      if (limit !== undefined) body.limit = limit;
      if (rate !== undefined) body.messages_per_second = rate;
      if (Object.keys(filter).length) body.filter = filter;
      const r = /** @type {{ moved: number, target_queue: string, remaining_matching: number | null }} */ (
        await ctx.api.request("POST", `${q(dlq)}/redrive`, { body })
      );
      ctx.show(r, () => {
        const left =
          r.remaining_matching === null
            ? ""
            : r.remaining_matching > 0
              ? ` ${plural(r.remaining_matching, "message")} still match: run it again to move them.`
              : "";
        return `Moved ${plural(r.moved, "message")} from ${dlq} to ${r.target_queue}.${left}`;
      });
    },
  },
];
