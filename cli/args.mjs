// Command-line parsing of `shardq`: which command the words name, its options through
// node:util parseArgs, and option values checked before any request is made.
import { parseArgs } from "node:util";

/** A mistake on the command line: exit status 2, and the message names the flag or argument. */
export class UsageError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "UsageError";
  }
}

/** A failure found by the CLI itself rather than reported by the API (exit status 1). */
export class CliError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "CliError";
  }
}

/** @typedef {{ type: "string" | "boolean", short?: string, value?: string, help: string, hidden?: boolean, multiple?: boolean }} OptionSpec */
/** @typedef {Record<string, string | boolean | undefined>} Values */

/** Options every command takes. */
export const GLOBAL_OPTIONS = /** @type {Record<string, OptionSpec>} */ ({
  url: { type: "string", value: "url", help: "service URL (env SHARDQ_URL; default http://127.0.0.1:8787)" },
  token: {
    type: "string",
    value: "token",
    help: "bearer token (env SHARDQ_TOKEN; default the local dev token, for a loopback URL only)",
  },
  account: { type: "string", value: "id", help: "account id (env SHARDQ_ACCOUNT; default local)" },
  json: { type: "boolean", help: "print the API's result as JSON, for scripts" },
  help: { type: "boolean", short: "h", help: "show help" },
});

/**
 * Splits argv into the command words and the rest. Words are taken while they extend
 * a known spelling ("consumer" -> "consumer http" -> "consumer http add"); option tokens
 * may come first (`shardq --json queues list`), and the value of a global string option
 * is skipped over.
 * @param {string[]} argv
 * @param {string[]} spellings  every command as it may be typed, e.g. "queues create"
 * @returns {{ words: string[], rest: string[], next: string | undefined }}  `next`: the first word that was not taken
 */
export function splitCommand(argv, spellings) {
  const words = [];
  const rest = [];
  /** @type {string | undefined} */
  let next;
  let done = false;
  for (let i = 0; i < argv.length; i++) {
    const token = /** @type {string} */ (argv[i]);
    if (token === "--") {
      rest.push(...argv.slice(i));
      break;
    }
    if (token.startsWith("-") && token !== "-") {
      rest.push(token);
      const name = token.replace(/^--?/, "");
      if (!token.includes("=") && GLOBAL_OPTIONS[name]?.type === "string" && i + 1 < argv.length)
        rest.push(/** @type {string} */ (argv[++i]));
      continue;
    }
    const longer = [...words, token].join(" ");
    if (!done && spellings.some((s) => s === longer || s.startsWith(`${longer} `))) words.push(token);
    else {
      if (!done) next = token;
      done = true;
      rest.push(token);
    }
  }
  return { words, rest, next };
}

/**
 * parseArgs with the command's options and the global ones; its errors become usage
 * errors that name the flag ("unknown option --batch").
 * @param {string[]} args
 * @param {Record<string, OptionSpec>} options
 * @returns {{ values: Values, positionals: string[] }}
 */
export function parseOptions(args, options) {
  /** @type {Record<string, { type: "string" | "boolean", short?: string, multiple?: boolean }>} */
  const config = {};
  for (const [name, spec] of Object.entries({ ...GLOBAL_OPTIONS, ...options })) {
    config[name] = {
      type: spec.type,
      ...(spec.short ? { short: spec.short } : {}),
      ...(spec.multiple ? { multiple: true } : {}),
    };
  }
  try {
    const { values, positionals } = parseArgs({ args, options: config, allowPositionals: true, strict: true });
    return { values: /** @type {Values} */ (values), positionals };
  } catch (err) {
    const e = /** @type {{ code?: string, message: string }} */ (err);
    const flag = /'(-[^' ]*)/.exec(e.message)?.[1];
    if (e.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") throw new UsageError(`unknown option ${flag ?? e.message}`);
    if (e.code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
      if (/argument missing/.test(e.message)) throw new UsageError(`option ${flag} needs a value`);
      if (/does not take an argument/.test(e.message)) throw new UsageError(`option ${flag} takes no value`);
      throw new UsageError(e.message.replace(/^Option/, "option"));
    }
    if (e.code?.startsWith("ERR_PARSE_ARGS")) throw new UsageError(e.message);
    throw err;
  }
}

/**
 * A whole number from an option, or undefined when the option was not given.
 * @param {Values} values
 * @param {string} name  the option's name, without dashes
 * @returns {number | undefined}
 */
export function wholeNumber(values, name) {
  const raw = values[name];
  if (raw === undefined || typeof raw === "boolean") return undefined;
  if (!/^-?\d+$/.test(raw.trim())) throw new UsageError(`--${name} must be a whole number, not "${raw}"`);
  return Number(raw);
}

/**
 * Seconds that may have a fraction ("0.5"), in whole milliseconds.
 * @param {Values} values
 * @param {string} name
 * @returns {number | undefined}
 */
export function secondsAsMs(values, name) {
  const raw = values[name];
  if (raw === undefined || typeof raw === "boolean") return undefined;
  if (!/^-?(\d+\.?\d*|\.\d+)$/.test(raw.trim()))
    throw new UsageError(`--${name} must be a number of seconds, not "${raw}"`);
  return Math.round(Number(raw) * 1000);
}

/**
 * A string option limited to some values.
 * @template {string} T
 * @param {Values} values
 * @param {string} name
 * @param {readonly T[]} allowed
 * @returns {T | undefined}
 */
export function oneOf(values, name, allowed) {
  const raw = values[name];
  if (raw === undefined || typeof raw === "boolean") return undefined;
  if (!allowed.includes(/** @type {T} */ (raw)))
    throw new UsageError(`--${name} must be ${allowed.map((a) => `"${a}"`).join(" or ")}, not "${raw}"`);
  return /** @type {T} */ (raw);
}

/**
 * A string option, or undefined.
 * @param {Values} values
 * @param {string} name
 * @returns {string | undefined}
 */
export function text(values, name) {
  const raw = values[name];
  return typeof raw === "string" ? raw : undefined;
}

/**
 * Checks the positional arguments against the command's list: "<queue>" is required,
 * "[<script>]" optional, "<body>..." one or more.
 * @param {string[]} given
 * @param {string[]} spec
 */
export function checkPositionals(given, spec) {
  for (const [i, name] of spec.entries()) {
    const optional = name.startsWith("[");
    if (i >= given.length && !optional) throw new UsageError(`missing argument ${name.replace(/\.\.\.$/, "")}`);
    if (name.endsWith("...")) return;
  }
  if (given.length > spec.length) throw new UsageError(`unexpected argument "${given[spec.length]}"`);
}

/**
 * Every value of an option that may be repeated (`-c a -c b`).
 * @param {Values} values
 * @param {string} name
 * @returns {string[]}
 */
export function repeated(values, name) {
  const raw = /** @type {unknown} */ (values[name]);
  if (Array.isArray(raw)) return raw.map(String);
  return typeof raw === "string" ? [raw] : [];
}
