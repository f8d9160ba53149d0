// `shardq`: the command line of a shardq deployment, over its HTTP API.
// Exit status: 0 done, 1 the API refused or could not be reached, 2 a usage error.
import { createInterface } from "node:readline/promises";
import { CliError, GLOBAL_OPTIONS, UsageError, checkPositionals, parseOptions, splitCommand } from "./args.mjs";
import { CLI_RETRY, cliClient, connection, loadClientLibrary } from "./client.mjs";
import { COMMANDS, FIELD_FLAGS, spellings } from "./commands/index.mjs";
import { plural } from "./format.mjs";

/** @typedef {import("./commands/index.mjs").Command} Command */
/** @typedef {import("./args.mjs").OptionSpec} OptionSpec */
/** @typedef {import("./client.mjs").ClientLibrary} ClientLibrary */
/** @typedef {import("./client.mjs").Client} Client */
/** @typedef {import("../src/client/index.ts").ApiError} ApiError */

/**
 * @typedef {object} Io
 * @property {(text: string) => void} out      stdout
 * @property {(text: string) => void} err      stderr
 * @property {Record<string, string | undefined>} env
 * @property {boolean} interactive              stdin and stderr are terminals
 * @property {(question: string) => Promise<string>} ask
 * @property {() => Promise<string>} readStdin
 */

/** @returns {Io} */
export function processIo() {
  return {
    out: (text) => process.stdout.write(`${text}\n`),
    err: (text) => process.stderr.write(`${text}\n`),
    env: process.env,
    interactive: Boolean(process.stdin.isTTY && process.stderr.isTTY),
    ask: async (question) => {
      const rl = createInterface({ input: process.stdin, output: process.stderr });
      try {
        return await rl.question(question);
      } finally {
        rl.close();
      }
    },
    readStdin: async () => {
      const chunks = [];
      for await (const chunk of process.stdin) chunks.push(/** @type {Buffer} */ (chunk));
      return Buffer.concat(chunks)
        .toString("utf8")
        .replace(/\r?\n$/, "");
    },
  };
}

/**
 * Runs one command line; returns the exit status.
 * @param {string[]} argv  the arguments after `shardq`
 * @param {Io} [io]
 * @returns {Promise<number>}
 */
export async function main(argv, io = processIo()) {
  const known = spellings();
  const names = known.map(([s]) => s);
  if (argv[0] === "help") return help(io, splitCommand(argv.slice(1), names).words, true);
  const { words, rest, next } = splitCommand(argv, names);
  const wantsHelp = rest.includes("--help") || rest.includes("-h");
  const command = known.find(([s]) => s === words.join(" "))?.[1];
  if (!command) {
    if (words.length === 0 && next === undefined && (wantsHelp || argv.length === 0)) return help(io, [], wantsHelp);
    if (words.length === 0)
      return usage(io, undefined, next === undefined ? "missing command" : `unknown command "${next}"`);
    // A group ("queues", "consumer http"), alone or followed by a word it does not know.
    if (next !== undefined) return usage(io, undefined, `unknown command "${[...words, next].join(" ")}"`, words);
    if (wantsHelp) return help(io, words, true);
    return usage(io, undefined, `"${words.join(" ")}" needs a subcommand`, words);
  }

  const name = words.join(" ");
  /** @type {import("./commands/index.mjs").Context | undefined} */
  let ctx;
  /** @type {ClientLibrary | undefined} */
  let lib;
  try {
    const { values, positionals } = parseOptions(rest, command.options ?? {});
    if (values.help) {
      io.out(commandHelp(command, name));
      return 0;
    }
    checkPositionals(positionals, command.args);
    const json = values.json === true;
    /** @type {Client | undefined} */
    let client;
    if (command.callsApi !== false) {
      const conn = connection(values, io.env);
      lib = await loadClientLibrary();
      client = cliClient(lib, conn);
    }
    ctx = {
      args: positionals,
      opts: values,
      get api() {
        if (!client) throw new Error(`shardq ${name} is marked callsApi: false, so it has no API client`);
        return client;
      },
      json,
      show: (value, human) => io.out(json ? JSON.stringify(value, null, 2) : human()),
      interactive: io.interactive,
      ask: io.ask,
      readStdin: io.readStdin,
    };
    await command.run(ctx);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) return usage(io, name, err.message);
    if (lib && err instanceof lib.ApiError) {
      io.err(`shardq ${name}: ${apiErrorText(err)}`);
      const hint = (ctx && command.hint?.(err, ctx)) ?? genericHint(err);
      if (hint) io.err(`  ${hint}`);
      return 1;
    }
    if (lib && err instanceof lib.NetworkError) {
      // Every network error is retried, so this one is the last of CLI_RETRY.attempts tries.
      io.err(`shardq ${name}: ${err.message} (${plural(CLI_RETRY.attempts, "try", "tries")})`);
      if (err.code === "ECONNREFUSED")
        io.err(
          `  Is the service running? Start it with \`npm start\` in the shardq project, or point --url (or SHARDQ_URL) at it.`,
        );
      else io.err(`  Check --url (or SHARDQ_URL).`);
      return 1;
    }
    if (err instanceof CliError) {
      io.err(`shardq ${name}: ${err.message}`);
      return 1;
    }
    io.err(`shardq ${name}: unexpected error: ${/** @type {Error} */ (err)?.stack ?? String(err)}`);
    return 1;
  }
}

