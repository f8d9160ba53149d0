// `shardq dev -c <wrangler config>...`: shardq on this machine with the user's own Workers,
// their configs read as they are (cli/workers/dev-session.mjs does the work). It runs until
// Ctrl-C or SIGTERM, then stops every process it started.
import { CliError, UsageError, repeated, text, wholeNumber } from "../args.mjs";
import { DEFAULT_SHARDQ_PORT, LOCAL_ACCOUNT, LOCAL_TOKEN, startDevSession } from "../workers/dev-session.mjs";
import { ConfigError } from "../workers/worker-configs.mjs";

/** @typedef {import("./shared.mjs").Command} Command */
/** @typedef {import("../workers/dev-session.mjs").DevSession} DevSession */

/** The line a script (or the e2e test) waits for: everything runs once it is printed. */
export const RUNNING_LINE = "shardq dev is running";

/** @type {Command} */
export const DEV = {
  name: "dev",
  group: "Your own Workers",
  callsApi: false,
  args: [],
  summary: "Run shardq locally with your own Workers, their wrangler configs as they are",
  details: [
    "Each [[queues.producers]] becomes a binding of the same name to shardq; each [[queues.consumers]]",
    "a shardq consumer with the same settings. Every Worker runs in its own `wrangler dev`, on its",
    "[dev] port or else 8787, 8788, ... in the order of -c; shardq on --port. Generated configs and",
    "data live in the state directory, never in your project. Ctrl-C stops everything.",
    "Example: shardq dev -c ../shop/producer/wrangler.toml -c ../shop/consumer/wrangler.toml",
  ].join("\n"),
  options: {
    config: {
      type: "string",
      short: "c",
      value: "file",
      multiple: true,
      help: "a Worker's wrangler.toml, wrangler.json or wrangler.jsonc (repeat for each Worker)",
    },
    port: { type: "string", value: "n", help: `shardq's port (default ${DEFAULT_SHARDQ_PORT})` },
    state: {
      type: "string",
      value: "dir",
      help: "generated configs and persisted data (default ~/.shardq/dev/<hash of the config paths>)",
    },
  },
  async run(ctx) {
    const configs = repeated(ctx.opts, "config");
    if (configs.length === 0)
      throw new UsageError("give each Worker's config with -c (e.g. -c ./worker/wrangler.toml)");
    const port = wholeNumber(ctx.opts, "port");
    if (port !== undefined && (port < 1 || port > 65_535))
      throw new UsageError(`--port must be from 1 to 65535, not ${port}`);

    // The first Ctrl-C (or SIGTERM) stops everything cleanly, a second one at once.
    const abort = new AbortController();
    /** @type {DevSession | undefined} */
    let session;
    /** @type {(signal: NodeJS.Signals) => void} */
    let onSignal = () => {};
    const stopped = new Promise((resolve) => {
      onSignal = (signal) => {
        if (abort.signal.aborted) {
          session?.stop("SIGKILL");
          return;
        }
        console.log(`\n[shardq dev] ${signal}: stopping every process it started`);
        abort.abort();
        resolve(undefined);
      };
    });
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    try {
      try {
        session = await startDevSession({
          configs,
          port,
          stateDir: text(ctx.opts, "state"),
          log: (source, line) => console.log(`[${source}] ${line}`),
          warn: (message) => console.error(`[shardq dev] warning: ${message}`),
          signal: abort.signal,
        });
      } catch (err) {
        if (abort.signal.aborted) return;
        if (err instanceof ConfigError) throw new UsageError(err.message);
        throw new CliError(/** @type {Error} */ (err).message);
      }
      console.log(summary(session));
      const exited = await Promise.race([stopped.then(() => null), session.exited]);
      await session.stop();
      if (exited)
        throw new CliError(
          `${exited.name}'s wrangler dev exited (${exited.signal ?? `code ${exited.code}`}); stopped the others`,
        );
      console.log("[shardq dev] stopped");
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    }
  },
};

/**
 * What runs where, printed once everything is up.
 * @param {DevSession} s
 */
function summary(s) {
  const lines = [
    "",
    `${RUNNING_LINE} (Ctrl-C stops everything).`,
    `  ${s.shardq.name}  ${s.shardq.url}  account "${LOCAL_ACCOUNT}", token "${LOCAL_TOKEN}"  (pid ${s.shardq.pid})`,
    `      dashboard ${s.shardq.url}/dashboard/   CLI: npx shardq queues list --url ${s.shardq.url}`,
  ];
  for (const w of s.workers) {
    lines.push(`  ${w.name}  ${w.url}  from ${w.shown}  (pid ${w.pid})`);
    for (const p of w.sends) lines.push(`      sends: env.${p.binding} -> queue ${p.queue}`);
    for (const c of w.consumes) {
      const settings = [
        `batch ${c.max_batch_size ?? 10}`,
        `timeout ${c.max_batch_timeout ?? 5} s`,
        `retries ${c.max_retries ?? 3}`,
        `retry delay ${c.retry_delay ?? 0} s`,
        `concurrency ${c.max_concurrency ?? "auto"}`,
      ];
      if (c.dead_letter_queue) settings.push(`dead letters -> ${c.dead_letter_queue}`);
      lines.push(`      consumes: queue ${c.queue} (${settings.join(", ")})`);
    }
  }
  lines.push(`  queues: ${(s.plan.queues ?? []).map((q) => q.queue_name).join(", ") || "none"}`);
  lines.push(`  state:  ${s.stateDir}  (generated configs, data; kept across runs)`);
  return lines.join("\n");
}
