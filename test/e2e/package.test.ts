// shardq as a user gets it: `npm pack` in this checkout, the tarball installed into an empty
// Workers project outside it (`npm install --save-dev <tarball>`, which reaches the npm registry,
// or npm's cache, for the dependencies), and there, as a user would: `npx shardq --help`,
// shardq/client from plain Node, the project's Workers type-checked against the package's
// declarations, `npx shardq dev` with a producer Worker that imports shardq/producer and a
// consumer Worker that imports shardq/consumer (a message from the one reaches the other, and
// one sent with shardq/client from Node too), and `shardq deploy-config` with every config it
// writes, and shardq's own config as docs/install.md has it, bundled by `wrangler deploy --dry-run`.
// Also what the tarball holds: what users run, and none of the tests, benchmarks or their results.
// The commands it runs and the project's Workers: package-helpers.ts.
import { spawn, type ChildProcess } from "node:child_process";
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, freePort } from "../../cli/wrangler/dev-server.mjs";
import { sleep } from "../../src/kernel/sleep.ts";
import { groupAlive, listTree, TOKEN, waitFor } from "./helpers.ts";
import {
  cleanEnv,
  CONSUMER_CONFIG,
  CONSUMER_SOURCE,
  PRODUCER_CONFIG,
  PRODUCER_SOURCE,
  run,
} from "./package-helpers.ts";

const RUNNING = "shardq dev is running";

interface PackedFile {
  path: string;
  size: number;
}

