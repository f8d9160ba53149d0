// The fault run's end is bounded (test/faults/watchdog.mjs): a step that hangs is named and
// passed, and past the run's deadline it ends with what it was still waiting for.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { apiClient } from "../faults/client.mjs";
import { History } from "../faults/history.mjs";
import { Watchdog } from "../faults/watchdog.mjs";

const dirs: string[] = [];
afterEach(() => {
  vi.unstubAllGlobals();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function setUp() {
  const dir = mkdtempSync(join(tmpdir(), "watchdog-"));
  dirs.push(dir);
  const history = new History(join(dir, "history.jsonl"));
  const lines: string[] = [];
  return { history, lines, dog: new Watchdog({ history, log: (l) => lines.push(l) }) };
}

describe("the fault run's watchdog", () => {
  it("ends a harness call that never settles (a fetch that ignores its signal) as unknown, by the client's own timer", async () => {
    // What two pulls of a full run did (seed 357234014): pending with no socket, long past their timeout.
    vi.stubGlobal("fetch", () => new Promise(() => {}));
    const api = apiClient({ base: "http://127.0.0.1:9", token: "t", timeoutMs: 100 });
    const started = Date.now();
    const r = await api.call("POST", "/faults/messages/pull", { batch_size: 1 });
    expect(r).toMatchObject({ outcome: "unknown", status: null, error: expect.stringMatching(/^timeout/) });
    expect(Date.now() - started).toBeLessThan(3000);
  }, 10_000);

  it("goes on past a step that never ends, naming it and the operations still open", async () => {
    const { history, lines, dog } = setUp();
    history.invoke("consumer-2", "pull", { q: "faults" });
    const ended = await dog.bounded("the producers and consumers to stop", new Promise(() => {}), 50);
    expect(ended).toBe(false);
    expect(dog.stuck).toEqual(["the producers and consumers to stop"]);
    expect(lines.join("\n")).toMatch(
      /still waiting for the producers and consumers to stop after 0 s, going on without it; open operations: consumer-2 pull x1/,
    );
    expect(await dog.bounded("the history file to close", history.close(), 5000)).toBe(true);
    // A client completing after the history closed is dropped, not an error.
    expect(() => history.complete(0, "ok")).not.toThrow();
  });

  it("ends a run at its deadline with what it was waiting for, and stops the service", async () => {
    const { history, lines, dog } = setUp();
    let stopped = false;
    dog.onExpire.push(() => (stopped = true));
    dog.step("the check of the history");
    dog.deadline(Date.now() + 30);
    const run = Promise.race([new Promise(() => {}), dog.expired]);
    await expect(run).rejects.toThrow(/no verdict by its deadline .*: still waiting for the check of the history/);
    expect(stopped).toBe(true);
    expect(lines[0]).toMatch(/still waiting for the check of the history/);
    dog.disarm();
    await history.close();
  });
});
