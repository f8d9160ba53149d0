// The commands of `shardq`: each names its arguments and options, calls the HTTP API
// (broker/http/router.ts) and prints either the API's result (--json) or lines for people.
// Flags follow `wrangler queues` where it has the command; values are checked for form
// here and for range by the API, which names the field at fault.
//
// They live in modules by what they act on (queues, consumers, messages); this one puts
// them in one list, in the order `shardq --help` shows them.
import { CONSUMER_COMMANDS } from "./consumers.mjs";
import { APPLY, DEPLOY_CONFIG } from "./deploy-config.mjs";
import { DEV } from "./dev.mjs";
import { MESSAGE_COMMANDS } from "./messages.mjs";
import { QUEUE_COMMANDS } from "./queues.mjs";

export { FIELD_FLAGS } from "./shared.mjs";

/** @typedef {import("./shared.mjs").Command} Command */
/** @typedef {import("./shared.mjs").Context} Context */

/** @type {Command[]} */
export const COMMANDS = [...QUEUE_COMMANDS, ...CONSUMER_COMMANDS, ...MESSAGE_COMMANDS, DEV, DEPLOY_CONFIG, APPLY];

/**
 * `wrangler queues` spells some of these under "queues": `queues consumer add`,
 * `queues purge`. Both spellings work.
 * @returns {Array<[string, Command]>}
 */
export function spellings() {
  /** @type {Array<[string, Command]>} */
  const out = [];
  for (const c of COMMANDS) {
    out.push([c.name, c]);
    if (!c.name.startsWith("queues ") && c.group !== "Messages" && c.group !== "Your own Workers")
      out.push([`queues ${c.name}`, c]);
  }
  return out;
}
