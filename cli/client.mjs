// How `shardq` reaches the API: where it is (URL, token and account, from the flags or the
// environment), and the client library (src/client, `shardq/client`) with the CLI's retry
// policy and timeout. Only the commands that call the API load the library (main.mjs), so
// that `dev`, `deploy-config` and `apply` run wherever they ran before: Node runs the
// library's TypeScript only from 22.18 on, and never for a file under node_modules (shardq
// installed as a copy rather than linked, which README's "Use shardq with your own
// Workers" allows).
import { CliError, UsageError } from "./args.mjs";

/** Local development's: where `npm start` serves, and the token and account .dev.vars gives it. */
export const DEFAULT_URL = "http://127.0.0.1:8787";
export const LOCAL_TOKEN = "shardq-local-dev-token";
export const DEFAULT_ACCOUNT = "local";

/** @typedef {typeof import("../src/client/index.ts")} ClientLibrary */
/** @typedef {import("../src/client/index.ts").ShardqClient} Client */

/**
 * A command sends again, up to three tries in all, after a network error, a 429 or a
 * 502/503/504 (src/client/retry.ts decides which errors those are). A command is a person
 * at a terminal, or a script, waiting for one answer: a connection reset, `wrangler dev`
 * reloading or a shard that did not answer is usually gone within a second, and sending
 * again is what the CLI's hints told people to do by hand. It is safe to: sends carry the
 * idempotency key the library draws for each (stored once however often sent), a 429 and
 * a refused connection did nothing, and any other call repeated does what running the
 * command again does: a PATCH or a purge again changes nothing more; an ack again reports
 * the leases it settled the first time as gone; a create or a delete whose answer was lost
 * is reported as taken or not found; a redrive moves up to --limit more.
 *
 * Errors stay prompt: the waits are full jitter under 200 ms, then under 400 ms, so an
 * unreachable service is reported within about 0.6 s (`maxDelayMs` only bounds them should
 * `attempts` grow). A wait the service asks for with Retry-After is honoured in full: 1 s
 * after a 503, and 10 s after a 429 (the rate limiters' window, broker/http/rate-limit.ts),
 * the one slow case, where waiting is what the user would have had to do anyway.
 */
export const CLI_RETRY = Object.freeze({ attempts: 3, baseDelayMs: 200, maxDelayMs: 2000 });

/**
 * Gives up on an answer after 60 s: twice the longest any call works (a redrive's 30 s
 * budget, broker/http/redrive.ts). A timeout is a network error, so it is retried too.
 */
export const CLI_TIMEOUT_MS = 60_000;

/** Where `npm install` (the "prepare" script) builds the library: package.json's "./client" export. */
const BUILT = "../lib/client/index.js";

/**
 * The library from its sources; where Node cannot run them (before 22.18, or under
 * node_modules), as `npm install` built it.
 * @returns {Promise<ClientLibrary>}
 */
export async function loadClientLibrary() {
  try {
    return await import("../src/client/index.ts");
  } catch (err) {
    const code = /** @type {{ code?: unknown }} */ (err)?.code;
    if (code !== "ERR_UNKNOWN_FILE_EXTENSION" && code !== "ERR_UNSUPPORTED_NODE_MODULES_TYPE_STRIPPING") throw err;
    try {
      return /** @type {ClientLibrary} */ (await import(BUILT));
    } catch {
      throw new CliError(
        `this command needs shardq's client library, which Node ${process.version} cannot load from its sources here (${code}): run \`npm run build:client\` in shardq, or use Node.js 22.18 or newer with shardq outside node_modules`,
      );
    }
  }
}

/**
 * A client of the service with the CLI's retry policy and timeout.
 * @param {ClientLibrary} lib
 * @param {{ url: string, token: string, account: string }} conn  as connection() finds it
 * @returns {Client}
 */
export function cliClient(lib, conn) {
  return lib.createClient({ ...conn, retry: CLI_RETRY, timeoutMs: CLI_TIMEOUT_MS });
}

/**
 * URL, token and account from the flags, else the environment, else local development's.
 * The local dev token is only ever sent to a loopback address.
 * @param {import("./args.mjs").Values} values
 * @param {Record<string, string | undefined>} env
 */
export function connection(values, env) {
  const url = /** @type {string | undefined} */ (values.url) ?? (env.SHARDQ_URL || DEFAULT_URL);
  /** @type {URL} */
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--url: "${url}" is not a URL (like ${DEFAULT_URL})`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new UsageError(`--url: "${url}" must start with http:// or https://`);
  const token =
    /** @type {string | undefined} */ (values.token) ??
    (env.SHARDQ_TOKEN || (isLoopback(parsed.hostname) ? LOCAL_TOKEN : undefined));
  if (!token)
    throw new UsageError(
      `--token (or SHARDQ_TOKEN) is required for ${parsed.origin}; the local dev token is only used for a loopback URL`,
    );
  const account = /** @type {string | undefined} */ (values.account) ?? (env.SHARDQ_ACCOUNT || DEFAULT_ACCOUNT);
  if (account === "") throw new UsageError("--account must not be empty");
  return { url, token, account };
}

/** @param {string} host */
function isLoopback(host) {
  return host === "localhost" || host.endsWith(".localhost") || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}
