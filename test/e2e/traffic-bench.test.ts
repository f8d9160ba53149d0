// The cost-by-traffic and wake-up benchmarks (bench/traffic.mjs, bench/wake.mjs):
// their pricing and readings from made-up figures, then each command in its quickest form
// against a stack of its own, checking what it prints and writes (not the figures).
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { costRateChart } from "../../bench/charts.mjs";
import { monthlyUsd, priceWindow, withoutReading } from "../../bench/cost-window.mjs";
import { stackVars, trafficMarkdown } from "../../bench/traffic.mjs";
import { ROOT } from "../../cli/wrangler/dev-server.mjs";

const zero = { rpcs: 0, alarms: 0, rowsWritten: 0, rowsRead: 0, objects: 1, active: 0, restarted: 0 };
const delta = (
  d: Partial<Record<"storage" | "coordinator" | "consumer" | "catalog" | "idempotency", Partial<typeof zero>>>,
) =>
  Object.fromEntries(
    (["storage", "coordinator", "consumer", "catalog", "idempotency"] as const).map((c) => [c, { ...zero, ...d[c] }]),
  ) as Parameters<typeof withoutReading>[0];

describe("pricing a queue by its traffic", () => {
  it("prices idle queues as the cost goals did: $4.68 with 1 storage shard, $47.47 with 24", () => {
    expect(monthlyUsd({ requests: 5753, rowsWritten: 5513, rowsRead: 39_283 }).toFixed(2)).toBe("4.68");
    expect(monthlyUsd({ requests: 56_247, rowsWritten: 55_258, rowsRead: 1_332_222 }).toFixed(2)).toBe("47.47");
    expect(monthlyUsd({ requests: 0, rowsWritten: 0, rowsRead: 0 })).toBe(0);
  });

  it("scales a window to an hour and prices Cloudflare Queues at 3 operations per delivered message", () => {
    const p = priceWindow(
      delta({ storage: { rpcs: 30, alarms: 30, rowsWritten: 60, rowsRead: 600, active: 1 } }),
      60,
      600,
    );
    expect(p.perHour).toEqual({ requests: 3600, alarms: 1800, rowsWritten: 3600, rowsRead: 36_000, delivered: 36_000 });
    // 36,000 messages an hour, 730 hours, 3 operations each at $0.40 per million.
    expect(p.cq_usd).toBeCloseTo(36_000 * 730 * 3 * 0.4e-6, 6);
    expect(priceWindow(delta({}), 60, 0)).toMatchObject({ usd: 0, cq_usd: 0, restarted: 0 });
  });

  it("takes a reading's own cost off a window, class by class, never below 0", () => {
    const window = delta({
      storage: { rpcs: 2, rowsRead: 48, active: 24 },
      coordinator: { rpcs: 1, alarms: 0, active: 1 },
    });
    const reading = delta({ storage: { rowsRead: 48 }, coordinator: { rpcs: 3 } });
    const w = withoutReading(window, reading);
    expect(w.storage).toMatchObject({ rpcs: 2, rowsRead: 0, active: 24 });
    // Nothing left but the reading: no object counts as having worked.
    expect(w.coordinator).toMatchObject({ rpcs: 0, alarms: 0, active: 0 });
  });

  it("runs on wrangler.toml's regions and shard counts, whatever they say, with local dev's other vars", () => {
    const toml = (perRegion: string) =>
      `name = "shardq"\n[vars]\nREGIONS = "wnam,weur"\nDEFAULT_REGION = "weur"\nSHARDS_PER_REGION = "${perRegion}"\n\n[site]\nbucket = "x"\n`;
    const dev = `# local\nAUTH_TOKENS={"t":{"account":"local"}}\nREGIONS=local\nDEFAULT_REGION=local\nRATE_LIMITS=off\n`;
    const deployed = stackVars(toml("4"), dev);
    expect(deployed.vars).toEqual({
      AUTH_TOKENS: '{"t":{"account":"local"}}',
      REGIONS: "wnam,weur",
      DEFAULT_REGION: "weur",
      RATE_LIMITS: "off",
    });
    expect(deployed.label).toBe("wrangler.toml's defaults (REGIONS wnam,weur, SHARDS_PER_REGION 4)");
    expect(stackVars(toml("1"), dev).label).toContain("SHARDS_PER_REGION 1");
    // No DEFAULT_REGION deployed: the service's own default (the first region), not .dev.vars' local one.
    expect(stackVars(`[vars]\nREGIONS = "enam"\n`, dev).vars).not.toHaveProperty("DEFAULT_REGION");
    expect(stackVars(toml("4"), dev, 1).vars).toMatchObject({
      REGIONS: "local",
      SHARDS_PER_REGION: "1",
      MAX_SHARDS_PER_REGION: "1",
    });
  });

  it("charts both products on log axes and says an idle bill of $0 rather than drawing it", () => {
    const levels = [
      { rate: 1, usd: 0.5, cq_usd: 3.15 },
      { rate: 1000, usd: 400, cq_usd: 3153.6 },
    ];
    const zeroIdle = costRateChart("t", levels, { usd: 0, cq_usd: 0 });
    expect(zeroIdle.match(/<polyline/g)).toHaveLength(2);
    expect(zeroIdle).toContain("shardq (idle: $0.00, off the log axis)");
    expect(zeroIdle).toContain(">1,000/s<");
    expect(zeroIdle).not.toContain("idle $");
    expect(costRateChart("t", levels, { usd: 47.47, cq_usd: 0 })).toContain(">idle $47.47<");
  });

  it("puts the idle bill on a line of its own above the table", () => {
    const p = {
      seconds: 600,
      delta: delta({}),
      perHour: { requests: 0, alarms: 0, rowsWritten: 0, rowsRead: 0, delivered: 0 },
      usd: 0,
      cq_usd: 0,
      restarted: 0,
      shards: { storage: 1, consumer: 1 },
    };
    const md = trafficMarkdown({
      label: "x",
      idle: p,
      levels: [{ ...p, seconds: 60, rate: 10, offered: 600, failed: 0, usd: 1.5, cq_usd: 3 }],
      idleSeconds: 600,
      seconds: 60,
      warm: 15,
    });
    expect(md).toContain("Idle, on its own: **$0.00 per queue-month** (Cloudflare Queues: $0.00)");
    expect(md).toMatch(/\| idle \(600 s\) \| 0 \|/);
    expect(md).toMatch(/\| 10 send\(\)\/s \(60 s; 1 storage shard\(s\)\) \| .* \| \*\*\$1\.50\*\* \| \$3\.00 \|/);
  });
});

