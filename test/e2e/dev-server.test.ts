// cli/wrangler/dev-server.mjs's start of `wrangler dev` when another process holds the port it was
// given: a server that answers on that port is not taken for wrangler, and the start on a free
// port tries another one.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startWrangler, startWranglerOnFreePort } from "../../cli/wrangler/dev-server.mjs";

const state = mkdtempSync(join(tmpdir(), "shardq-e2e-dev-server-"));
const args = (port: number) => [
  "-c",
  "examples/consumer/wrangler.toml",
  "--port",
  String(port),
  "--ip",
  "127.0.0.1",
  "--inspector-port",
  "0",
  "--persist-to",
  state,
];

describe("starting wrangler dev on a port another process took", () => {
  let taken: Server;
  let port = 0;
  beforeAll(async () => {
    // As an inspector answers a request without its Origin.
    taken = createServer((_req, res) => res.writeHead(403).end("Forbidden"));
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    port = (taken.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await new Promise<void>((resolve) => taken.close(() => resolve()));
    rmSync(state, { recursive: true, force: true });
  });

  it("fails with EADDRINUSE instead of taking the other server's answer for wrangler's", async () => {
    const err = await startWrangler({ args: args(port), readyUrl: `http://127.0.0.1:${port}/` }).then(
      async (s) => {
        await s.stop();
        return null;
      },
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: "EADDRINUSE" });
    expect(String(err)).toContain("Address already in use");
  });

  it("on a free port, tries another when the first was taken, and says which one it runs on", async () => {
    const given: number[] = [];
    const server = await startWranglerOnFreePort((free) => {
      // The first attempt as if its free port had been taken meanwhile.
      const p = given.length === 0 ? port : free;
      given.push(p);
      return { args: args(p), readyUrl: `http://127.0.0.1:${p}/` };
    });
    try {
      expect(given).toHaveLength(2);
      expect(given[0]).toBe(port);
      expect(server.port).toBe(given[1]);
      const res = await fetch(`http://127.0.0.1:${server.port}/stats`);
      expect(res.status).toBe(200);
    } finally {
      await server.stop();
    }
  });
});
