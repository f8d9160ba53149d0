// `shardq deploy-config -c <wrangler config>... --out <dir> --account <id>`: the deployable
// counterpart of `shardq dev`, from the same configs (cli/workers/deploy-config.mjs writes the
// files); `shardq apply <file>` then creates the queues and consumers on the deployed service.
import { readFileSync } from "node:fs";
import { CliError, UsageError, repeated, text } from "../args.mjs";
import { connection } from "../client.mjs";
import { applyConfig } from "../workers/apply-config.mjs";
import { QUEUES_FILE, SERVICES_FILE, writeDeployConfig } from "../workers/deploy-config.mjs";
import { shardqName } from "../workers/dev-session.mjs";
import { ConfigError } from "../workers/worker-configs.mjs";

/** @typedef {import("./shared.mjs").Command} Command */

/** @type {Command} */
export const DEPLOY_CONFIG = {
  name: "deploy-config",
  group: "Your own Workers",
  callsApi: false,
  args: [],
  summary: "Write deployable configs for your own Workers, shardq's bindings to them, and their queues",
  details: [
    `For each Worker, <out>/<name>/wrangler.toml (or .jsonc): its config with every [[queues.producers]]`,
    `bound to shardq's QueueProducer and, for a consumer, an entry that adds the ShardqConsumer`,
    `entrypoint. <out>/${SERVICES_FILE}: the lines for shardq's wrangler.toml. <out>/${QUEUES_FILE}:`,
    "the queues and consumers, for `shardq apply` once everything is deployed.",
  ].join("\n"),
  options: {
    config: {
      type: "string",
      short: "c",
      value: "file",
      multiple: true,
      help: "a Worker's wrangler.toml, wrangler.json or wrangler.jsonc (repeat for each Worker)",
    },
    out: {
      type: "string",
      value: "dir",
      help: "where to write (required; never one of your Workers' own directories)",
    },
    "shardq-name": {
      type: "string",
      value: "name",
      help: "the name shardq is deployed as (default: the name in its wrangler.toml)",
    },
  },
  async run(ctx) {
    const configs = repeated(ctx.opts, "config");
    if (configs.length === 0)
      throw new UsageError("give each Worker's config with -c (e.g. -c ./worker/wrangler.toml)");
    const out = text(ctx.opts, "out");
    if (!out) throw new UsageError("--out <dir> is required: where to write the generated files");
    const account = text(ctx.opts, "account") ?? process.env.SHARDQ_ACCOUNT;
    if (!account)
      throw new UsageError(
        "--account (or SHARDQ_ACCOUNT) is required: the shardq account the Workers' queues belong to",
      );
    const service = text(ctx.opts, "shardq-name") ?? shardqName();
    /** @type {import("../workers/deploy-config.mjs").DeployConfig} */
    let result;
    try {
      result = writeDeployConfig({ configs, out, account, shardqName: service });
    } catch (err) {
      if (err instanceof ConfigError) throw new UsageError(err.message);
      throw err;
    }
    for (const w of result.warnings) console.error(`shardq deploy-config: warning: ${w}`);
    ctx.show(result, () => {
      const consumersOnly = result.workers.filter((w) => w.consumes.length && !w.sends.length);
      const rest = result.workers.filter((w) => !consumersOnly.includes(w));
      const both = result.workers.filter((w) => w.consumes.length && w.sends.length);
      const lines = [`Wrote the deploy configs to ${out}:`];
      for (const w of result.workers) {
        const role = [
          w.sends.length ? `sends to ${w.sends.join(", ")}` : "",
          w.consumes.length ? `consumes ${w.consumes.join(", ")}` : "",
        ]
          .filter(Boolean)
          .join("; ");
        lines.push(`  ${w.config}${w.wrapper ? ` (entry ${w.wrapper})` : ""}${role ? `  ${role}` : ""}`);
      }
      lines.push(
        `  ${result.services}  the [[services]] lines for shardq's wrangler.toml`,
        `  ${result.queues}  the queues and consumers`,
        "",
        "Then, in this order:",
      );
      let step = 0;
      for (const w of consumersOnly) lines.push(`  ${++step}. npx wrangler deploy -c ${w.config}`);
      lines.push(
        `  ${++step}. add the lines of ${result.services} to shardq's wrangler.toml and deploy shardq (npx wrangler deploy in shardq)`,
      );
      for (const w of rest) lines.push(`  ${++step}. npx wrangler deploy -c ${w.config}`);
      lines.push(`  ${++step}. npx shardq apply ${result.queues} --url <shardq's URL> --token <token>`);
      if (both.length)
        lines.push(
          `  ${both.map((w) => w.name).join(", ")} both send and consume: deploy shardq without their lines first, then them, then shardq again.`,
        );
      lines.push("No experimental compatibility flag is needed: consumers are reached over RPC (transport rpc).");
      return lines.join("\n");
    });
  },
};

/** @type {Command} */
export const APPLY = {
  name: "apply",
  group: "Your own Workers",
  // applyConfig (cli/workers/apply-config.mjs) makes its own calls, as `npm start` does.
  callsApi: false,
  args: ["<file>"],
  summary: "Create the queues and consumers a shardq.config.json-style file lists, or update them",
  details: `Queues that exist are kept (their listed settings applied); a queue's consumer is added, or updated in place.\nThe file names its account, as ${QUEUES_FILE} from deploy-config does.`,
  async run(ctx) {
    const file = /** @type {string} */ (ctx.args[0]);
    /** @type {import("../workers/apply-config.mjs").QueuesConfig} */
    let config;
    try {
      config = JSON.parse(readFileSync(file, "utf8"));
    } catch (err) {
      throw new UsageError(`cannot read ${file}: ${/** @type {Error} */ (err).message}`);
    }
    if (typeof config?.account !== "string" || !Array.isArray(config.queues))
      throw new UsageError(`${file} needs "account" and a "queues" list (like shardq.config.json)`);
    const { url, token, account } = connection(ctx.opts, process.env);
    if (ctx.opts.account !== undefined && account !== config.account)
      throw new UsageError(`--account ${account} differs from the file's account "${config.account}"`);
    try {
      await applyConfig(url, token, config);
    } catch (err) {
      const e = /** @type {Error & { cause?: { code?: string } }} */ (err);
      throw new CliError(e.cause?.code ? `cannot reach ${url}: ${e.cause.code}` : e.message);
    }
    const queues = config.queues ?? [];
    const consumers = queues.filter((q) => q.consumer).length;
    ctx.show(
      config,
      () => `Applied ${queues.length} queue(s) and ${consumers} consumer(s) to account ${config.account} at ${url}.`,
    );
  },
};