/**
 * "queue \"nope\" not found [HTTP 404, code 10003, field queue: <queue>]": the API's own
 * message, then where it points. Several errors are listed one a line. An error the client
 * library found before sending says so: the API would have answered the same.
 * @param {ApiError} err
 */
function apiErrorText(err) {
  return err.errors
    .map((e) => {
      const where = [err.sent ? `HTTP ${err.status}` : `found before sending, HTTP ${err.status}`];
      if (e.code !== undefined) where.push(`code ${e.code}`);
      if (e.field !== undefined) {
        const flag = flagOf(e.field);
        where.push(flag ? `field ${e.field}, set by ${flag}` : `field ${e.field}`);
      }
      return `${e.message} [${where.join(", ")}]`;
    })
    .join("\n  ");
}

/**
 * The flag or argument that sets an API field; a batch's fields name their message
 * ("messages[2].body"), which is the command line's third <body>.
 * @param {string} field
 */
function flagOf(field) {
  const inBatch = /^messages\[(\d+)\]\.(.+)$/.exec(field);
  if (!inBatch) return FIELD_FLAGS[field];
  const [, index, own] = /** @type {[string, string, string]} */ (/** @type {unknown} */ (inBatch));
  return own === "body" ? `<body> #${Number(index) + 1}` : FIELD_FLAGS[own];
}

/**
 * The next step after an API error. A 429 or a 503 reaches here only once the client
 * has sent the request CLI_RETRY.attempts times.
 * @param {ApiError} err
 */
function genericHint(err) {
  if (err.status === 401) return "The token was refused: check --token (or SHARDQ_TOKEN).";
  if (err.status === 403)
    return "This token lacks the scope this command needs (README: Tokens and scopes): use one that has it.";
  if (err.status === 429)
    return `Over the request rate after ${plural(CLI_RETRY.attempts, "try", "tries")}, each after the wait the service asked for: run the command again later.`;
  if (err.status === 404 && err.errors[0]?.field === "account_id")
    return "This token belongs to another account: check --account (or SHARDQ_ACCOUNT).";
  // The client library's words for an answer that is not shardq's envelope: some other server.
  if (err.code === undefined && err.message.startsWith("unexpected answer from "))
    return "Check --url (or SHARDQ_URL): it should be the shardq service's base URL.";
  if (err.status === 503)
    return `The service is busy or a shard did not answer (${plural(CLI_RETRY.attempts, "try", "tries")}); run the command again in a moment.`;
  return undefined;
}

