// The layering of docs/architecture.md, with the tools that run the service above it, held by
// the same check CI runs (npm run check:imports).
import { describe, expect, it } from "vitest";
import { importGraph, placeOf } from "../../scripts/import-graph.mjs";

describe("the import graph outside the tests", () => {
  it("has no circle, no import up a layer or sideways between parts, and no file outside the layers", () => {
    const { files, circles, wrongWay, unplaced } = importGraph();
    expect(files.length).toBeGreaterThan(50);
    expect(circles).toEqual([]);
    expect(wrongWay).toEqual([]);
    expect(unplaced).toEqual([]);
    for (const folder of ["bin", "cli", "bench", "scripts"])
      expect(
        files.some((f) => f.startsWith(`${folder}/`)),
        folder,
      ).toBe(true);
  });

  it("places the entry above the edge, the services above the objects and the kernel at the bottom", () => {
    const order = [
      "src/worker.ts",
      "broker/http/router.ts",
      "src/delivery/settle.ts",
      "src/routing/store.ts",
      "storage-shard/storage-shard.ts",
      "src/kernel/protocol.ts",
    ].map((f) => placeOf(f)?.index ?? -1);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(new Set(order).size).toBe(order.length);
  });

  it("places the benchmarks, the scripts and the CLI above the service, the command above the CLI's code", () => {
    const order = ["bench/compare.mjs", "scripts/start.mjs", "bin/shardq.mjs", "cli/main.mjs", "src/worker.ts"].map(
      (f) => placeOf(f)?.index ?? -1,
    );
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(new Set(order).size).toBe(order.length);
  });

  it("knows the storage shard's rooms and no folder beside them", () => {
    const top = placeOf("storage-shard/storage-shard.ts");
    for (const f of [
      "storage-shard/segments/segment.ts",
      "storage-shard/keyed/key-book.ts",
      "storage-shard/handoff/handoff.ts",
    ])
      expect(placeOf(f)).toEqual(top);
    expect(placeOf("storage-shard/unnamed/file.ts")).toBeNull();
  });
});
