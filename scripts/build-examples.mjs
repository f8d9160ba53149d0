// Bundles the example consumer to examples/consumer/dist/index.js, the outcome probe
// consumer to test/fixtures/outcome-probe/dist/index.js, the batching probe producer to
// test/fixtures/batching-probe/dist/index.js and the outbox probe's objects to
// test/fixtures/outbox-probe/dist/index.js: the Workers test pool loads auxiliary Workers as built
// JavaScript. vitest.config.ts calls these.
import { build } from "esbuild";
import { join } from "node:path";
import { ROOT } from "../cli/wrangler/dev-server.mjs";

async function bundle(entry, outfile) {
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: "esm",
    target: "es2023",
    platform: "neutral",
    external: ["cloudflare:*"],
    logLevel: "warning",
  });
  return outfile;
}

export async function buildExampleConsumer() {
  return bundle(
    join(ROOT, "examples", "consumer", "src", "index.ts"),
    join(ROOT, "examples", "consumer", "dist", "index.js"),
  );
}

/** The probe consumer of test/workers/transport-parity.test.ts (test/fixtures/outcome-probe/index.ts). */
export async function buildOutcomeProbe() {
  return bundle(
    join(ROOT, "test", "fixtures", "outcome-probe", "index.ts"),
    join(ROOT, "test", "fixtures", "outcome-probe", "dist", "index.js"),
  );
}

/** The probe producer of test/workers/batching-queue.test.ts (test/fixtures/batching-probe/index.ts). */
export async function buildBatchingProbe() {
  return bundle(
    join(ROOT, "test", "fixtures", "batching-probe", "index.ts"),
    join(ROOT, "test", "fixtures", "batching-probe", "dist", "index.js"),
  );
}

/** The producer and consumer objects of test/workers/outbox*.test.ts and inbox.test.ts (test/fixtures/outbox-probe/index.ts). */
export async function buildOutboxProbe() {
  return bundle(
    join(ROOT, "test", "fixtures", "outbox-probe", "index.ts"),
    join(ROOT, "test", "fixtures", "outbox-probe", "dist", "index.js"),
  );
}
