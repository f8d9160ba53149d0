#!/usr/bin/env node
// `npx shardq`: the command line of a shardq service (cli/main.mjs). `shardq --help` lists the commands.
import { main } from "../cli/main.mjs";

process.exitCode = await main(process.argv.slice(2));