/** Runs `npm run bench -- args` as a user would; its output once it exits 0. */
function bench(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(ROOT, "bench", "cli.mjs"), ...args], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (out += c));
    child.on("exit", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`bench ${args.join(" ")} exited ${code}:\n${out}`)),
    );
  });
}

describe("npm run bench -- idle | traffic | wake, quickest forms", () => {
  const out = mkdtempSync(join(tmpdir(), "shardq-e2e-traffic-"));
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it("idle prints the idle queue's counts per hour and $ per queue-month beside Cloudflare Queues, on the deployed defaults", async () => {
    const text = await bench(["idle", "--settle", "1", "--seconds", "3"]);
    expect(text).toMatch(
      /wrangler\.toml's defaults \(REGIONS [^)]+\): \d+ storage shard\(s\), \d+ consumer shard\(s\)/,
    );
    expect(text).toContain(
      "| traffic | messages delivered / h | DO requests / h (alarms) | rows written / h | rows read / h | shardq $ per queue-month | Cloudflare Queues $ per queue-month |",
    );
    expect(text).toMatch(
      /\| idle, \d+ storage shard\(s\) \| 0 \| [\d,]+ \([\d,]+\) \| [\d,]+ \| [\d,]+ \| \*\*\$\d+\.\d\d\*\*.* \| \$0\.00 \|/,
    );
    expect(text).toMatch(/DO requests \/ h by class: /);
  }, 180_000);

  it("traffic prices the idle window and each rate, and writes the table, the JSON and the chart", async () => {
    const text = await bench([
      "traffic",
      "--settle",
      "1",
      "--idle-seconds",
      "3",
      "--warm",
      "1",
      "--seconds",
      "3",
      "--rates",
      "1,20",
      "--shards",
      "1",
      "--out",
      out,
    ]);
    expect(text).toMatch(/Idle, on its own: \*\*\$\d+\.\d\d per queue-month\*\* \(Cloudflare Queues: \$0\.00\)/);
    expect(text).toMatch(/\| 1 send\(\)\/s \(\d+ s; 1 storage shard\(s\)\) \| [\d,]+ \|/);
    expect(text).toMatch(
      /\| 20 send\(\)\/s \(\d+ s; 1 storage shard\(s\)\) \| [\d,]+ \| .* \| \*\*\$\d+\.\d\d\*\* \| \$\d+\.\d\d \|/,
    );
    const files = readdirSync(out);
    expect(files.filter((f) => /-traffic\.(json|md|svg)$/.test(f))).toHaveLength(3);
    const json = JSON.parse(
      readFileSync(
        join(
          out,
          files.find((f) => f.endsWith(".json"))!,
        ),
        "utf8",
      ),
    );
    expect(json.levels.map((l: { rate: number }) => l.rate)).toEqual([1, 20]);
    expect(json.levels[1].perHour.delivered).toBeGreaterThan(0);
    expect(
      readFileSync(
        join(
          out,
          files.find((f) => f.endsWith(".svg"))!,
        ),
        "utf8",
      ),
    ).toContain("<polyline");
  }, 240_000);

  it("wake times the push delivery and the long poll's answer from each send's start and answer", async () => {
    const text = await bench(["wake", "--every", "2", "--times", "2", "--shards", "1"]);
    expect(text).toContain("every 2 s, 2 times");
    expect(text).toMatch(
      /\| push \(Worker consumer, batch_size 1\) \| \d+ \/ \d+ \/ \d+ \| \d+ \/ \d+ \| (met|not met) \|/,
    );
    expect(text).toMatch(/\| long poll \(wait_time_ms 20000\) \| \d+ \/ \d+ \/ \d+ \| \d+ \/ \d+ \| (met|not met) \|/);
  }, 180_000);
});
