// Commands on queues themselves: list, create, info, update, delete, pausing and resuming
// delivery, and purging their messages.
import { CliError, UsageError, wholeNumber } from "../args.mjs";
import { bytes, duration, keyValues, plural, seconds, table, time } from "../format.mjs";
import { consumerName, number, q } from "./shared.mjs";

/** @typedef {import("../args.mjs").OptionSpec} OptionSpec */
/** @typedef {import("../args.mjs").Values} Values */
/** @typedef {import("./shared.mjs").Command} Command */
/** @typedef {import("./shared.mjs").Context} Context */
/** @typedef {import("./shared.mjs").QueueInfo} QueueInfo */
/** @typedef {import("./shared.mjs").QueueMetrics} QueueMetrics */
/** @typedef {import("./shared.mjs").ConsumerRecord} ConsumerRecord */

const QUEUE_SETTINGS = /** @type {Record<string, OptionSpec>} */ ({
  "delivery-delay-secs": number("seconds before a new message can be delivered (0 to 86400)"),
  "message-retention-period-secs": number("seconds a message is kept (60 to 1209600, default 345600: 4 days)"),
});

/** @param {Values} o */
function queueSettings(o) {
  /** @type {Record<string, number>} */
  const settings = {};
  const delay = wholeNumber(o, "delivery-delay-secs");
  const retention = wholeNumber(o, "message-retention-period-secs");
  if (delay !== undefined) settings.delivery_delay = delay;
  if (retention !== undefined) settings.message_retention_period = retention;
  return settings;
}

/** @param {ConsumerRecord} c */
function consumerSummary(c) {
  const s = c.settings;
  const parts = [`batch ${s.batch_size}`];
  if (c.type === "worker")
    parts.push(`timeout ${duration(s.max_wait_time_ms)}`, `concurrency ${s.max_concurrency ?? "auto"}`);
  else parts.push(`visibility ${duration(s.visibility_timeout_ms)}`);
  parts.push(
    `${s.max_retries} retries`,
    `retry delay ${s.retry_delay} s`,
    `dead-letter queue ${c.dead_letter_queue ?? "none"}`,
  );
  return parts.join(", ");
}

/** @param {QueueInfo} info */
function settingsPairs(info) {
  return /** @type {Array<[string, string]>} */ ([
    ["delivery", info.settings.delivery_paused ? "paused" : "active"],
    ["delivery delay", seconds(info.settings.delivery_delay)],
    ["retention", seconds(info.settings.message_retention_period)],
  ]);
}

/**
 * @param {Context} ctx
 * @param {boolean} paused
 */
async function setPaused(ctx, paused) {
  const [name] = /** @type {[string]} */ (ctx.args);
  const info = /** @type {QueueInfo} */ (
    await ctx.api.request("PATCH", q(name), { body: { settings: { delivery_paused: paused } } })
  );
  ctx.show(info, () => `${paused ? "Paused" : "Resumed"} message delivery for queue ${info.queue_name}.`);
}

