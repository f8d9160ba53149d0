// `npm run test:faults [-- options]`: the fault-injection run with its checker (see
// harness.mjs and checker.mjs). Exit status 0 when the history is valid, 1 when not
// (or the run broke), 2 on a usage error.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { backlogOptions, runBacklog } from "./backlog.mjs";
import { check } from "./checker.mjs";
import { FAULT_KINDS } from "./faults.mjs";
import { runFaults } from "./harness.mjs";
import { readHistory } from "./history.mjs";
import { formatTable, writeReport } from "./report.mjs";
import { defaultOut, defaults } from "./run-options.mjs";

const HELP = `npm run test:faults -- [options]
  --short            the short run (3,000 messages, 3 kills, 4 aborts, 1 corruption of 5 bodies,
                     one quiet phase of 40 s with a kill and an abort of its own; what npm test runs)
  --seed N           the seed (default: a random one, printed); with the same options it replays
                     the same batch sizes, poison messages, consumer decisions and fault schedule
  --messages N       messages to send (default 200,000; short 3,000)
  --faults K,K       fault kinds (default all: ${FAULT_KINDS.join(",")}):
                       kill          SIGKILL wrangler dev and workerd, restart on the same state
                       abort-append  reset one storage shard once an append is durable, before its reply
                       abort-ack     reset one storage shard at the next ack or retry it is to apply
                       corrupt       flip a byte of some stored bodies of one shard (checksums kept)
                       abort-consumer  reset a consumer shard of the push queue after a lease, or after
                                     its queue() handler returned and before its acks were applied
                                     (10; short 2)
  --kills N          hard kills of wrangler dev during the load (default 20; short 3)
  --aborts N         storage shard resets during the load, the abort kinds in turn (default 20; short 4)
  --corruptions N    corruptions during the load, of 10 stored bodies each (default 5; short 1, of 5)
  --controls N       control-plane faults during the load, their kinds in turn (default 15; short 3):
                       abort-coordinator  reset the Coordinator mid scale-out or mid drain
                       throw-alarm        make the next 1, 3 or 7 alarms of a storage shard, a consumer
                                          shard or the Coordinator throw (short: 1 or 2)
                       stale-map          drain a storage shard while the published map stays as it
                                          was for 60 s (short: 10 s)
  --alarm-throws N,N how many alarms in a row a throw-alarm makes throw, picked by the seed
                     (default 1,3,7: 7 outlasts the platform's 6 retries; short 1,2)
  --rate N           messages/s (default: spread over the planned fault time)
  --ordered          ordered traffic (the default): a share of the producers' messages (both
                     queues) carry an ordering_key, one of 20 keys per producer, each key's sends
                     one after another; the checker then checks each key's delivery order
                     (order-checker.mjs)
  --unordered        no ordering keys: the traffic of runs before ordered lanes (replays of their seeds)
  --ordered-rate F   with --ordered, the share of messages that carry a key (default 0.5; at most
                     one message of a key in a batch)
  --quiet N          quiet phases (default 2; short 1): producers stop while consumers keep asking,
                     messages sent delayed come due mid-phase, the service is killed and a storage
                     shard reset at the wake-up (quiet-phases.mjs); 0 for none
  --quiet-ms MS      how long each quiet phase lasts (default 90000; short 40000)
  --producers N      producers (default 4)
  --outbox-producers N  producer objects of the outbox and inbox workload (default 4; 0 for none):
                     each increment of a counter sends one message through shardq/outbox, a
                     consumer object applies it through shardq/inbox, and at the end every
                     committed increment must have been applied exactly once (outbox-workload.mjs)
  --outbox-kills N   kills of that workload's own Worker process (default 5; short 1)
  --consumers N      pull consumers (default 4)
  --out DIR          where history.jsonl, service.log, report.json and report.md go
                     (default test-artifacts/faults/<time>-<mode>-seed<N>)
  --keep-state       keep wrangler's state directory
  --check FILE       check a history.jsonl again and print the verdict (and rewrite the
                     report.json and report.md next to it, if there are)
  --backlog          the large-backlog run instead: fill a paused queue with --messages (default
                     300,000; short 10,000) bodies of 1 KB to 128 KB while sampling workerd's RSS,
                     time every read answer at 10/50/100 %, SIGKILL and restart over the backlog,
                     then drain it; takes --short, --seed, --messages, --producers, --consumers,
                     --out, --keep-state`;

