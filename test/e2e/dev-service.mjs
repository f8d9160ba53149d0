// The service as `npm start` runs it (the dev config plus the example consumer), under
// `wrangler dev` on a free loopback port, with its own state and its own dev registry so
// that no other wrangler dev on the machine binds to it. Stopped by its process group.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writeDevConfig } from "../../cli/wrangler/dev-config.mjs";
import { startWranglerOnFreePort } from "../../cli/wrangler/dev-server.mjs";

/** Ports tried before a start that found its port taken gives up. */
const PORT_ATTEMPTS = 3;

/**
 * @typedef {{ base: string, pid: number | undefined, registry: string, stop: () => Promise<void> }} DevService
 * `stop` also removes its registry, and its state unless the caller gave the state directory.
 */

/**
 * @param {string} name names the temporary directories
 * @param {string[]} [extraArgs] more wrangler dev arguments (e.g. `--var K:V`)
 * @param {{ stateDir?: string }} [opts] `stateDir`: persist there (the caller's, kept on stop) instead of a new temporary directory
 * @returns {Promise<DevService>}
 */
export async function startDevService(name, extraArgs = [], opts = {}) {
  const stateDir = opts.stateDir ?? mkdtempSync(join(tmpdir(), `shardq-e2e-${name}-`));
  const registry = mkdtempSync(join(tmpdir(), "shardq-e2e-registry-"));
  const cleanUp = () => {
    if (opts.stateDir === undefined) rmSync(stateDir, { recursive: true, force: true });
    rmSync(registry, { recursive: true, force: true });
  };
  let server;
  try {
    server = await startWranglerOnFreePort(
      (port) => ({
        args: [
          "-c",
          writeDevConfig(),
          "-c",
          "examples/consumer/wrangler.toml",
          "--port",
          String(port),
          "--ip",
          "127.0.0.1",
          "--persist-to",
          stateDir,
          "--inspector-port",
          "0",
          ...extraArgs,
        ],
        readyUrl: `http://127.0.0.1:${port}/`,
        env: { WRANGLER_REGISTRY_PATH: registry },
      }),
      PORT_ATTEMPTS,
    );
  } catch (err) {
    cleanUp();
    throw err;
  }
  const base = `http://127.0.0.1:${server.port}`;
  return {
    base,
    pid: server.pid,
    registry,
    stop: async () => {
      await server.stop();
      cleanUp();
    },
  };
}
