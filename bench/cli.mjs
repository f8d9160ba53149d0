// `npm run bench -- <command> [options]`.
import { LOAD_HELP, load } from "./load.mjs";

const [command, ...rest] = process.argv.slice(2);
try {
  if (command === "load" && !rest.includes("--help")) await load(rest);
  else {
    console.log(`usage:\n${LOAD_HELP}`);
    if (command !== undefined && command !== "help" && command !== "--help") process.exitCode = 2;
  }
} catch (err) {
  console.error(`bench: ${/** @type {Error} */ (err).message}`);
  process.exitCode = 2;
}
