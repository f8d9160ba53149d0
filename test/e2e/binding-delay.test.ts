// `delivery_delay` on a `[[queues.producers]]` binding, as Cloudflare applies it: every message
// sent through that binding without a delay of its own waits that long; a message's own
// delaySeconds (0 included) and sendBatch()'s delaySeconds come first; another binding of the
// same queue keeps its own. Under `shardq dev`, with a user's Worker that has nothing but its
// [[queues.producers]] tables; then the same config through `shardq deploy-config`, whose output
// `wrangler deploy --dry-run` bundles.
//
// Timing: what is exact is read off the stored message (visible_at_ms less timestamp_ms, set by
// the shard at the send). Beyond that the test asks only what a slow machine cannot upset: a
// delayed message looked up just after its send is still delayed (DELAY leaves it 15 s to
// look), no pull ever answers with a delayed message before its visible_at_ms, the undelayed
// ones are pulled at once, and the delayed ones are pulled in the end.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseToml } from "smol-toml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeDeployConfig } from "../../cli/workers/deploy-config.mjs";
import { dryRunDeployConfig } from "../../scripts/deploy-dry-run-own-workers.mjs";
import { MAX_DELAY_SECONDS } from "../../cli/workers/worker-configs.mjs";
import { LIMITS } from "../../src/kernel/limits.ts";
import type { Lookup } from "./message-lookup.ts";
import { startOneProducer, type CallOutcome, type OneProducerSession } from "./one-producer-session.ts";
import { sleep } from "../../src/kernel/sleep.ts";

const QUEUE = "bd-jobs";
const DELAY = 15;
const PRODUCERS = `[[queues.producers]]
binding = "JOBS"
queue = "${QUEUE}"
delivery_delay = ${DELAY}

# Another binding of the same queue, without a delay: the delay is the binding's, not the queue's.
[[queues.producers]]
binding = "NOW"
queue = "${QUEUE}"
`;

describe("a [[queues.producers]] binding's delivery_delay under shardq dev", () => {
  let dev: OneProducerSession | undefined;

  beforeAll(async () => {
    dev = await startOneProducer("binding-delay-producer", PRODUCERS);
  });

  afterAll(async () => {
    await dev?.stop();
  });

  it("holds every message of the binding without a delay of its own for delivery_delay; its own delaySeconds: 0, a batch's 0 and the other binding go at once", async () => {
    const d = dev!;
    // The config no longer draws a warning: the delay is honoured.
    expect(d.log()).not.toMatch(/delivery_delay/);
    expect((await d.api("POST", `/${QUEUE}/consumers`, { type: "http_pull" })).status).toBeLessThan(300);

    const ids = (o: CallOutcome): string[] => {
      if (!o.ok) throw new Error(`${o.name}: ${o.message}`);
      return o.result.messageIds ?? [o.result.messageId!];
    };
    const [bindingSend] = ids(await d.call({ op: "send", body: { n: "binding's delay" } }));
    const [ownZero] = ids(await d.call({ op: "send", body: { n: "own 0" }, options: { delaySeconds: 0 } }));
    const [batchBinding, batchOwnZero] = ids(
      await d.call({
        op: "sendBatch",
        messages: [{ body: { n: "batch, binding's" } }, { body: { n: "batch, own 0" }, delaySeconds: 0 }],
      }),
    );
    const [batchZero] = ids(
      await d.call({ op: "sendBatch", messages: [{ body: { n: "batch option 0" } }], options: { delaySeconds: 0 } }),
    );
    const [otherBinding] = ids(await d.call({ binding: "NOW", op: "send", body: { n: "the other binding" } }));
    const delayed = [bindingSend!, batchBinding!];
    const atOnce = [ownZero!, batchOwnZero!, batchZero!, otherBinding!];

    const lookup = async (id: string): Promise<Lookup> => {
      const r = await d.api("GET", `/${QUEUE}/messages/${id}`);
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      return r.json.result as Lookup;
    };
    // Stored with the binding's delay, exactly; the others with none.
    for (const id of delayed) {
      const m = await lookup(id);
      expect(m.visible_at_ms - m.timestamp_ms, id).toBe(DELAY * 1000);
      expect(m.state, id).toBe("delayed");
    }
    for (const id of atOnce) {
      const m = await lookup(id);
      expect(m.visible_at_ms, id).toBe(m.timestamp_ms);
      expect(m.state, id).toBe("ready");
    }
    const visibleAt = new Map<string, number>();
    for (const id of delayed) visibleAt.set(id, (await lookup(id)).visible_at_ms);

    // Pull until everything came: the undelayed at once, the delayed never before they are due.
    const pulledAt = new Map<string, number>();
    const deadline = Date.now() + (DELAY + 60) * 1000;
    while (pulledAt.size < delayed.length + atOnce.length && Date.now() < deadline) {
      const r = await d.api("POST", `/${QUEUE}/messages/pull`, { batch_size: 100, visibility_timeout_ms: 600_000 });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const answeredAt = Date.now();
      const messages = r.json.result.messages as Array<{ id: string; lease_id: string }>;
      for (const m of messages) {
        // The shard decided before this answer arrived: had it handed out a delayed message early, this would show it.
        if (visibleAt.has(m.id))
          expect(answeredAt, `${m.id} pulled before its delivery_delay was over`).toBeGreaterThanOrEqual(
            visibleAt.get(m.id)!,
          );
        pulledAt.set(m.id, answeredAt);
      }
      if (messages.length)
        expect(
          (await d.api("POST", `/${QUEUE}/messages/ack`, { acks: messages.map((m) => ({ lease_id: m.lease_id })) }))
            .status,
        ).toBe(200);
      if (atOnce.some((id) => !pulledAt.has(id))) continue;
      await sleep(500);
    }
    expect([...pulledAt.keys()].sort()).toEqual([...delayed, ...atOnce].sort());
    // The undelayed ones came before any delayed one was due.
    for (const id of atOnce) expect(pulledAt.get(id)!, id).toBeLessThan(Math.min(...visibleAt.values()));
  });
});