/**
 * @param {Io} io
 * @param {string | undefined} name  the command, when known
 * @param {string} message
 * @param {string[]} [group]
 */
function usage(io, name, message, group) {
  io.err(`shardq${name ? ` ${name}` : ""}: ${message}`);
  if (group && group.length) io.err(`\n${groupHelp(group)}`);
  const target = name ?? group?.join(" ");
  io.err(`Run "shardq ${target ? `${target} ` : ""}--help" for usage.`);
  return 2;
}

/**
 * @param {Io} io
 * @param {string[]} words  a command, a group, or nothing (everything)
 * @param {boolean} asked   asked for (exit 0, stdout), or shown for lack of a command (exit 2, stderr)
 */
function help(io, words, asked) {
  const command = spellings().find(([s]) => s === words.join(" "))?.[1];
  const text = command ? commandHelp(command, words.join(" ")) : words.length ? groupHelp(words) : globalHelp();
  (asked ? io.out : io.err)(text);
  return asked ? 0 : 2;
}

/** @param {Command} c @param {string} [spelled] */
function synopsis(c, spelled = c.name) {
  return [spelled, ...c.args].join(" ");
}

function globalHelp() {
  const lines = [
    "shardq: manage queues, consumers and messages of a shardq service over its HTTP API.",
    "The commands of `wrangler queues`, plus send, pull, ack, message look-up and redrive.",
    "",
    "Usage: shardq <command> [arguments] [options]",
  ];
  const width = Math.max(...COMMANDS.map((c) => synopsis(c).length));
  for (const group of [...new Set(COMMANDS.map((c) => c.group))]) {
    lines.push("", `${group}:`);
    for (const c of COMMANDS.filter((x) => x.group === group))
      lines.push(`  ${synopsis(c).padEnd(width)}  ${c.summary}`);
  }
  lines.push(
    "",
    "Options for every command:",
    optionLines(GLOBAL_OPTIONS),
    "",
    'Run "shardq <command> --help" for its options. The `wrangler queues` spellings work too:',
    "`shardq queues consumer add ...`, `shardq queues purge ...`.",
    "Exit status: 0 done, 1 the API refused or could not be reached, 2 a usage error.",
  );
  return lines.join("\n");
}

/** @param {string[]} words */
function groupHelp(words) {
  const prefix = `${words.join(" ")} `;
  const all = spellings().filter(([s]) => s.startsWith(prefix));
  // "queues" lists its own commands; the `wrangler queues` spellings of the others only when asked for ("queues consumer").
  const own = all.filter(([s, c]) => s === c.name);
  const matches = own.length ? own : all;
  const width = Math.max(...matches.map(([s, c]) => synopsis(c, s).length));
  return [
    `Commands of "shardq ${words.join(" ")}":`,
    ...matches.map(([s, c]) => `  shardq ${synopsis(c, s).padEnd(width)}  ${c.summary}`),
  ].join("\n");
}

/** @param {Command} c @param {string} spelled */
function commandHelp(c, spelled) {
  const lines = [
    `Usage: shardq ${synopsis(c, spelled)}${Object.keys(c.options ?? {}).length ? " [options]" : ""}`,
    "",
    `${c.summary}.`,
  ];
  if (c.details) lines.push(c.details);
  if (c.options && Object.keys(c.options).length) lines.push("", "Options:", optionLines(c.options));
  lines.push("", "Options for every command:", optionLines(GLOBAL_OPTIONS));
  return lines.join("\n");
}

/** @param {Record<string, OptionSpec>} options */
function optionLines(options) {
  const shown = Object.entries(options).filter(([, o]) => !o.hidden);
  const label = (/** @type {string} */ name, /** @type {OptionSpec} */ o) =>
    `${o.short ? `-${o.short}, ` : ""}--${name}${o.value ? ` <${o.value}>` : ""}`;
  const width = Math.max(...shown.map(([n, o]) => label(n, o).length));
  return shown.map(([n, o]) => `  ${label(n, o).padEnd(width)}  ${o.help}`).join("\n");
}