/** @param {string[]} argv */
async function main(argv) {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      short: { type: "boolean", default: false },
      seed: { type: "string" },
      messages: { type: "string" },
      faults: { type: "string" },
      kills: { type: "string" },
      aborts: { type: "string" },
      corruptions: { type: "string" },
      controls: { type: "string" },
      "alarm-throws": { type: "string" },
      rate: { type: "string" },
      ordered: { type: "boolean", default: false },
      unordered: { type: "boolean", default: false },
      "ordered-rate": { type: "string" },
      quiet: { type: "string" },
      "quiet-ms": { type: "string" },
      producers: { type: "string" },
      "outbox-producers": { type: "string" },
      "outbox-kills": { type: "string" },
      consumers: { type: "string" },
      out: { type: "string" },
      "keep-state": { type: "boolean", default: false },
      check: { type: "string" },
      backlog: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (v.help) {
    console.log(HELP);
    return 0;
  }
  if (v.backlog) return (await runBacklog(backlogOptions(v, (message) => new Usage(message)))).ok ? 0 : 1;
  if (v.check) {
    const r = check(await readHistory(v.check));
    // Next to a run's report: write it again from this check (the checker may have changed).
    const previous = join(dirname(v.check), "report.json");
    if (existsSync(previous)) {
      const meta = JSON.parse(readFileSync(previous, "utf8")).meta;
      const files = writeReport(r, meta);
      console.log(`${formatTable(r, meta)}\nreport: ${files.md}`);
    } else {
      console.log(
        JSON.stringify({ valid: r.valid, failures: r.failures, figures: r.figures, examples: r.examples }, null, 2),
      );
    }
    return r.valid ? 0 : 1;
  }
  const mode = v.short ? "short" : "full";
  const d = defaults(mode);
  const int = (
    /** @type {string | undefined} */ s,
    /** @type {string} */ name,
    /** @type {number} */ min,
    /** @type {number} */ max,
    /** @type {number} */ fallback,
  ) => {
    if (s === undefined) return fallback;
    const x = Number(s);
    if (!Number.isInteger(x) || x < min || x > max)
      throw new Usage(`--${name} must be an integer from ${min} to ${max}`);
    return x;
  };
  const seed = int(v.seed, "seed", 1, 2 ** 31 - 1, d.seed);
  const faults =
    v.faults === undefined
      ? d.faults
      : v.faults
          .split(",")
          .map((k) => k.trim())
          .filter(Boolean);
  const unknownKind = faults.find((k) => !FAULT_KINDS.includes(k));
  if (unknownKind !== undefined || faults.length === 0)
    throw new Usage(
      `--faults takes one or more of ${FAULT_KINDS.join(", ")}${unknownKind ? `, not "${unknownKind}"` : ""}`,
    );
  if (v.ordered && v.unordered) throw new Usage("--ordered and --unordered exclude each other");
  const ordered = !v.unordered;
  if (v["ordered-rate"] !== undefined && !ordered) throw new Usage("--ordered-rate does not go with --unordered");
  const orderedRate = v["ordered-rate"] === undefined ? 0.5 : Number(v["ordered-rate"]);
  if (!(orderedRate > 0 && orderedRate <= 1)) throw new Usage("--ordered-rate must be a number above 0 and at most 1");
  const o = {
    ...d,
    orderedRate: ordered ? orderedRate : 0,
    seed,
    faults,
    aborts: int(v.aborts, "aborts", 0, 1000, d.aborts),
    corruptions: int(v.corruptions, "corruptions", 0, 100, d.corruptions),
    controls: int(v.controls, "controls", 0, 1000, d.controls),
    alarmThrows:
      v["alarm-throws"] === undefined
        ? d.alarmThrows
        : v["alarm-throws"].split(",").map((x) => int(x.trim(), "alarm-throws", 1, 10, 1)),
    messages: int(v.messages, "messages", 1, 10_000_000, d.messages),
    kills: int(v.kills, "kills", 0, 1000, d.kills),
    rate: int(v.rate, "rate", 0, 1_000_000, d.rate),
    quietPhases: int(v.quiet, "quiet", 0, 10, d.quietPhases),
    quietMs: int(v["quiet-ms"], "quiet-ms", 30_000, 600_000, d.quietMs),
    producers: int(v.producers, "producers", 1, 64, d.producers),
    outboxProducers: int(v["outbox-producers"], "outbox-producers", 0, 64, d.outboxProducers),
    outboxKills: int(v["outbox-kills"], "outbox-kills", 0, 100, d.outboxKills),
    consumers: int(v.consumers, "consumers", 1, 64, d.consumers),
    keepState: v["keep-state"] ?? false,
    out: v.out ? resolve(v.out) : defaultOut(mode, seed),
    log: (/** @type {string} */ line) => console.log(line),
  };
  const { result } = await runFaults(o);
  return result.valid ? 0 : 1;
}

class Usage extends Error {}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    const usage = err instanceof Usage || /** @type {{ code?: string }} */ (err)?.code?.startsWith("ERR_PARSE_ARGS");
    console.error(usage ? `${err.message}\n\n${HELP}` : err);
    process.exit(usage ? 2 : 1);
  },
);
