// The side-by-side benchmark's CI smoke run: `npm run bench -- compare --quick` starts
// both systems, runs every workload, and writes a report whose figures are filled in.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { compare } from "../../bench/compare.mjs";

describe("npm run bench -- compare --quick", () => {
  const out = mkdtempSync(join(tmpdir(), "shardq-compare-results-"));
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it("runs every workload on both systems and writes the JSON, Markdown and SVG charts", async () => {
    const { files, rows } = await compare(["--quick", "--out", out]);
    const json = JSON.parse(readFileSync(files.json, "utf8"));
    const delivered = (workload: string) =>
      rows.find((r) => r.workload === workload && r.metric === "delivered_msgs_per_s");
    for (const w of ["w1", "w1b", "w2"]) {
      expect(delivered(w)?.simulator?.median).toBeGreaterThan(0);
      expect(delivered(w)?.shardq?.median).toBeGreaterThan(0);
    }
    // Every message delivered on both systems, in every run.
    for (const run of json.runs.filter((r: { workload: string }) => r.workload !== "w3" && r.workload !== "w6")) {
      const w = json.workloads.find((x: { id: string }) => x.id === run.workload);
      expect(run.figures.delivered).toBe(w.count);
    }
    // Autoscaling: from one shard to more under 4x its capacity, every message sent and delivered.
    const w6 = json.runs.find((r: { workload: string }) => r.workload === "w6").figures;
    expect(w6).toMatchObject({ send_errors: 0, shards_at_start: 1, delivered: w6.sent });
    expect(w6.shards_peak).toBeGreaterThan(1);
    expect(json.timelines[0].samples.length).toBeGreaterThan(3);
    expect(rows.find((r) => r.workload === "w5-10k" && r.metric === "cpu_us_per_msg")?.shardq?.median).toBeGreaterThan(
      0,
    );
    expect(rows.find((r) => r.workload === "w1" && r.metric === "cpu_us_per_msg")?.simulator?.median).toBeGreaterThan(
      0,
    );
    expect(rows.find((r) => r.workload === "w1" && r.metric === "do_rpcs_per_msg")?.shardq?.median).toBeGreaterThan(0);
    // A cost block for every shardq run: a positive price per million delivered, beside Cloudflare
    // Queues' for the same messages, and rows written and read per message for every workload.
    for (const run of json.runs.filter((r: { system: string }) => r.system === "shardq")) {
      expect(run.cost.usd_per_million_delivered, run.workload).toBeGreaterThan(0);
      expect(run.cost.cq_usd_per_million, run.workload).toBeGreaterThan(0);
      expect(run.cost.ratio_vs_cq, run.workload).toBeGreaterThan(0);
      expect(run.cost.counts.do_requests, run.workload).toBeGreaterThan(0);
      expect(run.figures.rows_written_per_msg, run.workload).toBeGreaterThan(0);
      expect(run.figures.rows_read_per_msg, run.workload).toBeGreaterThan(0);
    }
    // The ceiling: one storage shard alone, and every shardq workload's throughput as a fraction of it.
    expect(json.ceiling.batch.msgs_per_s).toBeGreaterThan(0);
    expect(json.ceiling.single.msgs_per_s).toBeGreaterThan(0);
    expect(json.ceiling.batch.rows_written_per_msg).toBeGreaterThan(0);
    expect(rows.find((r) => r.workload === "w2" && r.metric === "ceiling_fraction")?.shardq?.median).toBeGreaterThan(0);
    // Ordered lanes (w8): the pair's ratio from each run, the hot key's cadence against its control, and their goal lines.
    expect(
      rows.find((r) => r.workload === "w8" && r.metric === "ordered_to_unordered")?.shardq?.median,
    ).toBeGreaterThan(0);
    expect(
      rows.find((r) => r.workload === "w8-hot" && r.metric === "batches_per_round_trip")?.shardq?.median,
    ).toBeGreaterThan(0);
    const md = readFileSync(files.md, "utf8");
    expect(md).toContain("### Ordered lanes");
    expect(md).toContain("### Cost at Cloudflare's list prices");
    expect(md).toMatch(/\| w1 \| [\d.]+ \| 1\.2 \|/);
    expect(md).toContain("### Ceiling: one storage shard alone");
    expect(readFileSync(files.md, "utf8")).toContain(
      "| w1: send() from a Worker, 256 in flight | delivered_msgs_per_s |",
    );
    expect(readFileSync(files.svg, "utf8")).toMatch(/^<svg /);
    for (const chart of ["w1-latency", "w4-latency", "w6-autoscaling"]) {
      expect(readFileSync(files.json.replace(/\.json$/, `-${chart}.svg`), "utf8")).toMatch(/^<svg .*<polyline/s);
      expect(readFileSync(files.md, "utf8")).toContain(`-${chart}.svg)`);
    }
  });
});