/** @type {Command[]} */
export const QUEUE_COMMANDS = [
  {
    name: "queues list",
    group: "Queues",
    args: [],
    summary: "List queues",
    details:
      "Every queue of the account by name, or one page of them with --page; --prefix keeps the names that start with it.",
    options: {
      page: number("one page of the list (from 1)"),
      "per-page": number("queues per page (1 to 100; default 20 with --page)"),
      prefix: { type: "string", value: "text", help: "only queues whose name starts with this" },
    },
    async run(ctx) {
      const page = wholeNumber(ctx.opts, "page");
      const perPage = wholeNumber(ctx.opts, "per-page");
      const prefix = /** @type {string | undefined} */ (ctx.opts.prefix);
      /** @type {QueueInfo[]} */
      const queues = [];
      let total = 0;
      let pages = 0;
      let size = 0;
      for (let p = page ?? 1; ; p++) {
        const res = await ctx.api.requestEnvelope("GET", "/queues", {
          query: { page: p, per_page: perPage ?? (page === undefined ? 100 : 20), name_prefix: prefix },
        });
        const found = /** @type {QueueInfo[]} */ (res.result);
        queues.push(...found);
        total = res.result_info?.total_count ?? queues.length;
        size = res.result_info?.per_page ?? found.length;
        pages = res.result_info?.total_pages ?? Math.ceil(total / Math.max(size, 1));
        if (page !== undefined || found.length === 0 || queues.length >= total) break;
      }
      ctx.show(queues, () => {
        const matching = prefix ? ` starting with "${prefix}"` : "";
        if (queues.length === 0) {
          if (page !== undefined)
            return `No queues on page ${page}: ${plural(total, "queue")}${matching} in all, ${plural(pages, "page")} of ${size}.`;
          return prefix ? `No queues${matching}.` : "No queues yet. Create one: shardq queues create <name>";
        }
        const rows = queues.map((x) => [
          x.queue_name,
          x.queue_id,
          time(x.created_on),
          String(x.producers_total_count),
          String(x.consumers_total_count),
          x.settings.delivery_paused ? "paused" : "active",
        ]);
        let footer = prefix ? `\n(${plural(total, "queue")}${matching})` : "";
        if (page !== undefined) {
          const from = (page - 1) * size + 1;
          const next =
            page < pages
              ? `; next: shardq queues list --page ${page + 1}${perPage === undefined ? "" : ` --per-page ${perPage}`}${prefix ? ` --prefix ${prefix}` : ""}`
              : "";
          footer = `\n(page ${page} of ${pages}: queues ${from} to ${from + queues.length - 1} of ${total}${matching}${next})`;
        }
        return table(["NAME", "ID", "CREATED", "PRODUCERS", "CONSUMERS", "DELIVERY"], rows) + footer;
      });
    },
  },
  {
    name: "queues create",
    group: "Queues",
    args: ["<name>"],
    summary: "Create a queue",
    details: "A name is 1 to 63 lowercase letters, digits and dashes, not starting or ending with a dash.",
    options: /** @type {Record<string, OptionSpec>} */ ({
      ...QUEUE_SETTINGS,
      jurisdiction: {
        type: "string",
        value: "eu|us|fedramp",
        help: "keep its messages in one jurisdiction (chosen now, for good)",
      },
    }),
    async run(ctx) {
      const [name] = /** @type {[string]} */ (ctx.args);
      const settings = queueSettings(ctx.opts);
      const jurisdiction = ctx.opts.jurisdiction;
      const body = {
        queue_name: name,
        ...(jurisdiction !== undefined ? { jurisdiction } : {}),
        ...(Object.keys(settings).length ? { settings } : {}),
      };
      const info = /** @type {QueueInfo} */ (await ctx.api.request("POST", "/queues", { body }));
      ctx.show(
        info,
        () => `Created queue ${info.queue_name} (id ${info.queue_id}).\n${keyValues(settingsPairs(info))}`,
      );
    },
  },
  {
    name: "queues info",
    group: "Queues",
    args: ["<name>"],
    summary: "Show a queue: settings, consumer, backlog",
    details: "With --json: the queue as the API returns it, plus its `metrics` (backlog, per shard).",
    async run(ctx) {
      const [name] = /** @type {[string]} */ (ctx.args);
      const info = /** @type {QueueInfo} */ (await ctx.api.request("GET", q(name)));
      const [metrics, consumers] = /** @type {[QueueMetrics, ConsumerRecord[]]} */ (
        await Promise.all([
          ctx.api.request("GET", `${q(name)}/metrics`),
          ctx.api.request("GET", `${q(name)}/consumers`),
        ])
      );
      ctx.show({ ...info, metrics }, () => {
        /** @type {Map<string, number>} */
        const states = new Map();
        for (const s of metrics.shards) states.set(s.state, (states.get(s.state) ?? 0) + 1);
        return keyValues([
          ["name", info.queue_name],
          ["id", info.queue_id],
          ["jurisdiction", info.jurisdiction ?? "none"],
          ["created", time(info.created_on)],
          ["modified", time(info.modified_on)],
          ...settingsPairs(info),
          [
            "producers",
            info.producers_total_count
              ? info.producers.map((p) => `${p.type} ${p.script ?? ""}`.trim()).join(", ")
              : "0",
          ],
          [
            "consumer",
            consumers.length ? consumers.map((c) => `${consumerName(c)} (${consumerSummary(c)})`).join("; ") : "none",
          ],
          ["backlog", `${plural(metrics.backlog_count, "message")}, ${bytes(metrics.backlog_bytes)}`],
          ["oldest message", time(metrics.oldest_message_timestamp_ms)],
          ["storage shards", [...states].map(([state, n]) => `${n} ${state}`).join(", ") || "0"],
          ["consumer shards", metrics.consumer_concurrency === null ? undefined : String(metrics.consumer_concurrency)],
        ]);
      });
    },
  },
  {
    name: "queues update",
    group: "Queues",
    args: ["<name>"],
    summary: "Change a queue's settings",
    options: QUEUE_SETTINGS,
    async run(ctx) {
      const [name] = /** @type {[string]} */ (ctx.args);
      const settings = queueSettings(ctx.opts);
      if (Object.keys(settings).length === 0)
        throw new UsageError("nothing to update: give --delivery-delay-secs or --message-retention-period-secs");
      const info = /** @type {QueueInfo} */ (await ctx.api.request("PATCH", q(name), { body: { settings } }));
      ctx.show(info, () => `Updated queue ${info.queue_name}.\n${keyValues(settingsPairs(info))}`);
    },
  },
  {
    name: "queues delete",
    group: "Queues",
    args: ["<name>"],
    summary: "Delete a queue and its messages",
    async run(ctx) {
      const [name] = /** @type {[string]} */ (ctx.args);
      const result = await ctx.api.request("DELETE", q(name));
      ctx.show(result, () => `Deleted queue ${name}.`);
    },
  },
  {
    name: "pause-delivery",
    group: "Queues",
    args: ["<queue>"],
    summary: "Pause delivery to the queue's consumer (sends are still accepted)",
    run: (ctx) => setPaused(ctx, true),
  },
  {
    name: "resume-delivery",
    group: "Queues",
    args: ["<queue>"],
    summary: "Resume delivery to the queue's consumer",
    run: (ctx) => setPaused(ctx, false),
  },
  {
    name: "purge",
    group: "Queues",
    args: ["<queue>"],
    summary: "Delete every message of a queue",
    details:
      "Asks you to type the queue's name unless --force is given. Without a terminal to ask on,\n--force is required. Large queues are purged in several calls; this waits for all of them.",
    options: { force: { type: "boolean", help: "purge without asking" } },
    async run(ctx) {
      const [name] = /** @type {[string]} */ (ctx.args);
      if (!ctx.opts.force) {
        if (!ctx.interactive)
          throw new UsageError(
            "refusing to purge without --force when not run in a terminal: add --force to delete every message",
          );
        const answer = await ctx.ask(
          `This permanently deletes every message in queue ${name}. Type the queue's name to proceed: `,
        );
        if (answer.trim() !== name) throw new CliError(`"${answer.trim()}" is not ${name}; nothing was purged`);
      }
      let purged = 0;
      for (let calls = 0; ; calls++) {
        const r = /** @type {{ purged: number, completed: boolean }} */ (
          await ctx.api.request("POST", `${q(name)}/purge`, { body: { delete_messages_permanently: true } })
        );
        purged += r.purged;
        if (r.completed) break;
        if (calls >= 1000) throw new CliError(`stopped after ${purged} messages and ${calls} calls; run purge again`);
      }
      ctx.show({ purged, completed: true }, () => `Purged ${plural(purged, "message")} from queue ${name}.`);
    },
  },
];