const checkoutPackage = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  version: string;
  exports: Record<string, string | { types: string; default: string }>;
  bin: Record<string, string>;
};
const installedVersion = (name: string) =>
  (JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")) as { version: string }).version;

describe("shardq as an npm package, installed into a Workers project", () => {
  const work = mkdtempSync(join(tmpdir(), "shardq-e2e-package-"));
  const project = join(work, "shop");
  const state = join(work, "state");
  let tarball = "";
  let packed: PackedFile[] = [];
  let shardqPort = 0;
  let producerPort = 0;
  let consumerPort = 0;
  let dev: { child: ChildProcess; output: () => string; pids: number[] } | undefined;

  const npx = (args: string[], timeoutMs = 120_000) => run("npx", ["--no", "--", ...args], { cwd: project, timeoutMs });

  beforeAll(async () => {
    // The tarball, as `npm pack` makes it, of the lib/ the test run built at its start
    // (vitest.config.ts): "prepare" would build lib/ again and swap it in under the other test
    // files' running `wrangler dev`s, whose bundlers read shardq/consumer from it.
    const pack = await run("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", work], {
      cwd: ROOT,
      timeoutMs: 180_000,
    });
    expect(pack.code, `npm pack failed:\n${pack.out}\n${pack.err}`).toBe(0);
    const [info] = JSON.parse(pack.out.slice(pack.out.search(/^\[/m))) as Array<{
      filename: string;
      files: PackedFile[];
    }>;
    tarball = join(work, info!.filename);
    packed = info!.files;

    // An empty Workers project: wrangler and the Workers types, as every Workers project has,
    // a tsconfig as `npm create cloudflare` writes one, and two Workers written for Cloudflare
    // Queues that use shardq's helpers. Then shardq, from the tarball.
    mkdirSync(project);
    writeFileSync(
      join(project, "package.json"),
      `${JSON.stringify({ name: "shop", private: true, type: "module", devDependencies: { wrangler: installedVersion("wrangler"), "@cloudflare/workers-types": installedVersion("@cloudflare/workers-types") } }, null, 2)}\n`,
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      `${JSON.stringify({ compilerOptions: { target: "es2024", lib: ["es2024"], module: "es2022", moduleResolution: "bundler", types: ["@cloudflare/workers-types"], strict: true, noEmit: true, isolatedModules: true }, include: ["producer/src", "consumer/src"] }, null, 2)}\n`,
    );
    const ports = new Set<number>();
    while (ports.size < 3) ports.add(await freePort());
    [shardqPort, producerPort, consumerPort] = [...ports] as [number, number, number];
    writeWorker("producer", PRODUCER_CONFIG(producerPort), PRODUCER_SOURCE);
    writeWorker("consumer", CONSUMER_CONFIG(consumerPort), CONSUMER_SOURCE);

    const install = await run(
      "npm",
      ["install", "--save-dev", tarball, "--no-audit", "--no-fund", "--prefer-offline"],
      { cwd: project, timeoutMs: 400_000 },
    );
    expect(install.code, `npm install <tarball> failed:\n${install.out}\n${install.err}`).toBe(0);
  }, 600_000);

  afterAll(async () => {
    await stopDev();
    rmSync(work, { recursive: true, force: true });
  });

  function writeWorker(name: string, config: string, source: string) {
    mkdirSync(join(project, name, "src"), { recursive: true });
    writeFileSync(join(project, name, "wrangler.toml"), config);
    writeFileSync(join(project, name, "src", "index.ts"), source);
  }

  async function stopDev() {
    const d = dev;
    dev = undefined;
    if (!d) return;
    // Ctrl-C: SIGINT to the whole foreground group (npx and the shardq dev it runs).
    try {
      process.kill(-d.child.pid!, "SIGINT");
    } catch {}
    const deadline = Date.now() + 45_000;
    while (groupAlive(d.child.pid!) && Date.now() < deadline) await sleep(200);
    const left = [d.child.pid!, ...d.pids].filter(groupAlive);
    for (const pid of left) process.kill(-pid, "SIGKILL");
    expect(left, `process groups left running after Ctrl-C:\n${d.output().slice(-3000)}`).toEqual([]);
  }

  it("packs only what users run: the service's sources and wrangler.toml, the CLI (with the modules `shardq dev` and `shardq deploy-config` run), the dashboard, lib/ (JavaScript and declarations for every export)", () => {
    const paths = packed.map((f) => f.path).sort();
    const allowed = [
      /^package\.json$/,
      /^README\.md$/,
      /^LICENSE$/,
      /^wrangler\.toml$/,
      /^\.dev\.vars$/,
      /^bin\/shardq\.mjs$/,
      /^cli\//,
      /^lib\//,
      /^src\//,
      /^broker\//,
      /^coordinator\//,
      /^storage-shard\//,
      /^consumer-shard\//,
      /^dashboard\/public\/dashboard\//,
    ];
    expect(paths.filter((p) => !allowed.some((a) => a.test(p)))).toEqual([]);
    for (const p of paths)
      expect(p).not.toMatch(
        /(^|\/)(test|tests|bench|examples|docs|test-artifacts|\.wrangler|node_modules|dist)\/|\.test\.ts$|\.(svg|png|jpe?g)$|^wrangler\.(dev|bench)/,
      );
    const wrangler = ["dev-server", "dev-config"].map((m) => `cli/wrangler/${m}.mjs`);
    const workers = [
      "apply-config",
      "consumer-wrapper",
      "deploy-config",
      "dev-session",
      "queue-plan",
      "worker-configs",
    ].map((m) => `cli/workers/${m}.mjs`);
    for (const m of [...wrangler, ...workers]) expect(paths).toContain(m);
    // Every export, its JavaScript and its declarations; the bin; what `shardq dev` reads.
    for (const [name, target] of Object.entries(checkoutPackage.exports)) {
      const files = typeof target === "string" ? [target] : [target.types, target.default];
      for (const f of files) expect(paths, `exports["${name}"]`).toContain(f.replace(/^\.\//, ""));
      if (typeof target !== "string")
        expect(target.default, `exports["${name}"] is JavaScript`).toMatch(/^\.\/lib\/.*\.js$/);
    }
    for (const f of [
      "bin/shardq.mjs",
      "wrangler.toml",
      ".dev.vars",
      "src/worker.ts",
      "src/consumer/entrypoint.ts",
      "dashboard/public/dashboard/index.html",
    ])
      expect(paths).toContain(f);
    // Every relative import of a packed declaration names a packed file (a plain JavaScript
    // module's hand-written .d.mts included): the declarations resolve wherever they are installed.
    const declarations = paths.filter((f) => /^lib\/types\/.*\.d\.m?ts$/.test(f));
    expect(declarations.length).toBeGreaterThan(0);
    for (const f of declarations) {
      const text = readFileSync(join(ROOT, f), "utf8");
      for (const [, spec] of text.matchAll(/(?:from\s+|import\()["'](\.{1,2}\/[^"']+)["']/g)) {
        const base = posix.join(posix.dirname(f), spec!).replace(/\.(m?js)$/, "");
        const candidates = [`${base}.d.ts`, `${base}.d.mts`, `${base}/index.d.ts`];
        expect(
          candidates.some((c) => paths.includes(c)),
          `${f} imports ${spec}`,
        ).toBe(true);
      }
    }
    // The whole of it stays small (the benchmark's results alone were 1.5 MB).
    expect(packed.reduce((n, f) => n + f.size, 0)).toBeLessThan(2_000_000);
  });

  it("installs from the tarball into a project outside the checkout, with wrangler as the project's own, and `npx shardq --help` runs", async () => {
    const pkg = JSON.parse(readFileSync(join(project, "package.json"), "utf8")) as {
      devDependencies: Record<string, string>;
    };
    expect(pkg.devDependencies.shardq).toMatch(/^file:.*shardq-0\.1\.0\.tgz$/);
    const installed = join(project, "node_modules", "shardq");
    expect(lstatSync(installed).isSymbolicLink()).toBe(false);
    const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8")) as {
      private?: boolean;
      engines: { node: string };
      peerDependencies: Record<string, string>;
    };
    expect(manifest.private).toBeUndefined();
    expect(manifest.peerDependencies.wrangler).toBeDefined();
    expect(manifest.engines.node).toBe(
      `>=${/(\d+\.\d+\.\d+)/.exec((JSON.parse(readFileSync(join(ROOT, "node_modules", "wrangler", "package.json"), "utf8")) as { engines: { node: string } }).engines.node)![1]}`,
    );
    // One wrangler, the project's: shardq finds it from where it is installed.
    expect(readdirSync(join(installed))).not.toContain("node_modules");

    const help = await npx(["shardq", "--help"]);
    expect(help.code, help.err).toBe(0);
    expect(help.out).toMatch(/^shardq: manage queues/);
    expect(help.out).toMatch(/\n {2}dev +Run shardq locally with your own Workers/);
  });

  it("imports shardq/client from plain Node, and resolves every export to the package's built JavaScript", async () => {
    const script = [
      'import { createClient, ApiError } from "shardq/client";',
      'for (const name of ["shardq/client", "shardq/consumer", "shardq/producer"]) console.log(name, import.meta.resolve(name));',
      'const client = createClient({ url: "http://127.0.0.1:1", token: "t", account: "local" });',
      'console.log("client", typeof client.queue, typeof ApiError);',
    ].join("\n");
    const r = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: project, timeoutMs: 30_000 });
    expect(r.code, r.err).toBe(0);
    const base = `file://${join(project, "node_modules", "shardq", "lib")}`;
    expect(r.out).toContain(`shardq/client ${base}/client/index.js\n`);
    expect(r.out).toContain(`shardq/consumer ${base}/consumer/index.js\n`);
    expect(r.out).toContain(`shardq/producer ${base}/producer/index.js\n`);
    expect(r.out).toContain("client function function");
  });

  it("type-checks the project's Workers against shardq/consumer's and shardq/producer's declarations", async () => {
    const r = await run(join(ROOT, "node_modules", ".bin", "tsc"), ["-p", join(project, "tsconfig.json")], {
      cwd: project,
      timeoutMs: 120_000,
    });
    expect(r.code, `${r.out}\n${r.err}`).toBe(0);
  });

  it("`npx shardq dev` runs the project's producer (shardq/producer) and consumer (shardq/consumer): a message reaches the consumer, from the producer and from shardq/client in Node", async () => {
    const installed = join(project, "node_modules", "shardq");
    const packageBefore = listTree(installed);
    const projectBefore = listTree(project, (p) => p !== "node_modules" && !p.startsWith("node_modules/"));

    const child = spawn(
      "npx",
      [
        "--no",
        "--",
        "shardq",
        "dev",
        "-c",
        "producer/wrangler.toml",
        "-c",
        "consumer/wrangler.toml",
        "--port",
        String(shardqPort),
        "--state",
        state,
      ],
      {
        cwd: project,
        env: cleanEnv(),
        stdio: ["ignore", "pipe", "pipe"],
        // Its own process group, as a terminal's foreground job: Ctrl-C reaches npx and shardq dev alike.
        detached: true,
      },
    );
    let output = "";
    child.stdout!.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (output += c.toString()));
    dev = { child, output: () => output, pids: [] };
    const deadline = Date.now() + 150_000;
    while (!output.includes(RUNNING)) {
      if (child.exitCode !== null)
        throw new Error(`npx shardq dev exited with ${child.exitCode}:\n${output.slice(-5000)}`);
      if (Date.now() > deadline)
        throw new Error(`npx shardq dev was not running within 150 s:\n${output.slice(-5000)}`);
      await sleep(200);
    }
    await sleep(100);
    dev.pids = [...output.slice(output.indexOf(RUNNING)).matchAll(/\(pid (\d+)\)/g)].map((m) => Number(m[1]));
    expect(dev.pids).toHaveLength(3);
    // shardq's Worker runs from the installed package's sources.
    expect(readFileSync(join(state, "shardq", "wrangler.toml"), "utf8")).toMatch(
      /^main = ".*node_modules\/shardq\/src\/worker\.ts"$/m,
    );

    // The producer's batchingQueue() sends ten, one send() each, cut into sendBatch() calls.
    const sent = await fetch(`http://127.0.0.1:${producerPort}/send?count=10`, { method: "POST" });
    expect(sent.status, await sent.clone().text()).toBe(200);
    expect(await sent.json()).toEqual({ sent: 10, ids: 10 });
    // And one more from Node, through shardq/client.
    const client = await run(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { createClient } from "shardq/client"; const c = createClient({ url: "http://127.0.0.1:${shardqPort}", token: "${TOKEN}", account: "local" }); const r = await c.queue("orders").send({ from: "client" }); console.log(JSON.stringify(r));`,
      ],
      { cwd: project, timeoutMs: 30_000 },
    );
    expect(client.code, client.err).toBe(0);
    expect(JSON.parse(client.out)).toMatchObject({ messageId: expect.any(String) });

    const received = await waitFor(
      async () =>
        (
          (await (await fetch(`http://127.0.0.1:${consumerPort}/received`)).json()) as {
            received: Array<{ from: string; n?: number }>;
          }
        ).received,
      (r) => r.length >= 11,
      60_000,
    );
    expect(
      received
        .filter((b) => b.from === "producer")
        .map((b) => b.n)
        .sort((a, b) => a! - b!),
    ).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(received.filter((b) => b.from === "client")).toHaveLength(1);

    await stopDev();
    // Nothing written into the installed package, nor next to the project's files.
    expect(listTree(installed)).toEqual(packageBefore);
    expect(listTree(project, (p) => p !== "node_modules" && !p.startsWith("node_modules/"))).toEqual(projectBefore);
  }, 300_000);

  it("deploys from the installed package: `npx shardq deploy-config`, then every Worker and shardq (its config as docs/install.md writes it) bundled by `wrangler deploy --dry-run`", async () => {
    const r = await npx([
      "shardq",
      "deploy-config",
      "-c",
      "producer/wrangler.toml",
      "-c",
      "consumer/wrangler.toml",
      "--out",
      "shardq-deploy",
      "--account",
      "shop",
    ]);
    expect(r.code, `${r.out}\n${r.err}`).toBe(0);
    const out = join(project, "shardq-deploy");
    // The consumer's entry imports shardq/consumer by the package's name: the built module.
    expect(readFileSync(join(out, "shop-consumer", "shardq-consumer-entry.mjs"), "utf8")).toMatch(
      /^import \{ consumerEntrypoint \} from "shardq\/consumer";$/m,
    );

    // shardq's own config in the project: the package's wrangler.toml with its two paths
    // pointing into node_modules, and the [[services]] lines deploy-config wrote.
    const config = readFileSync(join(project, "node_modules", "shardq", "wrangler.toml"), "utf8")
      .replace(/^main = "src\/worker\.ts"$/m, 'main = "node_modules/shardq/src/worker.ts"')
      .replace(/^bucket = "dashboard\/public"$/m, 'bucket = "node_modules/shardq/dashboard/public"');
    expect(config).toContain('main = "node_modules/shardq/src/worker.ts"');
    expect(config).toContain('bucket = "node_modules/shardq/dashboard/public"');
    writeFileSync(
      join(project, "shardq.wrangler.toml"),
      `${config}\n${readFileSync(join(out, "shardq.services.toml"), "utf8")}`,
    );

    for (const [name, file] of [
      ["shop-consumer", join(out, "shop-consumer", "wrangler.toml")],
      ["shardq", join(project, "shardq.wrangler.toml")],
      ["shop-producer", join(out, "shop-producer", "wrangler.toml")],
    ] as const) {
      const d = await run(
        "npx",
        ["--no", "--", "wrangler", "deploy", "--dry-run", "--outdir", join(work, "bundles", name), "-c", file],
        {
          cwd: project,
          timeoutMs: 180_000,
          env: { WRANGLER_CACHE_DIR: join(work, "wrangler-cache") },
        },
      );
      expect(d.code, `${name}:\n${d.out}\n${d.err}`).toBe(0);
      expect(d.out).toMatch(/--dry-run: exiting now/);
    }
  }, 300_000);
});
