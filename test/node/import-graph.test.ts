// The layering of docs/architecture.md, held by the same check CI runs (npm run check:imports).
import { describe, expect, it } from "vitest";
import { importGraph, placeOf } from "../../scripts/import-graph.mjs";

describe("the service's import graph", () => {
  it("has no circle, no import up a layer or sideways between parts, and no file outside the layers", () => {
    const { files, circles, wrongWay, unplaced } = importGraph();
    expect(files.length).toBeGreaterThan(50);
    expect(circles).toEqual([]);
    expect(wrongWay).toEqual([]);
    expect(unplaced).toEqual([]);
  });

  it("places the entry above the edge, the services above the objects and the kernel at the bottom", () => {
    const order = ["src/worker.ts", "broker/http/router.ts", "src/delivery/settle.ts", "src/routing/store.ts", "storage-shard/storage-shard.ts", "src/kernel/protocol.ts"].map((f) => placeOf(f)?.index ?? -1);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(new Set(order).size).toBe(order.length);
  });
});
