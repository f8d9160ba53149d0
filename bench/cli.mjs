// `npm run bench -- <command> [options]`.
import { CEILING_HELP, ceilingCommand } from "./ceiling.mjs";
import { COMPARE_HELP, compare } from "./compare.mjs";
import { HEAP_HELP, heapCommand } from "./heap.mjs";
import { LOAD_HELP, load } from "./load.mjs";
import { MANY_HELP, manyQueues } from "./many-queues.mjs";
import { LONGPOLL_HELP, longPolling } from "./long-polling.mjs";
import { PROFILE_HELP, profile } from "./profile.mjs";
import { RATES_HELP, ratesCommand } from "./rates.mjs";
import { IDLE_HELP, TRAFFIC_HELP, idleCommand, trafficCommand } from "./traffic.mjs";
import { WAKE_HELP, wakeCommand } from "./wake.mjs";

const [command, ...rest] = process.argv.slice(2);
try {
  if (command === "load" && !rest.includes("--help")) await load(rest);
  else if (command === "compare" && !rest.includes("--help")) await compare(rest);
  else if (command === "profile" && !rest.includes("--help")) await profile(rest);
  else if (command === "ceiling" && !rest.includes("--help")) await ceilingCommand(rest);
  else if (command === "longpoll" && !rest.includes("--help")) await longPolling(rest);
  else if (command === "idle" && !rest.includes("--help")) await idleCommand(rest);
  else if (command === "traffic" && !rest.includes("--help")) await trafficCommand(rest);
  else if (command === "wake" && !rest.includes("--help")) await wakeCommand(rest);
  else if (command === "many" && !rest.includes("--help")) await manyQueues(rest);
  else if (command === "rates" && !rest.includes("--help")) await ratesCommand(rest);
  else if (command === "heap" && !rest.includes("--help")) await heapCommand(rest);
  else {
    console.log(
      `usage:\n${LOAD_HELP}\n\n${COMPARE_HELP}\n\n${CEILING_HELP}\n\n${PROFILE_HELP}\n\n${LONGPOLL_HELP}\n\n${IDLE_HELP}\n\n${TRAFFIC_HELP}\n\n${WAKE_HELP}\n\n${MANY_HELP}\n\n${RATES_HELP}\n\n${HEAP_HELP}`,
    );
    if (command !== undefined && command !== "help" && command !== "--help") process.exitCode = 2;
  }
} catch (err) {
  console.error(`bench: ${/** @type {Error} */ (err).message}`);
  process.exitCode = 2;
}