describe("shardq deploy-config with a binding's delivery_delay", () => {
  const work = mkdtempSync(join(tmpdir(), "shardq-e2e-binding-delay-deploy-"));
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  const worker = (dir: string, file: string, text: string) => {
    mkdirSync(join(work, dir, "src"), { recursive: true });
    writeFileSync(join(work, dir, "src", "index.js"), "export default { fetch() { return new Response('hi'); } };\n");
    writeFileSync(join(work, dir, file), text);
    return `${dir}/${file}`;
  };

  it("puts the delay in the props of the binding it belongs to, in TOML and JSON alike, with no warning", () => {
    const toml = worker(
      "toml",
      "wrangler.toml",
      `name = "delay-toml"\nmain = "src/index.js"\ncompatibility_date = "2026-11-01"\n\n${PRODUCERS}`,
    );
    const json = worker(
      "json",
      "wrangler.jsonc",
      JSON.stringify({
        name: "delay-json",
        main: "src/index.js",
        compatibility_date: "2026-11-01",
        queues: { producers: [{ binding: "LATER", queue: QUEUE, delivery_delay: 0 }] },
      }),
    );
    const result = writeDeployConfig({
      configs: [toml, json],
      out: "out",
      account: "acme",
      shardqName: "shardq",
      cwd: work,
    });
    expect(result.warnings.filter((w) => /delivery_delay/.test(w))).toEqual([]);
    const services = (file: string) =>
      (parseToml(readFileSync(file, "utf8")) as { services: Array<Record<string, unknown>> }).services;
    expect(services(join(work, "out", "delay-toml", "wrangler.toml"))).toEqual([
      {
        binding: "JOBS",
        service: "shardq",
        entrypoint: "QueueProducer",
        props: { account: "acme", queue: QUEUE, delivery_delay: DELAY },
      },
      { binding: "NOW", service: "shardq", entrypoint: "QueueProducer", props: { account: "acme", queue: QUEUE } },
    ]);
    const jsonText = readFileSync(join(work, "out", "delay-json", "wrangler.jsonc"), "utf8").replace(/^\/\/.*$/gm, "");
    expect(JSON.parse(jsonText).services).toEqual([
      {
        binding: "LATER",
        service: "shardq",
        entrypoint: "QueueProducer",
        props: { account: "acme", queue: QUEUE, delivery_delay: 0 },
      },
    ]);
    // The queue itself gets no delay: it is the binding's.
    expect(JSON.parse(readFileSync(result.queues, "utf8")).queues).toEqual([{ queue_name: QUEUE }]);
    // wrangler takes the props as they are: each config bundles as `wrangler deploy` would.
    for (const r of dryRunDeployConfig(result, join(work, "bundles")))
      expect(r.ok, `${r.name}:\n${r.output}`).toBe(true);
  });

  it.each([-1, 2.5, 86_401, "30"])("refuses delivery_delay = %j, naming the binding", (value) => {
    const file = worker(
      `bad-${String(value)}`,
      "wrangler.json",
      JSON.stringify({
        name: "bad-delay",
        main: "src/index.js",
        queues: { producers: [{ binding: "JOBS", queue: QUEUE, delivery_delay: value }] },
      }),
    );
    expect(() =>
      writeDeployConfig({
        configs: [file],
        out: `out-bad-${String(value)}`,
        account: "acme",
        shardqName: "shardq",
        cwd: work,
      }),
    ).toThrow(
      /\[\[queues\.producers\]\] #1 \(binding JOBS\): delivery_delay must be a whole number of seconds from 0 to 86400/,
    );
  });

  it("takes the same longest delay as the service", () => {
    expect(MAX_DELAY_SECONDS).toBe(LIMITS.maxDelaySeconds);
  });
});
