// What a fault run is given: its options, each mode's defaults, the command that replays
// a run, and where its output goes.
import { join } from "node:path";
import { ROOT } from "../../cli/wrangler/dev-server.mjs";
import { FAULT_KINDS } from "./faults.mjs";
import { randomSeed } from "./prng.mjs";

/**
 * @typedef {object} FaultOptions
 * @property {"short" | "full"} mode
 * @property {number} seed
 * @property {number} messages     messages to send (those certainly refused are sent again as new ones)
 * @property {string[]} faults     the fault kinds injected (FAULT_KINDS)
 * @property {number} kills        hard kills during the load (when faults has "kill")
 * @property {number} aborts       storage shard resets during the load, the abort kinds of faults in turn
 * @property {number} corruptions  corruptions during the load (when faults has "corrupt"), each of `corruptEach` stored bodies
 * @property {number} corruptEach
 * @property {number} controls     control-plane faults during the load (control-faults.mjs), their kinds of faults in turn
 * @property {number} holdMapMs    how long a stale-map fault keeps the published map as it was
 * @property {number[]} alarmThrows  how many alarms in a row a throw-alarm fault makes throw (seeded pick; 7 outlasts the platform's 6 retries)
 * @property {number} keyRate      share of batches sent with an Idempotency-Key (and sent again while unknown)
 * @property {number} pushRate     share of the producers' batches and single sends that go to the push queue (push-faults.mjs)
 * @property {number} orderedRate  share of the producers' messages sent with an ordering_key (0.5 unless `--unordered`: 0), checked by order-checker.mjs
 * @property {number} orderingKeys ordering keys per producer
 * @property {number} pushLeaseMs  shardq's push lease (PUSH_LEASE_MS): the push consumer hangs and acks late past it
 * @property {number} consumerAborts  consumer shard resets of the push queue during the load (when faults has "abort-consumer")
 * @property {number} outboxProducers  producer objects of the outbox and inbox workload (outbox-workload.mjs); 0: none
 * @property {number} outboxKills  kills of that workload's own Worker process during the load (when faults has "kill")
 * @property {number} producers
 * @property {number} consumers    pull consumers of the queue (the dead-letter queue has one more)
 * @property {number} rate         messages/s over all producers; 0: spread the messages over the planned fault time
 * @property {[number, number]} upMs     the service runs this long (seeded, uniform) before each kill
 * @property {[number, number]} downMs   and stays dead this long
 * @property {[number, number]} abortUpMs  the service runs this long before each abort
 * @property {number[]} visibilityMs     visibility timeouts a pull picks from
 * @property {number} drainTimeoutMs
 * @property {number} quietPhases  quiet phases (quiet-phases.mjs): traffic stops, consumers keep asking, faults go on
 * @property {number} quietMs      how long each lasts
 * @property {string} out          directory for history.jsonl, service.log, report.json and report.md
 * @property {boolean} keepState   keep wrangler's state directory
 * @property {(line: string) => void} log
 */

/** @param {"short" | "full"} mode @returns {Omit<FaultOptions, "out" | "log">} */
export function defaults(mode) {
  // A quiet phase outlasts the 60 s after which an idle object sleeps; the short run's is shorter, to stay about 2.5 minutes.
  const common = {
    quietPhases: mode === "short" ? 1 : 2,
    quietMs: mode === "short" ? 40_000 : 90_000,
    seed: randomSeed(),
    faults: [...FAULT_KINDS],
    producers: 4,
    consumers: 4,
    rate: 0,
    downMs: /** @type {[number, number]} */ ([0, 1000]),
    visibilityMs: [2000, 3000, 5000],
    keepState: false,
    pushRate: 0.3,
    orderedRate: 0.5,
    orderingKeys: 20,
    pushLeaseMs: 4000,
    consumerAborts: mode === "short" ? 2 : 10,
    outboxProducers: 4,
    outboxKills: mode === "short" ? 1 : 5,
  };
  return mode === "short"
    ? {
        ...common,
        mode,
        messages: 3000,
        kills: 3,
        aborts: 4,
        corruptions: 1,
        corruptEach: 5,
        controls: 3,
        holdMapMs: 10_000,
        alarmThrows: [1, 2],
        keyRate: 0.2,
        upMs: [2000, 5000],
        abortUpMs: [1000, 2500],
        drainTimeoutMs: 60_000,
      }
    : {
        ...common,
        mode,
        messages: 200_000,
        kills: 20,
        aborts: 20,
        corruptions: 5,
        corruptEach: 10,
        controls: 15,
        holdMapMs: 60_000,
        alarmThrows: [1, 3, 7],
        keyRate: 0.2,
        upMs: [3000, 8000],
        abortUpMs: [1500, 4000],
        drainTimeoutMs: 300_000,
      };
}

/** The command that replays a run. @param {FaultOptions} o */
export function replayCommand(o) {
  return `npm run test:faults -- ${o.mode === "short" ? "--short " : ""}--seed ${o.seed} --messages ${o.messages} --faults ${o.faults.join(",")} --kills ${o.kills} --aborts ${o.aborts} --corruptions ${o.corruptions} --controls ${o.controls} --alarm-throws ${o.alarmThrows.join(",")}${o.rate ? ` --rate ${o.rate}` : ""}${o.orderedRate ? ` --ordered --ordered-rate ${o.orderedRate}` : " --unordered"} --quiet ${o.quietPhases} --quiet-ms ${o.quietMs} --outbox-producers ${o.outboxProducers} --outbox-kills ${o.outboxKills}`;
}

/** A run's output directory under test-artifacts/faults. @param {FaultOptions["mode"]} mode @param {number} seed */
export function defaultOut(mode, seed) {
  const stamp = new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
  return join(ROOT, "test-artifacts", "faults", `${stamp}-${mode}-seed${seed}`);
}
